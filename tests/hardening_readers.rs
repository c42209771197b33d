//! The job views read files anyone with access to the log directory could have put there
//! (issue 29, class 2): `mcsup timeline`, `why` and `status --job` on a real job's files
//! (tests/fixtures/real-job-1p2d-oom, four nodes) with one node's file replaced by something
//! hostile. Each view must still show the other nodes, say on stderr which file it left out and
//! why, never follow a link, never wait on a FIFO, never read more than its bound, and keep its
//! output bounded when the timestamps are absurd.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{TestEnv, MCSUP};

/// What a case puts where the view reads, and why the view must leave it out.
type Plant<'a> = Box<dyn Fn() + 'a>;

/// The real job's files in a fresh directory.
fn job(env: &TestEnv) -> PathBuf {
    let from = common::recipe::repo().join("tests/fixtures/real-job-1p2d-oom");
    let dir = env.path("logs");
    std::fs::create_dir(&dir).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "jsonl" || x == "json") {
            std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
        }
    }
    dir
}

fn mcsup(args: &[&str], dir: &Path) -> Output {
    Command::new(MCSUP).args(args).arg(dir).output().unwrap()
}

/// `view` succeeded, drew the nodes other than n2, and said why n2's file was left out.
fn left_out(out: &Output, file: &str, why: &str) -> String {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("mcsup: left out ") && stderr.contains(file) && stderr.contains(why),
        "{file}: {why} missing in:\n{stderr}"
    );
    stdout
}

/// An events file that is a link (to `/dev/zero`: read to the end, it never ends), a FIFO (no
/// writer: opening it would wait forever), or another user's: left out of the timeline, `why`
/// and `status --job`, with the reason; the other three nodes are shown.
#[test]
fn an_events_file_that_is_a_link_a_fifo_or_someone_elses_is_left_out() {
    let env = TestEnv::new();
    let dir = job(&env);
    let events = dir.join("n2.events.jsonl");
    let html = env.path("t.html");
    let mut cases: Vec<(&str, Plant)> = vec![
        (
            "is a symbolic link",
            Box::new(|| std::os::unix::fs::symlink("/dev/zero", &events).unwrap()),
        ),
        (
            "is a FIFO",
            Box::new(|| nix::unistd::mkfifo(&events, nix::sys::stat::Mode::S_IRWXU).unwrap()),
        ),
    ];
    if nix::unistd::geteuid().is_root() {
        cases.push((
            "is owned by uid 60001, neither the log directory's owner nor you",
            Box::new(|| {
                std::fs::write(&events, "").unwrap();
                std::os::unix::fs::chown(&events, Some(60001), Some(60001)).unwrap();
            }),
        ));
    }
    for (why, plant) in &cases {
        let _ = std::fs::remove_file(&events);
        plant();
        let out = Command::new(MCSUP)
            .arg("timeline")
            .arg(&dir)
            .arg("-o")
            .arg(&html)
            .output()
            .unwrap();
        left_out(&out, "n2.events.jsonl", why);
        let page = std::fs::read_to_string(&html).unwrap();
        for n in ["n1", "n3", "n4"] {
            assert!(
                page.contains(&format!("data-node=\"{n}\"")),
                "{why}: {n} not drawn"
            );
        }
        left_out(&mcsup(&["why"], &dir), "n2.events.jsonl", why);
        let status = left_out(&mcsup(&["status", "--job"], &dir), "n2.events.jsonl", why);
        assert!(status.contains("n1") && status.contains("n4"), "{status}");
    }
    assert!(cases.len() == 3 || !nix::unistd::geteuid().is_root());
}

/// One bad status file (`{}`, a FIFO, a 17 MB file, another user's with a node that never ran)
/// leaves `status --job` working on the others, the bad one named; none readable is an error
/// that names each file.
#[test]
fn a_bad_status_file_is_left_out_of_the_job_view() {
    let env = TestEnv::new();
    let dir = job(&env);
    let status = dir.join("n3.status.json");
    let real = std::fs::read_to_string(&status).unwrap();
    let fake = real.replace("\"n3\"", "\"n9\"");
    let mut cases: Vec<(&str, Plant)> = vec![
        (
            "not a status file mcsup wrote",
            Box::new(|| std::fs::write(&status, "{}").unwrap()),
        ),
        (
            "is a FIFO",
            Box::new(|| nix::unistd::mkfifo(&status, nix::sys::stat::Mode::S_IRWXU).unwrap()),
        ),
        (
            "is larger than 16 MiB",
            Box::new(|| std::fs::write(&status, vec![b' '; 17 << 20]).unwrap()),
        ),
    ];
    if nix::unistd::geteuid().is_root() {
        cases.push((
            "is owned by uid 60001",
            Box::new(|| {
                std::fs::write(&status, &fake).unwrap();
                std::os::unix::fs::chown(&status, Some(60001), Some(60001)).unwrap();
            }),
        ));
    }
    for (why, plant) in &cases {
        let _ = std::fs::remove_file(&status);
        plant();
        let text = left_out(&mcsup(&["status", "--job"], &dir), "n3.status.json", why);
        assert!(
            !text.contains("n9"),
            "{why}: a planted node is shown:\n{text}"
        );
        assert!(text.contains("n4"), "{text}");
        let json = left_out(
            &mcsup(&["status", "--job", "--json"], &dir),
            "n3.status.json",
            why,
        );
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert!(v.is_object(), "{json}");
    }
    for n in ["n1", "n2", "n4"] {
        std::fs::write(dir.join(format!("{n}.status.json")), "{}").unwrap();
    }
    std::fs::write(&status, "{}").unwrap();
    let out = mcsup(&["status", "--job"], &dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("no readable status file in")
            && err.contains("n1.status.json")
            && err.contains("n4.status.json"),
        "{err}"
    );
}

/// Two events a thousand years apart: the timeline's axis keeps at most 11 ticks, so the page
/// stays the size of a normal one (it was a tick per minute of the span: 2 GB). Bytes that are
/// not UTF-8 in an events file do not take the node out of the picture.
#[test]
fn absurd_timestamps_and_stray_bytes_keep_the_timeline_small() {
    let env = TestEnv::new();
    let dir = env.path("logs");
    std::fs::create_dir(&dir).unwrap();
    let mut text = b"{\"ts_ms\":0,\"t_ms\":0,\"node\":\"n1\",\"process\":\"w\",\"event\":\"spawned\",\"pid\":7}\n".to_vec();
    text.extend_from_slice(b"\xff\xfe garbage \xc3\n");
    text.extend_from_slice(b"{\"ts_ms\":31536000000000,\"t_ms\":1,\"node\":\"n1\",\"process\":\"w\",\"event\":\"exited\",\"pid\":7,\"exit_code\":1,\"detail\":\"bad \xff byte\"}\n");
    std::fs::write(dir.join("n1.events.jsonl"), &text).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let html = env.path("t.html");
    common::view::timeline(&dir, &html);
    let page = std::fs::read_to_string(&html).unwrap();
    // The tick lines are drawn once, in the page's definitions.
    let ticks = page.matches("<line class=\"tick\"").count();
    assert!((1..=11).contains(&ticks), "{ticks} tick labels");
    assert!(page.len() < 64 << 10, "{} bytes", page.len());
    assert!(page.contains("data-process=\"w\""), "the node is drawn");
}

/// Names and details in the run files are input: an events line whose process name sets the
/// terminal's title and whose detail writes the clipboard (OSC 52) and clears the screen reaches
/// the reader of `why` and `status --job` without a single escape or bell.
#[test]
fn escape_sequences_in_the_files_never_reach_the_terminal() {
    let env = TestEnv::new();
    let dir = job(&env);
    let events = dir.join("n2.events.jsonl");
    let mut text = std::fs::read_to_string(&events).unwrap();
    // Early in the run: the job's first failure, which every view names.
    let first_ts: u64 = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["ts_ms"].as_u64())
        .min()
        .unwrap();
    text.push_str(&format!(
        "{{\"ts_ms\":{},\"t_ms\":1,\"node\":\"n2\",\"process\":\"x\\u001b]0;owned\\u0007\",\"event\":\"failed\",\"exit_code\":1,\"detail\":\"\\u001b]52;c;aGk=\\u0007\\u001b[2J boom\"}}\n",
        first_ts + 1
    ));
    std::fs::write(&events, text).unwrap();
    for args in [
        &["why"][..],
        &["status", "--job"],
        &["status", "--job", "--all"],
    ] {
        let out = mcsup(args, &dir);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen = [&out.stdout[..], &out.stderr[..]].concat();
        assert!(
            !seen.contains(&0x1b) && !seen.contains(&0x07),
            "{args:?}:\n{}",
            String::from_utf8_lossy(&seen)
        );
        if args == ["why"] {
            // The failure is still told, its name without the sequence.
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.starts_with("first failure: n2/x at"), "{stdout}");
        }
    }
}
