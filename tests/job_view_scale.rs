//! The job view at 128 nodes x 16 processes, on a directory built from a real job's files
//! (tests/py/scaled_job.py over tests/fixtures/real-job-1p2d-oom): `status --job` sums each role
//! up and lists the processes that need a look, `--all` every one; the timeline groups by role
//! and node, closes what went well, and puts the first failure and the servable moment where a
//! headless Chromium shows them without scrolling.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::recipe::repo;
use common::view::*;
use common::*;

const NODES: usize = 128;
const PER_NODE: usize = 16;
const FAILING: usize = 77;

/// The 128-node directory, in `env`.
fn scaled_job(env: &TestEnv) -> PathBuf {
    let out = env.path("job");
    let o = Command::new("python3")
        .arg(repo().join("tests/py/scaled_job.py"))
        .arg(repo().join("tests/fixtures/real-job-1p2d-oom"))
        .arg(&out)
        .args(["--nodes", &NODES.to_string()])
        .args(["--per-node", &PER_NODE.to_string()])
        .args(["--failing", &FAILING.to_string()])
        .output()
        .expect("run python3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

fn status_job(dir: &Path, extra: &[&str]) -> String {
    let mut args: Vec<&std::ffi::OsStr> = vec!["status".as_ref(), "--job".as_ref(), dir.as_ref()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    mcsup_ok(args)
}

#[test]
fn status_job_sums_up_each_role_and_lists_what_needs_a_look() {
    let env = TestEnv::new();
    let dir = scaled_job(&env);
    let out = status_job(&dir, &[]);
    eprintln!("{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "job: 128 node(s): n[1-128]");
    assert!(
        lines[1].starts_with(
            "first failure: n77/mocker-decode-616 at +8.3 s: exited with code 1, unasked; cuda-oom"
        ),
        "{out}"
    );
    // 31 prefill and 96 decode nodes of 14 workers (their two gates are not processes).
    assert_eq!(
        &lines[2..6],
        [
            "infra: 1 node(s); 2 process(es): 2 exited",
            "frontend: 1 node(s); 1 process(es): 1 exited",
            "prefill: 31 node(s); 434 process(es): 434 exited",
            "decode: 96 node(s); 1344 process(es): 1343 exited, 1 failed",
        ]
    );
    assert_eq!(
        lines[6],
        "1 of 2035 processes, the ones that need a look (restarted, failed, not ready); --all lists every one:"
    );
    assert!(
        lines[8].starts_with("n77   mocker-decode-616  worker*  failed"),
        "{out}"
    );
    assert_eq!(lines[9], "");
    assert_eq!(
        lines[10],
        "n[1-76,78-128] (127 nodes): done, exit code 0 (received SIGUSR1); drained because of the first failure (n77/mocker-decode-616), not failed"
    );
    assert!(
        lines[11].starts_with("n77: done, exit code 1 (critical `mocker-decode-616` failed"),
        "{out}"
    );
    assert!(out.len() < 3_000, "{} bytes", out.len());

    // --all: every process and every node's line.
    let all = status_job(&dir, &["--all"]);
    let rows = all
        .lines()
        .filter(|l| l.starts_with('n') && l.contains("  "))
        .count();
    assert_eq!(rows, 2035, "the table's rows");
    let nodes = all
        .lines()
        .filter(|l| l.split_once(": done, exit code").is_some())
        .count();
    assert_eq!(nodes, NODES);

    let j: serde_json::Value = serde_json::from_str(&status_job(&dir, &["--json"])).expect("json");
    let decode = &j["roles"][3];
    assert_eq!(decode["role"], "decode");
    assert_eq!(decode["nodes"], 96);
    assert_eq!(decode["processes"], 1344);
    assert_eq!(decode["states"]["failed"], 1);
    assert_eq!(decode["nodes_list"], "n[33-128]");
    assert_eq!(j["nodes"].as_array().map(Vec::len), Some(NODES));
}

/// The page with a measuring script appended (the page itself has none): where the first
/// failure's row, the banner and the servable mark end, the viewport, the page's height.
fn measured(page: &Path, out: &Path) -> serde_json::Value {
    let html = std::fs::read_to_string(page).unwrap();
    assert!(!html.contains("<script"), "the timeline has a script");
    let script = r##"<script>
const box = (q) => document.querySelector(q).getBoundingClientRect().bottom;
document.body.setAttribute("data-measured", [box("[data-first-failure]"), box("#first-failure"),
  box("circle.mark.servable"), window.innerHeight, document.documentElement.scrollHeight].join(" "));
</script></body>"##;
    std::fs::write(out, html.replace("</body>", script)).unwrap();
    let dom = chromium(&["--window-size=1450,900", "--dump-dom"], out);
    let at = dom.find("data-measured=\"").expect("measured") + "data-measured=\"".len();
    let v: Vec<f64> = dom[at..]
        .split('"')
        .next()
        .unwrap()
        .split(' ')
        .map(|x| x.parse().unwrap())
        .collect();
    serde_json::json!({"row": v[0], "banner": v[1], "servable": v[2], "viewport": v[3], "page": v[4]})
}

#[test]
fn the_timeline_groups_roles_and_nodes_and_shows_the_first_failure_without_scrolling() {
    let env = TestEnv::new();
    let dir = scaled_job(&env);
    let page = env.path("timeline.html");
    timeline(&dir, &page);
    let dom = chromium(&["--dump-dom"], &page);
    // Every process has its row, and the first failure one more at the top.
    assert_eq!(dom.matches(r#"<g class="process""#).count(), 2035);
    assert_eq!(
        dom.matches(r#"<g class="process first-failure""#).count(),
        1
    );
    let first = dom.find(r#"<g class="process"#).unwrap();
    assert!(
        dom[first..].starts_with(
            r#"<g class="process first-failure" data-node="n77" data-process="mocker-decode-616""#
        ),
        "{}",
        &dom[first..first + 200]
    );
    // Groups by role, in order; only the failing one open, and in it only the failing node.
    let groups: Vec<&str> = dom
        .match_indices(r#"<details class="group" data-group=""#)
        .map(|(i, m)| {
            let rest = &dom[i + m.len()..];
            &rest[..rest.find('>').unwrap()]
        })
        .collect();
    assert_eq!(
        groups,
        [
            r#"infra""#,
            r#"frontend""#,
            r#"prefill""#,
            r#"decode" open="""#
        ]
    );
    let open_nodes: Vec<&str> = dom
        .match_indices(r#"<details class="node" data-node=""#)
        .map(|(i, m)| {
            let rest = &dom[i + m.len()..];
            &rest[..rest.find('>').unwrap()]
        })
        .filter(|s| s.contains("open"))
        .collect();
    assert_eq!(open_nodes, [r#"n77" open="""#]);
    assert!(dom.contains("95 other node(s): none failed"));
    // A closed group is one bar: decode's is red where its worker was down.
    assert!(dom.contains(r#"data-agg="failed""#));

    let m = measured(&page, &env.path("measured.html"));
    eprintln!("{m}");
    let viewport = m["viewport"].as_f64().unwrap();
    // A 1450x900 window (what is left for the page: about 760 px, a laptop's screen).
    assert!((600.0..=900.0).contains(&viewport), "{m}");
    for what in ["row", "banner", "servable"] {
        assert!(
            m[what].as_f64().unwrap() <= viewport,
            "{what} is below the fold: {m}"
        );
    }
    // Closed groups: the page is a screen, not 2,035 rows (40,700 px).
    assert!(m["page"].as_f64().unwrap() < 1_000.0, "{m}");

    let shot = env.path("timeline.png");
    screenshot(&page, &shot, (1450, 760), Some("MCSUP_KEEP_TIMELINE_128"));
}

#[test]
fn why_names_the_node_and_folds_the_drained_ones() {
    let env = TestEnv::new();
    let dir = scaled_job(&env);
    let why = mcsup_ok(["why".as_ref(), dir.as_os_str()]);
    assert!(
        why.starts_with("first failure: n77/mocker-decode-616 at +8.3 s"),
        "{why}"
    );
    assert!(
        why.contains("n[1-76,78-128] drained because of it"),
        "{why}"
    );
}
