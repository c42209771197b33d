//! Benchmark helper: the least a supervisor process can do, as a yardstick for mcsup's own
//! start-up costs. Not part of the product; `scripts/bench-supervisor.sh` runs it.
//!
//! The benchmark's first floors are its own Python harness, already running: they never pay for
//! starting a process. This program is the floor *with* a process start: a small Rust binary that
//! does only what is measured, with std alone, and nothing mcsup must do besides (no plan, no
//! preflight, no log files, no events, no supervision after the start).
//!
//! ```text
//! mcsup-floor chain CHILD PORT...   start `CHILD --listen PORT` for each port in turn, each once
//!                                   the previous one accepts a TCP connection on 127.0.0.1
//!                                   (tried every 100 us); exit 0 once the last one accepts
//! mcsup-floor spawn CHILD DIR N     start `CHILD --touch DIR/wI` for I in 0..N; exit 0
//! ```
//!
//! Children get /dev/null as stdio and are left running: the benchmark stops them. Exit 2 on a
//! bad command line, 1 when a child cannot be started or a port is not accepting within 30 s.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Between two connection attempts while waiting for a port.
const POLL: Duration = Duration::from_micros(100);
/// Longest wait for one port.
const PORT_TIMEOUT: Duration = Duration::from_secs(30);

fn start(child: &str, args: &[&str]) -> Result<(), String> {
    Command::new(child)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|e| format!("cannot start {child}: {e}"))
}

fn wait_accepts(port: u16) -> Result<(), String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let end = Instant::now() + PORT_TIMEOUT;
    while TcpStream::connect(addr).is_err() {
        if Instant::now() > end {
            return Err(format!("127.0.0.1:{port} not accepting after 30 s"));
        }
        std::thread::sleep(POLL);
    }
    Ok(())
}

fn run(args: &[String]) -> Result<(), (u8, String)> {
    let usage = || {
        (
            2,
            "usage: mcsup-floor chain CHILD PORT... | mcsup-floor spawn CHILD DIR N".to_string(),
        )
    };
    let failed = |e: String| (1, e);
    match args {
        [mode, child, ports @ ..] if mode == "chain" && !ports.is_empty() => {
            for p in ports {
                let port: u16 = p.parse().map_err(|_| usage())?;
                start(child, &["--listen", p]).map_err(failed)?;
                wait_accepts(port).map_err(failed)?;
            }
            Ok(())
        }
        [mode, child, dir, n] if mode == "spawn" => {
            let n: usize = n.parse().map_err(|_| usage())?;
            for i in 0..n {
                start(child, &["--touch", &format!("{dir}/w{i}")]).map_err(failed)?;
            }
            Ok(())
        }
        _ => Err(usage()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, msg)) => {
            eprintln!("mcsup-floor: {msg}");
            ExitCode::from(code)
        }
    }
}
