//! Probe attempts with side effects: TCP connect, HTTP GET, file existence.
//!
//! Each function makes exactly one attempt bounded by its timeout and reports `Ok(())` or a
//! one-line reason. Retrying, intervals and deadlines are the machine's business, not this
//! module's. Exec probes are spawned by `spawn.rs` and reaped by the runtime (one owner of
//! `wait()`); log-line probes are matched by the log readers as lines arrive.

use std::path::PathBuf;
use std::time::Duration;

/// One TCP connect attempt.
pub async fn tcp(host: String, port: u16, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(
        timeout,
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    {
        Ok(Ok(_stream)) => Ok(()),
        Ok(Err(e)) => Err(format!("tcp {host}:{port}: {e}")),
        Err(_) => Err(format!(
            "tcp {host}:{port}: no answer within {} ms",
            timeout.as_millis()
        )),
    }
}

/// One HTTP GET attempt: the status must equal `status` and the body contain `body_contains`.
///
/// Blocking (ureq): run it on the blocking pool. Proxies from the environment are not used
/// (ureq's `proxy-from-env` feature is off): probes talk to the node itself.
pub fn http_blocking(
    host: &str,
    port: u16,
    path: &str,
    status: u16,
    body_contains: Option<&str>,
    timeout: Duration,
) -> Result<(), String> {
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    let url = format!("http://{host}:{port}{path}");
    let agent = ureq::AgentBuilder::new()
        .timeout(timeout)
        .redirects(0)
        .build();
    let resp = match agent.get(&url).call() {
        Ok(r) => r,
        // A non-2xx status is an answer, not a transport error: compare it like any other.
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => return Err(format!("GET {url}: {e}")),
    };
    let got = resp.status();
    if got != status {
        return Err(format!("GET {url}: status {got}, expected {status}"));
    }
    if let Some(needle) = body_contains {
        // Bounded read: a probe must not buffer an unbounded body.
        let mut body = String::new();
        use std::io::Read;
        let _ = resp.into_reader().take(1 << 20).read_to_string(&mut body);
        if !body.contains(needle) {
            return Err(format!("GET {url}: body does not contain {needle:?}"));
        }
    }
    Ok(())
}

/// One existence check (on the blocking pool: a stat on a network filesystem can hang).
pub async fn file(path: PathBuf, timeout: Duration) -> Result<(), String> {
    let p = path.clone();
    let check = tokio::task::spawn_blocking(move || p.exists());
    match tokio::time::timeout(timeout, check).await {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err(format!("{} does not exist", path.display())),
        Ok(Err(e)) => Err(format!("{}: {e}", path.display())),
        Err(_) => Err(format!(
            "{}: stat took longer than {} ms",
            path.display(),
            timeout.as_millis()
        )),
    }
}

/// Run an HTTP attempt on the blocking pool with an outer timeout as well.
pub async fn http(
    host: String,
    port: u16,
    path: String,
    status: u16,
    body_contains: Option<String>,
    timeout: Duration,
) -> Result<(), String> {
    let t = timeout;
    let job = tokio::task::spawn_blocking(move || {
        http_blocking(&host, port, &path, status, body_contains.as_deref(), t)
    });
    match tokio::time::timeout(timeout + Duration::from_millis(100), job).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(format!("http probe task failed: {e}")),
        Err(_) => Err(format!(
            "http probe: no answer within {} ms",
            timeout.as_millis()
        )),
    }
}

/// One HTTP GET whose body (at most 1 MiB) is the answer: for reading a server's state, not for
/// readiness. Status must be 200.
pub async fn http_body(
    host: String,
    port: u16,
    path: &'static str,
    timeout: Duration,
) -> Result<String, String> {
    let job = tokio::task::spawn_blocking(move || {
        let url = format!("http://{host}:{port}{path}");
        let agent = ureq::AgentBuilder::new()
            .timeout(timeout)
            .redirects(0)
            .build();
        let resp = agent
            .get(&url)
            .call()
            .map_err(|e| format!("GET {url}: {e}"))?;
        let mut body = String::new();
        use std::io::Read;
        resp.into_reader()
            .take(1 << 20)
            .read_to_string(&mut body)
            .map_err(|e| format!("GET {url}: {e}"))?;
        Ok(body)
    });
    match tokio::time::timeout(timeout + Duration::from_millis(100), job).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(format!("http task failed: {e}")),
        Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
    }
}
