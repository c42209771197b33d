//! Test helper: a child process for mcsup's tests, driven by flags. Not part of the product.
//!
//! It does what a test needs a misbehaving or well-behaved service to do (ignore SIGTERM, exit
//! after N ms with code C, die by a signal, open a port or answer HTTP after N ms, print a ready
//! line, spawn grandchildren plain/setsid/double-forked, hold stdout in a grandchild, print a huge
//! line without a newline) and it logs every signal it receives to a file so tests can assert
//! exactly what arrived. It must stay dependency-light and never talk to anything but 127.0.0.1.
//!
//! ```text
//! --pid-file P            write our pid to P
//! --signal-log P          append the name of every signal received to P (signals ignored at
//!                         startup, like mcsup's drain signal, are left ignored and never logged)
//! --ignore SIG            log SIG but otherwise ignore it (repeatable); --ignore-term = --ignore TERM
//! --exit-after MS         exit after MS with --code C (default 0)
//! --die-after MS --die-signal SIG   raise SIG after MS
//! --listen PORT [--listen-after MS] [--http BODY]   bind 127.0.0.1:PORT (answer HTTP 200 BODY)
//! --ready-after MS --ready-line TEXT   print TEXT after MS
//! --touch P [--touch-after MS]        create file P
//! --print TEXT            print a line at start (repeatable)
//! --final-line TEXT       print TEXT without a newline just before --exit-after exits
//! --long-line BYTES       print BYTES bytes of 'x' without a newline at start
//! --lines N [--line-len L]  print N lines of L bytes (default 100) at start
//! --numbered N            print N lines `<i> <padding>` at start, every 1000th over 64 KiB
//! --grandchild MODE       spawn a sleeping grandchild: plain | setsid | double-fork (repeatable)
//! --grandchild-ignore-term   the grandchildren ignore SIGTERM
//! --grandchild-quiet      the grandchildren get /dev/null stdout (default: they hold ours)
//! --grandchild-pid-file P    append each grandchild's pid to P
//! --grandchild-exit-after MS the grandchildren exit after MS
//! --exit-on-term-code C   on SIGTERM (if not ignored) exit with code C instead of dying by it
//! ```

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

#[derive(Default, Clone)]
struct Opts {
    pid_file: Option<String>,
    signal_log: Option<String>,
    ignore: Vec<i32>,
    exit_after: Option<u64>,
    code: i32,
    die_after: Option<u64>,
    die_signal: Option<i32>,
    listen: Option<u16>,
    listen_after: u64,
    http: Option<String>,
    ready_after: u64,
    ready_line: Option<String>,
    touch: Option<String>,
    touch_after: u64,
    print: Vec<String>,
    final_line: Option<String>,
    long_line: Option<usize>,
    lines: usize,
    numbered: usize,
    line_len: usize,
    grandchild: Vec<String>,
    grandchild_ignore_term: bool,
    grandchild_quiet: bool,
    grandchild_pid_file: Option<String>,
    grandchild_exit_after: Option<u64>,
    exit_on_term_code: Option<i32>,
    spawn_and_exit: bool,
}

fn sig_from(s: &str) -> i32 {
    if let Ok(n) = s.parse() {
        return n;
    }
    let up = s.to_ascii_uppercase();
    let full = if up.starts_with("SIG") {
        up
    } else {
        format!("SIG{up}")
    };
    full.parse::<nix::sys::signal::Signal>()
        .map(|s| s as i32)
        .unwrap_or_else(|_| fail(&format!("bad signal {s}")))
}

fn fail(msg: &str) -> ! {
    eprintln!("mcsup-testchild: {msg}");
    std::process::exit(99)
}

fn parse() -> Opts {
    let mut o = Opts {
        line_len: 100,
        ..Default::default()
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| fail(&format!("{a} needs a value")))
        };
        let num = |v: String| {
            v.parse::<u64>()
                .unwrap_or_else(|_| fail(&format!("bad number {v}")))
        };
        match a.as_str() {
            "--pid-file" => o.pid_file = Some(val()),
            "--signal-log" => o.signal_log = Some(val()),
            "--ignore" => o.ignore.push(sig_from(&val())),
            "--ignore-term" => o.ignore.push(libc::SIGTERM),
            "--exit-after" => o.exit_after = Some(num(val())),
            "--code" => o.code = num(val()) as i32,
            "--die-after" => o.die_after = Some(num(val())),
            "--die-signal" => o.die_signal = Some(sig_from(&val())),
            "--listen" => o.listen = Some(num(val()) as u16),
            "--listen-after" => o.listen_after = num(val()),
            "--http" => o.http = Some(val()),
            "--ready-after" => o.ready_after = num(val()),
            "--ready-line" => o.ready_line = Some(val()),
            "--touch" => o.touch = Some(val()),
            "--touch-after" => o.touch_after = num(val()),
            "--print" => o.print.push(val()),
            "--final-line" => o.final_line = Some(val()),
            "--long-line" => o.long_line = Some(num(val()) as usize),
            "--lines" => o.lines = num(val()) as usize,
            "--numbered" => o.numbered = num(val()) as usize,
            "--line-len" => o.line_len = num(val()) as usize,
            "--grandchild" => o.grandchild.push(val()),
            "--grandchild-ignore-term" => o.grandchild_ignore_term = true,
            "--grandchild-quiet" => o.grandchild_quiet = true,
            "--grandchild-pid-file" => o.grandchild_pid_file = Some(val()),
            "--grandchild-exit-after" => o.grandchild_exit_after = Some(num(val())),
            "--exit-on-term-code" => o.exit_on_term_code = Some(num(val()) as i32),
            "--spawn-and-exit" => o.spawn_and_exit = true,
            "--sleep" => {}
            other => fail(&format!("unknown flag {other}")),
        }
    }
    o
}

fn append(path: &str, text: &str) {
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(text.as_bytes());
    }
}

fn ignored_at_start(sig: i32) -> bool {
    // SAFETY: querying the disposition (null new action) only writes `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

fn after(ms: u64, f: impl FnOnce() + Send + 'static) {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(ms));
        f();
    });
}

fn spawn_grandchild(o: &Opts, mode: &str) {
    let exe = std::env::current_exe().unwrap_or_else(|e| fail(&format!("current_exe: {e}")));
    let mut args: Vec<String> = vec!["--sleep".into()];
    if o.grandchild_ignore_term {
        args.push("--ignore-term".into());
    }
    if let Some(p) = &o.grandchild_pid_file {
        args.extend(["--pid-file".into(), p.clone()]);
    }
    if let Some(ms) = o.grandchild_exit_after {
        args.extend(["--exit-after".into(), ms.to_string()]);
    }
    let mut cmd = Command::new(&exe);
    if o.grandchild_quiet {
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
    }
    match mode {
        "plain" => {
            cmd.args(&args);
        }
        "setsid" => {
            cmd.args(&args);
            // SAFETY: setsid is async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    libc::setsid();
                    Ok(())
                });
            }
        }
        "double-fork" => {
            // An intermediate that starts the grandchild (in a new session) and exits at once, so
            // the grandchild is orphaned while we still run.
            cmd.arg("--spawn-and-exit")
                .arg("--grandchild")
                .arg("setsid")
                .args(
                    args.iter()
                        .filter(|a| *a != "--sleep")
                        .map(|a| match a.as_str() {
                            "--ignore-term" => "--grandchild-ignore-term".to_string(),
                            "--pid-file" => "--grandchild-pid-file".to_string(),
                            "--exit-after" => "--grandchild-exit-after".to_string(),
                            other => other.to_string(),
                        }),
                );
            if o.grandchild_quiet {
                cmd.arg("--grandchild-quiet");
            }
        }
        other => fail(&format!("bad grandchild mode {other}")),
    }
    match cmd.spawn() {
        Ok(mut c) => {
            if mode == "double-fork" {
                let _ = c.wait();
            }
        }
        Err(e) => fail(&format!("spawn grandchild: {e}")),
    }
}

fn main() {
    let o = parse();
    if o.spawn_and_exit {
        for m in &o.grandchild {
            spawn_grandchild(&o, m);
        }
        std::process::exit(0);
    }
    // Signal logging: every catchable signal of interest that is not ignored at startup.
    let watched: Vec<i32> = [
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGCONT,
    ]
    .into_iter()
    .filter(|&s| !ignored_at_start(s))
    .collect();
    // Blocked while the handlers are installed: signal-hook-registry installs its handler before
    // it publishes the action, and a signal arriving in between is dropped (its fallback only
    // calls a previous *handler*; SIG_DFL's termination is lost). A test that signals us right
    // after the spawn would then find us alive. Blocked, the signal waits and is handled.
    let mut blocked = nix::sys::signal::SigSet::empty();
    for &s in &watched {
        if let Ok(sig) = nix::sys::signal::Signal::try_from(s) {
            blocked.add(sig);
        }
    }
    let _ = blocked.thread_block();
    let mut signals = signal_hook::iterator::Signals::new(&watched)
        .unwrap_or_else(|e| fail(&format!("signals: {e}")));
    let _ = blocked.thread_unblock();
    // Only now (handlers installed) do we tell the world we exist: a test that signals us after
    // seeing the pid file or the ready line is sure its signal is logged.
    if let Some(p) = &o.pid_file {
        append(p, &format!("{}\n", std::process::id()));
    }
    let so = o.clone();
    std::thread::spawn(move || {
        for sig in signals.forever() {
            let name = nix::sys::signal::Signal::try_from(sig)
                .map(|s| s.as_str())
                .unwrap_or("SIG?");
            if let Some(p) = &so.signal_log {
                append(p, &format!("{name}\n"));
            }
            if sig == libc::SIGCONT || so.ignore.contains(&sig) {
                continue;
            }
            if sig == libc::SIGTERM {
                if let Some(c) = so.exit_on_term_code {
                    std::process::exit(c);
                }
            }
            let _ = signal_hook::low_level::emulate_default_handler(sig);
        }
    });

    let mut out = std::io::stdout().lock();
    for line in &o.print {
        let _ = writeln!(out, "{line}");
    }
    if o.lines > 0 {
        let line = format!("{}\n", "l".repeat(o.line_len.saturating_sub(1)));
        for _ in 0..o.lines {
            let _ = out.write_all(line.as_bytes());
        }
    }
    for i in 0..o.numbered {
        // Every 1000th line is longer than mcsup's 64 KiB cap (it gets split and marked).
        let pad = if i % 1000 == 999 { 70_000 } else { i % 37 };
        let _ = writeln!(out, "{i} {}", "n".repeat(pad));
    }
    if let Some(n) = o.long_line {
        let chunk = vec![b'x'; 64 * 1024];
        let mut left = n;
        while left > 0 {
            let k = left.min(chunk.len());
            let _ = out.write_all(&chunk[..k]);
            left -= k;
        }
    }
    let _ = out.flush();
    drop(out);

    for m in &o.grandchild {
        spawn_grandchild(&o, m);
    }
    if let Some(line) = o.ready_line.clone() {
        after(o.ready_after, move || {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        });
    }
    if let Some(p) = o.touch.clone() {
        after(o.touch_after, move || append(&p, ""));
    }
    if let Some(port) = o.listen {
        let body = o.http.clone();
        after(o.listen_after, move || {
            let l = TcpListener::bind(("127.0.0.1", port))
                .unwrap_or_else(|e| fail(&format!("bind {port}: {e}")));
            for conn in l.incoming().flatten() {
                let mut conn = conn;
                if let Some(b) = &body {
                    let mut buf = [0u8; 4096];
                    let _ = std::io::Read::read(&mut conn, &mut buf);
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
                        b.len()
                    );
                    let _ = conn.write_all(resp.as_bytes());
                }
            }
        });
    }
    if let (Some(ms), Some(sig)) = (o.die_after, o.die_signal) {
        after(ms, move || {
            // SAFETY: resetting a disposition and raising are plain libc calls.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
        });
    }
    if let Some(ms) = o.exit_after {
        let (code, final_line) = (o.code, o.final_line.clone());
        after(ms, move || {
            if let Some(l) = final_line {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(l.as_bytes());
                let _ = out.flush();
            }
            std::process::exit(code);
        });
    }
    loop {
        std::thread::park();
    }
}
