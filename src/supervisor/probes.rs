//! Probe attempts with side effects: TCP connect, HTTP GET, file existence.
//!
//! Each function makes exactly one attempt bounded by its timeout and reports `Ok(())` or a
//! one-line reason. Retrying, intervals and deadlines are the machine's business, not this
//! module's. Exec probes are spawned by `spawn.rs` and reaped by the runtime (one owner of
//! `wait()`); log-line probes are matched by the log readers as lines arrive.

use std::path::PathBuf;
use std::time::Duration;

use crate::engine::frontend::{self, FrontendType, Seen};
use crate::engine::stop::MetricSum;
use crate::plan::ServableProbe;

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
    let resp = get_any_status(&url, timeout)?;
    let got = resp.status();
    // The body is read whatever is asked of it: a connection closed with an unread answer is
    // reset, and a Python server logs the reset as a traceback (one that would be taken for
    // what the process died of). Bounded: a probe must not buffer an unbounded body.
    let mut body = Vec::new();
    use std::io::Read;
    let _ = resp
        .into_reader()
        .take(PROBE_BODY_MAX)
        .read_to_end(&mut body);
    if got != status {
        return Err(format!("GET {url}: status {got}, expected {status}"));
    }
    if let Some(needle) = body_contains {
        if !String::from_utf8_lossy(&body).contains(needle) {
            return Err(format!("GET {url}: body does not contain {needle:?}"));
        }
    }
    Ok(())
}

/// The most of an answer's body an HTTP probe reads.
const PROBE_BODY_MAX: u64 = 1 << 20;

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
    off_the_loop(timeout, "http probe", "http probe: ", move || {
        http_blocking(
            &host,
            port,
            &path,
            status,
            body_contains.as_deref(),
            timeout,
        )
    })
    .await
}

/// Run a blocking attempt bounded by `bound` on the blocking pool, with an outer timeout of
/// `bound` + 100 ms as well: `task` names it if the task itself fails, `late` starts what is
/// said if it overruns.
async fn off_the_loop<T: Send + 'static>(
    bound: Duration,
    task: &str,
    late: &str,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let job = tokio::task::spawn_blocking(f);
    match tokio::time::timeout(bound + Duration::from_millis(100), job).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(format!("{task} task failed: {e}")),
        Err(_) => Err(format!("{late}no answer within {} ms", bound.as_millis())),
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
    off_the_loop(timeout, "http", "", move || {
        get_body_blocking(&format!("http://{host}:{port}{path}"), timeout)
    })
    .await
}

/// One read of an engine's metrics page (status 200, body at most 1 MiB).
pub async fn metrics_page(url: String, timeout: Duration) -> Result<String, String> {
    off_the_loop(timeout, "http", "", move || {
        get_body_blocking(&url, timeout)
    })
    .await
}

/// One read of an engine's in-flight gauge ([`metrics_page`]).
pub async fn inflight(gauge: MetricSum, timeout: Duration) -> Result<u64, String> {
    gauge.read(&metrics_page(gauge.url.clone(), timeout).await?)
}

/// What the frontend's health answer lists (one GET, status 200, body at most 1 MiB).
pub fn frontend_seen_blocking(
    host: &str,
    port: u16,
    frontend: FrontendType,
    timeout: Duration,
) -> Result<Seen, String> {
    let url = format!("http://{host}:{port}{}", frontend.health_path());
    let body = get_body_blocking(&url, timeout)?;
    frontend::parse_health(frontend, &body).map_err(|e| format!("GET {url}: {e}"))
}

/// One GET whose answer is the response, whatever its status: a non-2xx status is an answer, not
/// a transport error. Blocking.
fn get_any_status(url: &str, timeout: Duration) -> Result<ureq::Response, String> {
    let agent = ureq::AgentBuilder::new()
        .timeout(timeout)
        .redirects(0)
        .build();
    match agent.get(url).call() {
        Ok(r) => Ok(r),
        Err(ureq::Error::Status(_, r)) => Ok(r),
        Err(e) => Err(format!("GET {url}: {e}")),
    }
}

/// One GET: its status and body (at most 64 KiB), whatever the status; on the blocking pool,
/// with an outer timeout as well.
pub async fn get_status(url: String, timeout: Duration) -> Result<(u16, String), String> {
    off_the_loop(timeout, "http", "", move || {
        let resp = get_any_status(&url, timeout)?;
        let status = resp.status();
        let mut body = String::new();
        use std::io::Read;
        let _ = resp.into_reader().take(64 << 10).read_to_string(&mut body);
        Ok((status, body))
    })
    .await
}

/// One GET whose body (at most 1 MiB) is the answer; status 200. Blocking.
fn get_body_blocking(url: &str, timeout: Duration) -> Result<String, String> {
    let agent = ureq::AgentBuilder::new()
        .timeout(timeout)
        .redirects(0)
        .build();
    let resp = agent
        .get(url)
        .call()
        .map_err(|e| format!("GET {url}: {e}"))?;
    let mut body = String::new();
    use std::io::Read;
    resp.into_reader()
        .take(1 << 20)
        .read_to_string(&mut body)
        .map_err(|e| format!("GET {url}: {e}"))?;
    Ok(body)
}

/// One servable attempt: the frontend lists every expected worker, then a one-token completion
/// through it generates a token (its `usage.completion_tokens`, or without usage a non-empty
/// text: [`generated`]). Blocking (ureq): run it on the blocking pool.
pub fn servable_blocking(p: &ServableProbe, timeout: Duration) -> Result<Seen, String> {
    let seen = frontend_seen_blocking(&p.host, p.port, p.frontend, timeout)?;
    if !seen.covers(&p.expected) {
        return Err(format!(
            "the frontend sees {} prefill + {} decode of {} + {}",
            seen.prefill, seen.decode, p.expected.prefill, p.expected.decode
        ));
    }
    let before = decode_served_blocking(p, timeout);
    completion_blocking(p, timeout)?;
    if !p.decode_served.is_empty() {
        decode_moved(p, &before, &decode_served_blocking(p, timeout))?;
    }
    Ok(seen)
}

/// What each decode worker of a disaggregated job says it has served: `None` where its page
/// does not answer (a rank that serves no endpoint of its own); a series not yet published is 0
/// (a worker before its first request). Blocking.
fn decode_served_blocking(p: &ServableProbe, timeout: Duration) -> Vec<Result<u64, String>> {
    p.decode_served
        .iter()
        .map(|c| Ok(c.read(&get_body_blocking(&c.url, timeout)?).unwrap_or(0)))
        .collect()
}

/// The decode side served the completion: a decode worker's counter read before and after it
/// moved. `Err` when none moved, or when no decode worker's page answered at all.
pub fn decode_moved(
    p: &ServableProbe,
    before: &[Result<u64, String>],
    after: &[Result<u64, String>],
) -> Result<(), String> {
    let mut read = Vec::new();
    for ((c, b), a) in p.decode_served.iter().zip(before).zip(after) {
        match (b, a) {
            (Ok(b), Ok(a)) if a != b => return Ok(()),
            (Ok(b), Ok(_)) => read.push(format!("{} {b}", c.url)),
            (Err(e), _) | (_, Err(e)) => read.push(e.clone()),
        }
    }
    if before.iter().chain(after).all(Result::is_err) {
        return Err(format!(
            "no decode worker's metrics page answered, so the decode side cannot be seen to \
             serve: {}",
            read.join("; ")
        ));
    }
    Err(format!(
        "the completion generated, but no decode worker's request counter moved ({}): the \
         decode side did not serve it",
        read.join("; ")
    ))
}

/// A one-token completion through the frontend of `p` generates a token ([`generated`]): the
/// servable probe's last step, and the canary. Blocking (ureq).
pub fn completion_blocking(p: &ServableProbe, timeout: Duration) -> Result<(), String> {
    let agent = ureq::AgentBuilder::new()
        .timeout(timeout)
        .redirects(0)
        .build();
    // The name the frontend serves the model under: the served model name where the engine
    // registers one, else (Dynamo's mocker) the model path, as `/v1/models` lists it.
    // Bounded like every answer mcsup reads: a list that never ends is cut at 1 MiB (and then is
    // not JSON: the recipe's name is asked for).
    let listed: Vec<String> =
        get_body_blocking(&format!("http://{}:{}/v1/models", p.host, p.port), timeout)
            .ok()
            .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
            .and_then(|v| {
                v.get("data")?.as_array().map(|d| {
                    d.iter()
                        .filter_map(|m| m.get("id")?.as_str().map(String::from))
                        .collect()
                })
            })
            .unwrap_or_default();
    let model = if listed.is_empty() || listed.contains(&p.model) {
        p.model.clone()
    } else {
        listed[0].clone()
    };
    let url = format!("http://{}:{}/v1/completions", p.host, p.port);
    let resp = agent
        .post(&url)
        .send_json(serde_json::json!({
            "model": model,
            "prompt": "ping",
            "max_tokens": 1,
            "stream": false,
        }))
        .map_err(|e| match e {
            ureq::Error::Status(code, r) => {
                let mut body = String::new();
                use std::io::Read;
                let _ = r.into_reader().take(300).read_to_string(&mut body);
                format!("POST {url}: status {code}: {}", body.trim())
            }
            e => format!("POST {url}: {e}"),
        })?;
    // Bounded: a frontend is another program, its answer is not trusted to be small.
    let mut body = String::new();
    use std::io::Read;
    resp.into_reader()
        .take(1 << 20)
        .read_to_string(&mut body)
        .map_err(|e| format!("POST {url}: {e}"))?;
    let v: serde_json::Value =
        serde_json::from_str(&body).map_err(|e| format!("POST {url}: not JSON ({e})"))?;
    generated(&v).map_err(|why| format!("POST {url}: {why}"))
}

/// [`completion_blocking`] on the blocking pool, with an outer timeout: one canary request.
pub async fn completion(p: ServableProbe, timeout: Duration) -> Result<(), String> {
    off_the_loop(timeout * 2, "canary", "canary: ", move || {
        completion_blocking(&p, timeout)
    })
    .await
}

/// Whether a completion's answer generated something: `usage.completion_tokens` >= 1 where the
/// frontend reports usage (an engine that answers with no token is not serving: a decode side
/// whose KV transfers all fail looks like this), else a non-empty text in its first choice.
pub fn generated(v: &serde_json::Value) -> Result<(), String> {
    let choices = v
        .get("choices")
        .and_then(|c| c.as_array())
        .filter(|c| !c.is_empty())
        .ok_or("no choice in the answer")?;
    if let Some(n) = v
        .get("usage")
        .and_then(|u| u.get("completion_tokens"))
        .and_then(serde_json::Value::as_u64)
    {
        return match n {
            0 => Err("it answered with 0 generated tokens (usage.completion_tokens: 0)".into()),
            _ => Ok(()),
        };
    }
    let text = choices[0]
        .get("text")
        .or_else(|| choices[0].get("message").and_then(|m| m.get("content")))
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    if text.is_empty() {
        Err("it answered with an empty text and no usage".into())
    } else {
        Ok(())
    }
}

/// [`servable_blocking`] on the blocking pool, with an outer timeout.
pub async fn servable(p: ServableProbe, timeout: Duration) -> Result<Seen, String> {
    // Two requests: the health read, then the completion.
    off_the_loop(
        timeout * 2,
        "servable probe",
        "servable probe: ",
        move || servable_blocking(&p, timeout),
    )
    .await
}

/// [`frontend_seen_blocking`] on the blocking pool, with an outer timeout.
pub async fn frontend_seen(
    host: String,
    port: u16,
    frontend: FrontendType,
    timeout: Duration,
) -> Result<Seen, String> {
    off_the_loop(timeout, "health", "", move || {
        frontend_seen_blocking(&host, port, frontend, timeout)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Servable means tokens: an answer counts by its usage, else by its text.
    #[test]
    fn an_answer_counts_when_it_generated_a_token() {
        let j = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
        assert!(generated(&j(
            r#"{"choices":[{"text":"tok"}],"usage":{"completion_tokens":1}}"#
        ))
        .is_ok());
        // Text, but the engine says it generated nothing (srt-slurm #429's shape).
        assert_eq!(
            generated(&j(
                r#"{"choices":[{"text":"x"}],"usage":{"completion_tokens":0}}"#
            ))
            .unwrap_err(),
            "it answered with 0 generated tokens (usage.completion_tokens: 0)"
        );
        assert!(generated(&j(r#"{"choices":[{"text":"tok"}]}"#)).is_ok());
        assert!(generated(&j(r#"{"choices":[{"message":{"content":"hi"}}]}"#)).is_ok());
        assert!(generated(&j(r#"{"choices":[{"text":""}]}"#))
            .unwrap_err()
            .contains("empty text"));
        assert!(generated(&j(r#"{"choices":[]}"#))
            .unwrap_err()
            .contains("no choice"));
        assert!(generated(&j(r#"{"error":"busy"}"#))
            .unwrap_err()
            .contains("no choice"));
    }
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A server that answers one GET with `status` and a body larger than any client's read
    /// buffer, then reads on: what the probe's closing looked like from its side.
    fn one_answer(status: u16) -> (u16, std::thread::JoinHandle<std::io::Result<usize>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept()?;
            let mut request = Vec::new();
            let mut byte = [0u8; 1];
            while !request.ends_with(b"\r\n\r\n") {
                conn.read_exact(&mut byte)?;
                request.push(byte[0]);
            }
            let body = format!(
                "{{\"status\": \"fine\", \"pad\": \"{}\"}}",
                "x".repeat(256 << 10)
            );
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            conn.write_all(format!("{head}{body}").as_bytes())?;
            let mut rest = [0u8; 64];
            conn.read(&mut rest)
        });
        (port, server)
    }

    /// Round 4's M2: a frontend whose `/v1/models` streams JSON without end (mcsup's memory grew
    /// to 4.9 GB in 10 s) is read to 1 MiB at most; the completion then asks for the recipe's
    /// model and succeeds.
    #[test]
    fn an_endless_model_list_is_read_to_a_bound() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let head = |conn: &mut std::net::TcpStream| -> std::io::Result<String> {
            let mut request = Vec::new();
            let mut byte = [0u8; 1];
            while !request.ends_with(b"\r\n\r\n") {
                conn.read_exact(&mut byte)?;
                request.push(byte[0]);
            }
            Ok(String::from_utf8_lossy(&request).into_owned())
        };
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            assert!(head(&mut conn).unwrap().starts_with("GET /v1/models"));
            conn.write_all(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n{\"data\":[")
                .unwrap();
            let item = "{\"id\":\"x\"},".repeat(1024);
            let mut sent = 0usize;
            // Until the client stops reading (or a bound far above the client's).
            while sent < 512 << 20 && conn.write_all(item.as_bytes()).is_ok() {
                sent += item.len();
            }
            drop(conn);
            let (mut conn, _) = listener.accept().unwrap();
            let request = head(&mut conn).unwrap();
            let len: usize = request
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap();
            let mut body = vec![0u8; len];
            conn.read_exact(&mut body).unwrap();
            let asked: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let answer = r#"{"choices":[{"text":"pong"}],"usage":{"completion_tokens":1}}"#;
            conn.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{answer}",
                    answer.len()
                )
                .as_bytes(),
            )
            .unwrap();
            (sent, asked["model"].as_str().unwrap().to_string())
        });
        let p = ServableProbe {
            host: "127.0.0.1".into(),
            port,
            frontend: crate::engine::frontend::FrontendType::default_kind(),
            expected: crate::engine::frontend::Expected {
                prefill: 0,
                decode: 1,
            },
            model: "the-recipes-model".into(),
            url: format!("http://127.0.0.1:{port}"),
            decode_served: Vec::new(),
        };
        let got = completion_blocking(&p, Duration::from_secs(20));
        let (sent, asked) = server.join().unwrap();
        assert!(got.is_ok(), "{got:?}");
        assert_eq!(asked, "the-recipes-model");
        // 1 MiB read, the rest in the sockets' buffers (about 4 MiB here; unbounded, the old
        // reader in a debug build took 39 MiB in the 20 s).
        assert!(
            sent < 16 << 20,
            "the client read {} MiB of an endless list",
            sent >> 20
        );
    }

    /// A probe closes the connection cleanly whether it wanted the body or not, and whatever the
    /// status: a reset would be logged by the server as a failure of its own.
    #[test]
    fn a_probe_reads_the_answer_before_it_closes() {
        for (status, want, needle) in [(200, 200, None), (200, 200, Some("fine")), (503, 200, None)]
        {
            let (port, server) = one_answer(status);
            let got = http_blocking(
                "127.0.0.1",
                port,
                "/health",
                want,
                needle,
                Duration::from_secs(5),
            );
            assert_eq!(got.is_ok(), status == want, "{got:?}");
            let seen = server.join().unwrap();
            assert!(
                matches!(seen, Ok(0)),
                "status {status}: the server saw {seen:?} after its answer, not the end of the connection"
            );
        }
    }
}
