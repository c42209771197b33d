//! Workers exactly as srtctl starts them: for real upstream srt-slurm v1 recipes
//! (tests/fixtures/srt-slurm-v1/*.yaml, each citing its path and commit), on EVERY node of the
//! job, the worker processes mcsup plans must be srtctl's: same processes in the same order,
//! same argv, same environment.
//!
//! The expected side (`<recipe>.srtctl.txt`) is what srtctl's own worker stage produced for the
//! recipe (NVIDIA/srt-slurm main @ c88ef731: `SweepOrchestrator.endpoints` /
//! `backend_processes`, `WorkerStageMixin.start_worker` with `start_srun_process` captured) on
//! nodes `node0..` with addresses `10.0.0.<i+1>` and log directory `/LOGS`; each file's header
//! states the assumptions. The srun/container wrapping and the container-side preamble are not
//! part of either side.

use crate::common;
use crate::node_plan;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mcsup::node::{self, MasterMode, NodeInputs};
use mcsup::plan::{self, ProcessKind, Role};
use mcsup::recipe;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/srt-slurm-v1")
}

/// One process as srtctl started it.
#[derive(Debug, Default)]
struct Expected {
    node: String,
    mode: String,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    unset: Vec<String>,
}

/// Python's shlex.split for what shlex.join wrote (plain words and single-quoted parts).
fn shell_split(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    cur.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => cur.extend(chars.next()),
                        q => cur.push(q),
                    }
                }
            }
            ' ' if in_word => {
                out.push(std::mem::take(&mut cur));
                in_word = false;
            }
            ' ' => {}
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

fn parse(text: &str) -> (usize, Vec<Expected>) {
    let nodes = text
        .lines()
        .find_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("nodes=")))
        .and_then(|n| n.parse().ok())
        .expect("a `nodes=` header");
    let mut out: Vec<Expected> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("## ") {
            let mut w = rest.split_whitespace();
            let node = w.next().unwrap().to_string();
            let mode = w.next().unwrap().split('[').next().unwrap().to_string();
            out.push(Expected {
                node,
                mode,
                ..Default::default()
            });
        } else if let Some(argv) = line.strip_prefix("ARGV: ") {
            out.last_mut().unwrap().argv = shell_split(argv);
        } else if let Some(kv) = line.strip_prefix("ENV ") {
            let (k, v) = kv.split_once('=').unwrap();
            out.last_mut().unwrap().env.insert(k.into(), v.into());
        } else if let Some(list) = line.strip_prefix("UNSET ") {
            // A Python list: ['VLLM_PORT']
            let names = list.trim().trim_start_matches('[').trim_end_matches(']');
            for n in names
                .split(',')
                .map(|n| n.trim().trim_matches('\''))
                .filter(|n| !n.is_empty())
            {
                out.last_mut().unwrap().unset.push(n.into());
            }
        }
    }
    (nodes, out)
}

fn role(mode: &str) -> Role {
    match mode {
        "prefill" => Role::Prefill,
        "decode" => Role::Decode,
        _ => Role::Aggregated,
    }
}

/// Variables mcsup adds that srtctl does not, on purpose.
const MCSUP_ONLY: [&str; 3] = [
    // Dynamo's canary health checks: the engine liveness mcsup adds follows the engine
    // (src/engine/liveness.rs).
    "DYN_HEALTH_CHECK_ENABLED",
    // Mooncake clients advertise the first non-loopback interface without it (0.3.13).
    "MC_TCP_BIND_ADDRESS",
    // Dynamo's /health stays 503 on a mocker without it (src/engine/mocker.rs); srtctl never
    // asks a worker, only the frontend.
    "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS",
];

/// The stop profile: srtctl v1 does not set these, srt-slurm 2.0 does on its SGLang workers
/// (`src/srtctl/cli/mixins/worker_stage.py`), so that a stopping SGLang worker does not wait 65 s
/// for crash dumps. mcsup sets them on every SGLang worker it derives (src/engine/stop.rs).
const SRTCTL_2_0_STOP_PROFILE: [(&str, &str); 2] = [
    ("SGLANG_CUDA_COREDUMP_BEFORE_CRASH", "0"),
    ("SGLANG_PYSPY_DUMP_BEFORE_CRASH", "0"),
];

/// A worker that runs SGLang, by its module.
fn runs_sglang(argv: &[String]) -> bool {
    argv.iter()
        .any(|a| a == "sglang.launch_server" || a == "dynamo.sglang")
}

/// A path srtctl writes as its log directory, on the host (`/LOGS`, the harness's) or in its
/// container (`/logs`, where srtctl mounts it), as mcsup writes it: in the plan's log directory.
fn in_log_dir(s: &str, log_dir: &str) -> String {
    s.replace("/LOGS", log_dir)
        .replace("/logs/", &format!("{log_dir}/"))
}

/// Node `name` of a job on `node0..node<n-1>` (addresses `10.0.0.<i+1>`), as the captures assume.
fn job_node(name: &str, n: usize) -> node::NodeContext {
    let addrs: BTreeMap<String, String> = (0..n)
        .map(|i| (format!("node{i}"), format!("10.0.0.{}", i + 1)))
        .collect();
    let inputs = NodeInputs {
        node: Some(name.to_string()),
        nodelist: Some(format!("node[0-{}]", n - 1)),
        job_id: Some("1".into()),
        hostname: "x".into(),
        cwd: "/job".into(),
        master: MasterMode::Auto,
        ..Default::default()
    };
    node::resolve(&inputs, &addrs, &|_| None).unwrap()
}

fn check(stem: &str) -> usize {
    check_with(stem, &mut |_, _, _| {})
}

/// [`check`], handing every node's plan to `also`.
/// `also` gets the node's name, the job's node count and the plan.
fn check_with(stem: &str, also: &mut dyn FnMut(&str, usize, &plan::Plan)) -> usize {
    let yaml = dir().join(format!("{stem}.yaml"));
    let text = std::fs::read_to_string(dir().join(format!("{stem}.srtctl.txt"))).unwrap();
    let (n, expected) = parse(&text);
    let r = recipe::load_file(&yaml).unwrap_or_else(|e| panic!("{stem}: {e}"));
    let mut compared = 0;
    for i in 0..n {
        let name = format!("node{i}");
        let here: Vec<&Expected> = expected.iter().filter(|e| e.node == name).collect();
        let mut roles: Vec<Role> = Vec::new();
        for e in &here {
            if !roles.contains(&role(&e.mode)) {
                roles.push(role(&e.mode));
            }
        }
        if roles.is_empty() {
            continue;
        }
        let ctx = job_node(&name, n);
        let p = plan::plan(&r, &roles, &ctx).unwrap_or_else(|e| panic!("{stem} {name}: {e}"));
        also(&name, n, &p);
        let workers: Vec<_> = p
            .processes
            .iter()
            .filter(|x| x.kind == ProcessKind::Worker)
            .collect();
        let log_dir = p.log_dir.display().to_string();
        // srtctl launches prefill, decode, agg; mcsup's --role order: compare per mode.
        for mode in ["prefill", "decode", "agg"] {
            let want: Vec<&&Expected> = here.iter().filter(|e| e.mode == mode).collect();
            let got: Vec<_> = workers
                .iter()
                .filter(|w| w.roles == vec![role(mode)])
                .collect();
            assert_eq!(got.len(), want.len(), "{stem} {name} {mode}: process count");
            for (g, w) in got.iter().zip(want) {
                let want_argv: Vec<String> =
                    w.argv.iter().map(|a| in_log_dir(a, &log_dir)).collect();
                assert_eq!(g.argv, want_argv, "{stem} {name} {}: argv", g.name);
                for (k, v) in &w.env {
                    if w.unset.contains(k) {
                        continue;
                    }
                    assert_eq!(
                        g.env_value(k),
                        Some(in_log_dir(v, &log_dir).as_str()),
                        "{stem} {name} {}: {k}",
                        g.name
                    );
                }
                for (k, v) in SRTCTL_2_0_STOP_PROFILE {
                    if runs_sglang(&g.argv) && !w.env.contains_key(k) {
                        let var = g.env.iter().find(|x| x.name == k);
                        assert_eq!(
                            var.map(|x| x.value.as_str()),
                            Some(v),
                            "{stem} {name} {}: the stop profile sets {k}",
                            g.name
                        );
                        assert!(var.unwrap().source.contains("srt-slurm 2.0"));
                    }
                }
                for v in &g.env {
                    let stop_profile = runs_sglang(&g.argv)
                        && SRTCTL_2_0_STOP_PROFILE.iter().any(|(k, _)| *k == v.name);
                    assert!(
                        (w.env.contains_key(&v.name) && !w.unset.contains(&v.name))
                            || MCSUP_ONLY.contains(&v.name.as_str())
                            || stop_profile,
                        "{stem} {name} {}: mcsup sets {}={} which srtctl does not",
                        g.name,
                        v.name,
                        v.value
                    );
                }
                compared += 1;
            }
        }
    }
    compared
}

#[test]
fn every_node_runs_srtctls_worker_processes() {
    let stems = stems();
    assert!(stems.len() >= 8, "{stems:?}");
    let mut total = 0;
    for stem in &stems {
        let n = check(stem);
        assert!(n > 0, "{stem}: nothing compared");
        total += n;
    }
    // srtctl starts 74 worker processes over the 16 recipes (5 of them mocker workers, 3 under
    // nsys or the torch profiler, 8 with observability's env, 4 with dynamo.wheel's).
    assert_eq!(total, 74);
}

fn stems() -> Vec<String> {
    let mut stems: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            (p.extension()? == "yaml")
                .then(|| p.file_stem().unwrap().to_string_lossy().into_owned())
        })
        .collect();
    stems.sort();
    stems
}

/// `--role auto`: on every node of every fixture's job, the roles derived from the layout are the
/// modes srtctl started there (none on a node where it started no worker), and the plan with
/// them is the plan with those roles named.
#[test]
fn role_auto_derives_the_roles_srtctl_starts_on_each_node() {
    let mut nodes_checked = 0;
    let mut empty = 0;
    for stem in stems() {
        let yaml = dir().join(format!("{stem}.yaml"));
        let text = std::fs::read_to_string(dir().join(format!("{stem}.srtctl.txt"))).unwrap();
        let (n, expected) = parse(&text);
        let r = recipe::load_file(&yaml).unwrap();
        for i in 0..n {
            let name = format!("node{i}");
            let want: Vec<Role> = Role::ALL
                .into_iter()
                .filter(|r| {
                    expected
                        .iter()
                        .any(|e| e.node == name && role(&e.mode) == *r)
                })
                .collect();
            let ctx = job_node(&name, n);
            let auto = plan::auto_roles(&r, &ctx).unwrap_or_else(|e| panic!("{stem} {name}: {e}"));
            assert_eq!(auto.roles, want, "{stem} {name}: {}", auto.why);
            assert!(
                auto.why.contains(&format!("node {} of {n}", i + 1)),
                "{}",
                auto.why
            );
            if want.is_empty() {
                empty += 1;
            } else {
                let named = plan::plan(&r, &want, &ctx).unwrap();
                let derived = plan::plan(&r, &auto.roles, &ctx).unwrap();
                assert_eq!(named, derived, "{stem} {name}");
            }
            nodes_checked += 1;
        }
    }
    assert!(nodes_checked >= 30, "{nodes_checked} nodes");
    eprintln!("{nodes_checked} nodes checked, {empty} without a worker");
}

/// With `infra.etcd_nats_dedicated_node`, srtctl's `Nodes.from_slurm` gives the workers every node
/// but the first: `--role auto` finds each node's roles one node further on, and the first node
/// runs no worker but still plans (etcd and NATS at least).
#[test]
fn role_auto_skips_the_dedicated_infra_node() {
    for stem in stems() {
        let yaml = std::fs::read_to_string(dir().join(format!("{stem}.yaml"))).unwrap();
        if yaml.lines().any(|l| l.starts_with("infra:")) {
            continue;
        }
        let text = std::fs::read_to_string(dir().join(format!("{stem}.srtctl.txt"))).unwrap();
        let (n, expected) = parse(&text);
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("r.yaml");
        std::fs::write(
            &path,
            format!("{yaml}\ninfra:\n  etcd_nats_dedicated_node: true\n"),
        )
        .unwrap();
        let r = recipe::load_file(&path).unwrap();
        for i in 0..=n {
            let name = format!("node{i}");
            let want: Vec<Role> = match i.checked_sub(1) {
                None => Vec::new(),
                Some(w) => Role::ALL
                    .into_iter()
                    .filter(|r| {
                        expected
                            .iter()
                            .any(|e| e.node == format!("node{w}") && role(&e.mode) == *r)
                    })
                    .collect(),
            };
            let ctx = job_node(&name, n + 1);
            let auto = plan::auto_roles(&r, &ctx).unwrap_or_else(|e| panic!("{stem} {name}: {e}"));
            assert_eq!(auto.roles, want, "{stem} {name}: {}", auto.why);
            let p =
                plan::plan(&r, &auto.roles, &ctx).unwrap_or_else(|e| panic!("{stem} {name}: {e}"));
            if i == 0 {
                assert!(
                    auto.why.contains("reserved for etcd and NATS"),
                    "{}",
                    auto.why
                );
                let names: Vec<&str> = p.processes.iter().map(|x| x.name.as_str()).collect();
                assert!(
                    !p.processes.iter().any(|x| x.kind == ProcessKind::Worker),
                    "{stem}: {names:?}"
                );
            }
        }
    }
}

/// A profiled job's plan makes srtctl's per-mode output directories (below the log directory)
/// and puts the workers under nsys with their output there; a job without profiling makes none.
#[test]
fn profiling_output_goes_to_the_log_directory() {
    let mut seen = Vec::new();
    check_with("qwen35-1p1d-nsys-profile", &mut |node, _, p| {
        let want = p.log_dir.join(if node == "node0" {
            "profiles/prefill"
        } else {
            "profiles/decode"
        });
        assert_eq!(p.dirs, vec![want.clone()], "{node}");
        let w = p
            .processes
            .iter()
            .find(|x| x.kind == ProcessKind::Worker)
            .unwrap();
        let out = &w.argv[w.argv.iter().position(|a| a == "-o").unwrap() + 1];
        assert!(
            out.starts_with(&want.display().to_string()),
            "{node}: {out}"
        );
        seen.push(node.to_string());
    });
    assert_eq!(seen, ["node0", "node1"]);
    check_with("qwen3-32b-disagg-tp2", &mut |node, _, p| {
        assert!(p.dirs.is_empty(), "{node}: {:?}", p.dirs);
    });
}

#[test]
fn every_fixture_cites_its_upstream_source() {
    let re = regex::Regex::new(r"(?m)^# source: NVIDIA/srt-slurm \S+ @ [0-9a-f]{40}$").unwrap();
    for e in std::fs::read_dir(dir()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "yaml") {
            let t = std::fs::read_to_string(&p).unwrap();
            assert!(re.is_match(&t), "{} has no source line", p.display());
        }
    }
}

#[test]
fn the_role_must_match_the_layout() {
    let r = recipe::load_file(&dir().join("qwen3-32b-disagg-tp2.yaml")).unwrap();
    let addrs: BTreeMap<String, String> = (0..2)
        .map(|i| (format!("node{i}"), format!("10.0.0.{}", i + 1)))
        .collect();
    let inputs = NodeInputs {
        node: Some("node1".into()),
        nodelist: Some("node[0-1]".into()),
        hostname: "x".into(),
        cwd: "/job".into(),
        ..Default::default()
    };
    let ctx = node::resolve(&inputs, &addrs, &|_| None).unwrap();
    // node1 runs prefill 4, 5 and decode 0, 1: --role decode alone would drop two prefills.
    let e = plan::plan(&r, &[Role::Decode], &ctx).unwrap_err();
    assert_eq!(e.key_path, "--role");
    assert!(e.fix.contains("--role prefill,decode"), "{e}");
    let ok = plan::plan(&r, &[Role::Prefill, Role::Decode], &ctx).unwrap();
    let names: Vec<&str> = ok.processes.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "sglang-prefill-4",
            "sglang-prefill-5",
            "sglang-decode-0",
            "sglang-decode-1"
        ]
    );
}

/// No real recipe holds a secret, so none of their plans may show `<redacted>`: the redaction
/// rule must not hide flags such as --max-prefill-tokens or *_TOKENS_* variables.
#[test]
fn no_non_secret_is_redacted_in_real_recipes() {
    let mut plans = 0;
    for e in std::fs::read_dir(dir()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "yaml") {
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            check_with(&stem, &mut |node, _, plan| {
                let text = mcsup::render::plan_human(plan, false);
                assert!(!text.contains("<redacted>"), "{stem} {node}:\n{text}");
                assert!(
                    !plan.redacted && !mcsup::render::redacted(plan).redacted,
                    "{stem} {node}"
                );
                plans += 1;
            });
        }
    }
    assert!(plans >= 20, "{plans}");
}

/// Both recipe generations: each recipe above, migrated to 2.0 (`roles:` with nodes / workers /
/// gpus / env / args / kv_events, `engine:` with the backend's other keys), plans the same
/// worker processes on every node. The discovery variables differ on purpose: 2.0 points
/// ETCD_ENDPOINTS at the infra node's address and sets NATS_SERVER only with a NATS plane.
#[test]
fn the_2_0_form_of_each_recipe_runs_the_same_workers() {
    let tmp = tempfile::tempdir().unwrap();
    let mut compared = 0;
    for e in std::fs::read_dir(dir()).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        // mcsup reads `profiling:`, `observability:` and `dynamo.wheel` in v1 recipes only: how
        // srt-slurm 2.0 treats them is not checked against its source yet.
        let raw: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        if raw.get("profiling").is_some()
            || raw.get("observability").is_some()
            || raw.get("dynamo").and_then(|d| d.get("wheel")).is_some()
        {
            continue;
        }
        let m = mcsup::migrate::migrate(&path, &text).unwrap();
        let out = tmp.path().join(format!("{stem}.yaml"));
        std::fs::write(&out, &m.yaml).unwrap();
        let v2 = recipe::load_file(&out).unwrap_or_else(|e| panic!("{stem}: {e}\n{}", m.yaml));
        check_with(&stem, &mut |node, nodes, v1_plan| {
            let ctx = job_node(node, nodes);
            let p2 = plan::plan(&v2, &v1_plan.roles, &ctx)
                .unwrap_or_else(|e| panic!("{stem} {node}: {e}"));
            let workers = |p: &plan::Plan| -> Vec<(Vec<String>, mcsup::engine::EnvPairs)> {
                p.processes
                    .iter()
                    .filter(|x| x.kind == ProcessKind::Worker)
                    .map(|x| {
                        let env = x
                            .env
                            .iter()
                            .filter(|v| v.name != "ETCD_ENDPOINTS" && v.name != "NATS_SERVER")
                            .map(|v| (v.name.clone(), v.value.clone()))
                            .collect();
                        (x.argv.clone(), env)
                    })
                    .collect()
            };
            assert_eq!(workers(v1_plan), workers(&p2), "{stem} {node}\n{}", m.yaml);
            compared += workers(&p2).len();
        });
    }
    assert_eq!(compared, 59);
}

/// One process of srtctl's frontend stage, as captured.
#[derive(Debug, Default)]
struct FrontendExpected {
    node: String,
    /// mcsup's (and srtctl's `ManagedProcess`) name: `nginx`, `frontend_<i>`, `sglang_router_<i>`.
    name: String,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
}

/// `<recipe>.frontend.txt`: the layout line, the health expectation, the processes and the
/// nginx configuration srtctl wrote.
struct FrontendCapture {
    health_path: String,
    prefill: u32,
    decode: u32,
    processes: Vec<FrontendExpected>,
    nginx_conf: Option<String>,
}

fn parse_frontend(text: &str) -> FrontendCapture {
    let mut cap = FrontendCapture {
        health_path: String::new(),
        prefill: 0,
        decode: 0,
        processes: Vec::new(),
        nginx_conf: None,
    };
    let mut conf: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("HEALTH ") {
            for w in rest.split_whitespace() {
                let (k, v) = w.split_once('=').unwrap();
                match k {
                    "path" => cap.health_path = v.into(),
                    "prefill" => cap.prefill = v.parse().unwrap(),
                    "decode" => cap.decode = v.parse().unwrap(),
                    _ => {}
                }
            }
        } else if line.starts_with("## FILE ") {
            conf = Some(String::new());
        } else if let Some(rest) = line.strip_prefix("## ") {
            let mut w = rest.split_whitespace();
            let node = w.next().unwrap().to_string();
            let log = w.next().unwrap();
            let tail = log
                .strip_prefix(&format!("{node}_"))
                .unwrap()
                .trim_end_matches(".out");
            let name = match tail.strip_prefix("router_") {
                Some(i) => format!("sglang_router_{i}"),
                None => tail.to_string(),
            };
            cap.processes.push(FrontendExpected {
                node,
                name,
                ..Default::default()
            });
        } else if let Some(argv) = line.strip_prefix("ARGV: ") {
            cap.processes.last_mut().unwrap().argv = shell_split(argv);
        } else if let Some(kv) = line.strip_prefix("ENV ") {
            let (k, v) = kv.split_once('=').unwrap();
            cap.processes
                .last_mut()
                .unwrap()
                .env
                .insert(k.into(), v.into());
        } else if let (Some(c), Some(l)) = (conf.as_mut(), line.strip_prefix("|")) {
            c.push_str(l.strip_prefix(' ').unwrap_or(l));
            c.push('\n');
        }
    }
    cap.nginx_conf = conf;
    cap
}

/// An nginx configuration's directives, without comments, blank lines or layout: two
/// configurations with the same directives in the same order are the same configuration.
fn directives(conf: &str) -> Vec<String> {
    conf.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .flat_map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .collect()
}

/// The frontend stage exactly as srtctl starts it, on every node: for each upstream recipe (and
/// one derived to cover the SGLang router behind nginx with every nginx option), the processes
/// of `<recipe>.frontend.txt` (srtctl's `start_frontend` captured, see the file's header) are
/// the frontend processes mcsup plans, on the same nodes, with the same argv and environment;
/// the nginx configuration has srtctl's directives; the servable gate waits for the worker
/// counts srtctl's health check waits for, on the same endpoint.
#[test]
fn every_node_runs_srtctls_frontend_stage() {
    let mut stems: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name()?.to_str()?;
            name.strip_suffix(".frontend.txt").map(String::from)
        })
        .collect();
    stems.sort();
    assert_eq!(stems.len(), 16, "{stems:?}");
    let (mut processes, mut confs, mut gates) = (0, 0, 0);
    for stem in &stems {
        let cap = parse_frontend(
            &std::fs::read_to_string(dir().join(format!("{stem}.frontend.txt"))).unwrap(),
        );
        let mut got: Vec<(String, plan::ProcessSpec)> = Vec::new();
        let mut files: Vec<(String, plan::FileSpec)> = Vec::new();
        let mut log_dirs: BTreeMap<String, String> = BTreeMap::new();
        check_with(stem, &mut |node, _, p| {
            log_dirs.insert(node.to_string(), p.log_dir.display().to_string());
            got.extend(
                p.processes
                    .iter()
                    .filter(|x| x.kind == ProcessKind::Frontend)
                    .map(|x| (node.to_string(), x.clone())),
            );
            files.extend(p.files.iter().map(|f| (node.to_string(), f.clone())));
        });
        assert_eq!(
            got.len(),
            cap.processes.len(),
            "{stem}: frontend processes {:?}",
            got.iter().map(|(n, p)| (n, &p.name)).collect::<Vec<_>>()
        );
        for want in &cap.processes {
            let (_, g) = got
                .iter()
                .find(|(n, p)| *n == want.node && p.name == want.name)
                .unwrap_or_else(|| panic!("{stem}: no {} on {}", want.name, want.node));
            if want.name == "nginx" {
                // srtctl: `bash -c '[ulimit -n 1048576 && ]nginx -c /logs/nginx.conf -g …'` in
                // its nginx container; mcsup: nginx itself, the ulimit as its preamble.
                let inner = &want.argv[2];
                assert_eq!(
                    g.preamble.is_some(),
                    inner.starts_with("ulimit -n 1048576 && "),
                    "{stem}: nginx ulimit"
                );
                assert_eq!(g.argv[..2], ["nginx", "-c"], "{stem}: nginx argv");
                assert!(
                    g.argv.iter().any(|a| a.starts_with("daemon off;")),
                    "{stem}"
                );
                let (_, file) = files
                    .iter()
                    .find(|(n, f)| *n == want.node && f.path.ends_with("nginx.conf"))
                    .unwrap_or_else(|| panic!("{stem}: no nginx.conf on {}", want.node));
                assert_eq!(g.argv[2], file.path.display().to_string());
                assert_eq!(
                    directives(&file.contents),
                    directives(cap.nginx_conf.as_deref().expect("srtctl wrote nginx.conf")),
                    "{stem}: nginx.conf directives"
                );
                confs += 1;
            } else {
                assert_eq!(g.argv, want.argv, "{stem} {}: argv", want.name);
                let env: BTreeMap<String, String> = g
                    .env
                    .iter()
                    .map(|v| (v.name.clone(), v.value.clone()))
                    .collect();
                let log_dir = log_dirs[&want.node].as_str();
                let want_env: BTreeMap<String, String> = want
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), in_log_dir(v, log_dir)))
                    .collect();
                assert_eq!(env, want_env, "{stem} {}: env", want.name);
            }
            processes += 1;
        }
        // The servable gate: on the public endpoint, srtctl's path and counts.
        let servable: Vec<_> = got
            .iter()
            .filter_map(|(_, p)| {
                p.readiness.as_ref()?.probes.iter().find_map(|x| match x {
                    plan::ProbeSpec::Servable(s) => Some(s.clone()),
                    _ => None,
                })
            })
            .collect();
        assert_eq!(servable.len(), 1, "{stem}: one public endpoint");
        let s = &servable[0];
        assert_eq!(
            (
                s.frontend.health_path(),
                s.expected.prefill,
                s.expected.decode,
                s.port
            ),
            (cap.health_path.as_str(), cap.prefill, cap.decode, 8000),
            "{stem}: servable gate"
        );
        gates += 1;
    }
    // 38 frontend processes: 28 Dynamo frontends, 3 SGLang routers, 7 nginx.
    assert_eq!((processes, confs, gates), (38, 7, 16));
}

/// The real nginx accepts what mcsup runs: for every fixture with srtctl's multiple-frontends
/// topology, the planned `nginx.conf` and nginx argv (with `-t`, which parses and checks the
/// configuration without serving) pass Debian's nginx 1.22, as the user mcsup runs as.
#[test]
fn nginx_accepts_the_planned_configuration() {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    common::require(
        nginx.is_some(),
        "nginx",
        "run scripts/setup.sh (it installs nginx-light)",
    );
    let nginx = nginx.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for e in std::fs::read_dir(dir()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
        let mut found: Vec<(plan::ProcessSpec, plan::FileSpec)> = Vec::new();
        check_with(&stem, &mut |_, _, plan| {
            if let Some(n) = plan.processes.iter().find(|x| x.name == "nginx") {
                let f = plan
                    .files
                    .iter()
                    .find(|f| f.path.ends_with("nginx.conf"))
                    .unwrap();
                found.push((n.clone(), f.clone()));
            }
        });
        for (proc, file) in found {
            let dir = tmp.path().join(&stem);
            std::fs::create_dir_all(&dir).unwrap();
            let conf = dir.join("nginx.conf");
            std::fs::write(&conf, &file.contents).unwrap();
            let planned_dir = file.path.parent().unwrap().display().to_string();
            let argv: Vec<String> = proc
                .argv
                .iter()
                .map(|a| a.replace(&planned_dir, &dir.display().to_string()))
                .collect();
            let out = std::process::Command::new(nginx)
                .args(&argv[1..])
                .arg("-t")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{stem}: nginx {:?} -t:\n{}",
                &argv[1..],
                String::from_utf8_lossy(&out.stderr)
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 7);
}

/// The command line: without --role, a node of a job (its node list known) derives its roles and
/// `mcsup plan` says how; a recipe whose workers are listed by hand cannot, and says so.
#[test]
fn plan_without_role_in_a_job_derives_it_and_shows_how() {
    let recipe = dir().join("mocker-1p2d.yaml");
    let out = std::process::Command::new(common::MCSUP)
        .env_remove("MCSUP_ROLE")
        .env_remove("SLURM_JOB_NODELIST")
        .args([
            "plan",
            "--node",
            "node2",
            "--nodelist",
            "node[0-2]",
            "--recipe",
        ])
        .arg(&recipe)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("roles: decode"), "{text}");
    assert!(
        text.contains("roles from --role auto: node2 is node 3 of 3 in the job's node list: srtctl's layout puts decode[1] rank 0 here"),
        "{text}"
    );
    let dir = tempfile::tempdir().unwrap();
    let by_hand = dir.path().join("r.yaml");
    std::fs::write(
        &by_hand,
        "backend: {type: sglang}\nmcsup:\n  workers:\n    decode:\n      - {name: w, command: [sleep, '1']}\n",
    )
    .unwrap();
    let out = std::process::Command::new(common::MCSUP)
        .env_remove("MCSUP_ROLE")
        .args([
            "plan",
            "--role",
            "auto",
            "--node",
            "n1",
            "--nodelist",
            "n1",
            "--recipe",
        ])
        .arg(&by_hand)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--role: auto: mcsup.workers.decode lists workers by hand")
            && err.contains("fix:"),
        "{err}"
    );
}

/// The Mooncake lints (an HA master address, vLLM store-connector workers without one hash
/// seed, a `local_first` master with clients named apart from their store) say nothing on the
/// upstream recipes, on any node, nor on the project's own (the seed's among them); and the TCP connection check, against the pinned Mooncake
/// (0.3.13.post1), warns none of their Mooncake processes, while an older one would warn exactly
/// those that transfer over TCP without the pool.
fn lints_say_nothing(what: &str, p: &plan::Plan) {
    for w in &p.warnings {
        assert!(
            !["HA address", "PYTHONHASHSEED", "local_first"]
                .iter()
                .any(|m| w.contains(m)),
            "{what}: {w}"
        );
    }
}

#[test]
fn the_mooncake_lints_are_silent_on_upstream_recipes() {
    use mcsup::preflight::{self, mooncake_version, Report, Status};
    let at = |version: &str| mooncake_version::Installed {
        package: "mooncake-transfer-engine-non-cuda".into(),
        version: version.into(),
        metadata: PathBuf::from("METADATA"),
    };
    let (mut nodes, mut tcp_clients) = (0, 0);
    for stem in stems() {
        check_with(&stem, &mut |name, _, p| {
            nodes += 1;
            lints_say_nothing(&format!("{stem} {name}"), p);
            let clients = mooncake_version::tcp_without_pool(p, &preflight::protocol(p));
            tcp_clients += clients.len();
            for (version, warned) in [
                ("0.3.13.post1", false),
                ("0.3.12.post1", !clients.is_empty()),
            ] {
                let mut r = Report::default();
                mooncake_version::check_tcp_pool(&clients, Some(&at(version)), &mut r);
                assert_eq!(
                    r.checks.iter().any(|c| c.status == Status::Warn),
                    warned,
                    "{stem} {name} with {version}: {:?}",
                    r.checks
                );
            }
        });
    }
    let upstream = (nodes, tcp_clients);
    // The project's own recipes (the seed's among them), each role on the infra node.
    let recipes = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes");
    for e in std::fs::read_dir(&recipes).unwrap() {
        let path = e.unwrap().path();
        let yaml = std::fs::read_to_string(&path).unwrap();
        for role in [Role::Prefill, Role::Decode, Role::Aggregated] {
            let Ok(p) = node_plan::plan_on(&yaml, "n1", &[role]) else {
                continue; // the recipe has no such role
            };
            nodes += 1;
            lints_say_nothing(&path.display().to_string(), &p);
            tcp_clients += mooncake_version::tcp_without_pool(&p, &preflight::protocol(&p)).len();
        }
    }
    eprintln!(
        "upstream: {} nodes planned, {} Mooncake processes over TCP without the pool; with the project's recipes: {nodes}, {tcp_clients}",
        upstream.0, upstream.1
    );
    assert!(upstream.0 >= 16 && nodes > upstream.0, "{nodes}");
    // recipes/local.yaml: its store and two workers, aggregated.
    assert!(tcp_clients >= 3, "{tcp_clients}");
}

/// One srun srtctl started for a TRT-LLM job: its options, its `export`s and its command.
#[derive(Debug, Default)]
struct TrtStep {
    srun: Vec<String>,
    exports: BTreeMap<String, String>,
    command: Vec<String>,
}

/// A TRT-LLM capture (scripts/capture/srtctl_trtllm.py): the job's node names, every srun in
/// order, and the files srtctl wrote (`FILE: /LOGS/<name>`, then `| `-prefixed lines).
struct TrtCapture {
    nodes: Vec<String>,
    steps: Vec<TrtStep>,
    files: Vec<(String, String)>,
}

fn trt_capture(text: &str) -> TrtCapture {
    let nodes = text
        .lines()
        .find_map(|l| l.strip_prefix("# nodes "))
        .expect("a `# nodes` line")
        .split_whitespace()
        .take_while(|w| w.starts_with("node"))
        .map(String::from)
        .collect();
    let (mut steps, mut files): (Vec<TrtStep>, Vec<(String, String)>) = (Vec::new(), Vec::new());
    for line in text.lines() {
        if let Some(argv) = line.strip_prefix("SRUN: ") {
            steps.push(TrtStep {
                srun: shell_split(argv),
                ..Default::default()
            });
        } else if let Some(kv) = line.strip_prefix("BASH: export ") {
            let (k, v) = kv.split_once('=').unwrap();
            let v = shell_split(v).join(" ");
            steps.last_mut().unwrap().exports.insert(k.into(), v);
        } else if let Some(cmd) = line.strip_prefix("BASH: ") {
            if cmd != "( FINGERPRINT )" {
                steps.last_mut().unwrap().command = shell_split(cmd);
            }
        } else if let Some(name) = line.strip_prefix("FILE: /LOGS/") {
            files.push((name.to_string(), String::new()));
        } else if let (Some(t), Some((_, body))) = (
            line.strip_prefix("| ").or((line == "|").then_some("")),
            files.last_mut(),
        ) {
            body.push_str(t);
            body.push('\n');
        }
    }
    TrtCapture {
        nodes,
        steps,
        files,
    }
}

/// The value of `--flag` in an argv.
fn opt<'a>(argv: &'a [String], flag: &str) -> Option<&'a str> {
    let i = argv.iter().position(|a| a == flag)?;
    argv.get(i + 1).map(String::as_str)
}

/// Every node's plan (`--role auto`, job 4242 as the captures assume) of a TRT-LLM capture's job,
/// its steps in the captures' container (image `IMAGE`, srtctl's mounts of `/LOGS` and `/MODEL`).
fn trt_plans(yaml: &Path, nodes: &[String]) -> Vec<(String, Result<plan::Plan, String>)> {
    let r = recipe::load_file(yaml).unwrap();
    let hf = r
        .raw_get(&["model", "path"])
        .and_then(|v| v.as_str())
        .is_some_and(|p| p.starts_with("hf:"));
    let container = mcsup::engine::StepContainer {
        image: "IMAGE".into(),
        mounts: if hf {
            "/LOGS:/logs"
        } else {
            "/LOGS:/logs,/MODEL:/model"
        }
        .into(),
    };
    let addrs: BTreeMap<String, String> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), format!("10.0.0.{}", i + 1)))
        .collect();
    nodes
        .iter()
        .map(|n| {
            let inputs = NodeInputs {
                node: Some(n.clone()),
                nodelist: Some(format!("node[0-{}]", nodes.len() - 1)),
                job_id: Some("4242".into()),
                hostname: "x".into(),
                cwd: "/job".into(),
                ..Default::default()
            };
            let ctx = node::resolve(&inputs, &addrs, &|_| None).unwrap();
            let opts = plan::PlanOptions {
                step_container: Some(container.clone()),
                ..Default::default()
            };
            let p = plan::plan_for_role(&r, "auto", &ctx, opts);
            (n.clone(), p.map_err(|e| e.to_string()))
        })
        .collect()
}

fn trt_stems() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir().join("trtllm"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    out.sort();
    out
}

/// Issue 31, item 2: tests/fixtures/srt-slurm-v1/trtllm holds srtctl's own launch of 25 upstream
/// TRT-LLM recipes (scripts/capture/srtctl_trtllm.py). On every node of each job, mcsup plans
/// exactly srtctl's endpoints, each once, on its leader node, as one Slurm step:
/// - the srun options are srtctl's, in its order, container options included (mcsup is given
///   the captures' container, as `mcsup render` gives it the recipe's), plus mcsup's three
///   (`--kill-on-bad-exit=1`, `--ntasks-per-node`, `--job-name` = the plan's step); srtctl's
///   `--output` is not mcsup's (the srun's output is the process's log);
/// - each rank's command is srtctl's (paths in the log directory; the capture's `/MODEL` is the
///   recipe's model; `TRTLLM_EPLB_SHM_NAME` random in srtctl, one per endpoint here);
/// - the environment is srtctl's exports, nothing more;
/// - the engine files the endpoint's ranks read are in the leader's plan, equal to srtctl's.
#[test]
fn every_trtllm_endpoint_is_srtctls_step() {
    let source = regex::Regex::new(r"(?m)^# source: NVIDIA/srt-slurm \S+ @ [0-9a-f]{40}$").unwrap();
    let mcsup_srun = ["--kill-on-bad-exit=1", "--ntasks-per-node", "--job-name"];
    let not_mcsups = ["--output"];
    let (mut recipes, mut endpoints, mut files, mut multi_node) = (0, 0, 0, 0);
    // What the comparison covered: partial-node endpoints, numactl, trtllm-serve ranks.
    let (mut cvd, mut numactl, mut serve, mut nsys) = (0, 0, 0, 0);
    let (mut frontends, mut orchestrators, mut liveness) = (0, 0, 0);
    for yaml in trt_stems() {
        recipes += 1;
        let name = yaml.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&yaml).unwrap();
        assert!(source.is_match(&text), "{name} has no source line");
        let cap = trt_capture(&std::fs::read_to_string(yaml.with_extension("srtctl.txt")).unwrap());
        let model: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        let model = model["model"]["path"].as_str().unwrap().to_string();
        let plans = trt_plans(&yaml, &cap.nodes);
        let mut steps_planned = 0;
        for (n, p) in &plans {
            let p = p.as_ref().unwrap_or_else(|e| panic!("{name} {n}: {e}"));
            steps_planned += p
                .processes
                .iter()
                .filter(|x| x.slurm_step.is_some() && x.kind == ProcessKind::Worker)
                .count();
        }
        let workers: Vec<&TrtStep> = cap
            .steps
            .iter()
            .filter(|s| s.srun.iter().any(|a| a == "--oversubscribe"))
            .collect();
        assert_eq!(steps_planned, workers.len(), "{name}: endpoints planned");
        for want in workers {
            let nodes: Vec<&str> = opt(&want.srun, "--nodelist").unwrap().split(',').collect();
            // /LOGS/<leader>_<mode>_w<index>.out
            let out = opt(&want.srun, "--output").unwrap();
            let stem = out.rsplit('/').next().unwrap().trim_end_matches(".out");
            let mut parts = stem.rsplitn(3, '_');
            let index = parts.next().unwrap().trim_start_matches('w');
            let mode = parts.next().unwrap();
            let wanted = format!("trtllm-{mode}-{index}");
            let (_, plan) = plans.iter().find(|(n, _)| n == nodes[0]).unwrap();
            let plan = plan.as_ref().unwrap();
            let log_dir = plan.log_dir.display().to_string();
            let got = plan
                .processes
                .iter()
                .find(|x| x.name == wanted)
                .unwrap_or_else(|| {
                    panic!("{name}: {wanted} not planned on its leader {}", nodes[0])
                });
            let step = got.slurm_step.as_ref().expect("a Slurm step");
            assert_eq!(got.kind, ProcessKind::Worker);
            // mcsup's engine liveness (its addition; the environment stays srtctl's): a Dynamo
            // leader's /health and progress on its system port, as for any derived Dynamo worker.
            if got.argv.iter().any(|a| a == "dynamo.trtllm") {
                let l = got
                    .liveness
                    .as_ref()
                    .unwrap_or_else(|| panic!("{name} {wanted}: no liveness"));
                assert!(
                    matches!(&l.probe, mcsup::plan::ProbeSpec::EngineAlive(a) if a.path == "/health"),
                    "{name} {wanted}: {}",
                    l.probe
                );
                liveness += 1;
            }
            // The srun's options, up to the rank command (`nsys`, `numactl` or TRT-LLM's launcher).
            let cut = got
                .argv
                .iter()
                .position(|a| ["nsys", "numactl", "trtllm-llmapi-launch"].contains(&a.as_str()))
                .unwrap();
            let (srun, command) = got.argv.split_at(cut);
            assert_eq!(opt(srun, "--job-name"), Some(step.name.as_str()));
            assert_eq!(
                opt(srun, "--kill-on-bad-exit=1"),
                opt(srun, "--kill-on-bad-exit=1")
            );
            assert!(
                srun.contains(&"--kill-on-bad-exit=1".to_string()),
                "{name} {wanted}"
            );
            let ntasks: usize = opt(srun, "--ntasks").unwrap().parse().unwrap();
            let per_node: usize = opt(srun, "--ntasks-per-node").unwrap().parse().unwrap();
            assert_eq!(per_node * nodes.len(), ntasks, "{name} {wanted}");
            let strip = |argv: &[String], drop: &[&str], with_value: &[&str]| -> Vec<String> {
                let mut out = Vec::new();
                let mut it = argv.iter();
                while let Some(a) = it.next() {
                    if with_value.contains(&a.as_str()) {
                        it.next();
                    } else if !drop.contains(&a.as_str()) {
                        out.push(a.clone());
                    }
                }
                out
            };
            assert_eq!(
                strip(srun, &["--kill-on-bad-exit=1"], &mcsup_srun[1..]),
                strip(&want.srun, &[], &not_mcsups),
                "{name} {wanted}: srun options"
            );
            let served = model
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap()
                .to_string();
            let want_cmd: Vec<String> = want
                .command
                .iter()
                .map(|a| {
                    if a == "MODEL" {
                        served.clone()
                    } else {
                        in_log_dir(a, &log_dir)
                    }
                })
                .collect();
            assert_eq!(
                command,
                want_cmd.as_slice(),
                "{name} {wanted}: rank command"
            );
            for (k, v) in &want.exports {
                let g = got.env_value(k);
                if k == "TRTLLM_EPLB_SHM_NAME" {
                    assert!(
                        g.is_some_and(|g| g.starts_with("moe_shared_")),
                        "{name} {wanted}: {g:?}"
                    );
                } else {
                    assert_eq!(g, Some(v.as_str()), "{name} {wanted}: {k}");
                }
            }
            for v in &got.env {
                assert!(
                    want.exports.contains_key(&v.name),
                    "{name} {wanted}: mcsup sets {}={} which srtctl does not",
                    v.name,
                    v.value
                );
            }
            // The engine file the ranks read is written by this node's plan, as srtctl wrote it.
            let file = format!("trtllm_config_{mode}.yaml");
            let (_, want_text) = cap.files.iter().find(|(n, _)| *n == file).unwrap();
            let planned = plan
                .files
                .iter()
                .find(|f| f.path == plan.log_dir.join(&file))
                .unwrap_or_else(|| panic!("{name}: {file} not in {}'s plan", nodes[0]));
            assert_eq!(&planned.contents, want_text, "{name} {file}");
            files += 1;
            // Its other nodes start nothing for it, and stay up while it runs.
            for follower in &nodes[1..] {
                let (_, fp) = plans.iter().find(|(n, _)| n == follower).unwrap();
                let fp = fp.as_ref().unwrap();
                assert!(
                    !fp.processes.iter().any(|x| x.name == wanted),
                    "{name}: {wanted} planned on {follower} too"
                );
                let held = format!("{mode}[{index}] (step {}, led by {})", step.name, nodes[0]);
                assert!(
                    fp.shutdown.holds_ranks_of.contains(&held),
                    "{name} {follower}: {:?}",
                    fp.shutdown.holds_ranks_of
                );
            }
            endpoints += 1;
            multi_node += usize::from(nodes.len() > 1);
            cvd += usize::from(got.env_value("CUDA_VISIBLE_DEVICES").is_some());
            numactl += usize::from(command.iter().any(|a| a == "numactl"));
            nsys += usize::from(command.first().is_some_and(|a| a == "nsys"));
            serve += usize::from(command.iter().any(|a| a == "trtllm-serve"));
        }
        // The frontend stage: each srun that is not an endpoint (Dynamo frontends, nginx, the
        // trtllm_serve orchestrator) is a frontend process of its node's plan with srtctl's
        // command and environment; the orchestrator is a Slurm step with srtctl's srun options.
        for want in cap
            .steps
            .iter()
            .filter(|s| !s.srun.iter().any(|a| a == "--oversubscribe"))
        {
            let node = opt(&want.srun, "--nodelist").unwrap();
            let (_, plan) = plans.iter().find(|(n, _)| n == node).unwrap();
            let plan = plan.as_ref().unwrap();
            let log_dir = plan.log_dir.display().to_string();
            let want_cmd: Vec<String> = want
                .command
                .iter()
                .map(|a| in_log_dir(a, &log_dir))
                .collect();
            let got = plan
                .processes
                .iter()
                .filter(|x| x.kind == ProcessKind::Frontend)
                // mcsup's nginx also logs to stderr and keeps its pid file in the log
                // directory (src/engine/frontend.rs); its configuration is srtctl's.
                .find(|x| {
                    x.argv.ends_with(&want_cmd)
                        || (want_cmd[0] == "nginx" && x.argv.starts_with(&want_cmd[..3]))
                })
                .unwrap_or_else(|| {
                    let planned: Vec<&Vec<String>> = plan
                        .processes
                        .iter()
                        .filter(|x| x.kind == ProcessKind::Frontend)
                        .map(|x| &x.argv)
                        .collect();
                    panic!("{name} {node}: no frontend runs {want_cmd:?}: {planned:?}")
                });
            for (k, v) in &want.exports {
                assert_eq!(
                    got.env_value(k),
                    Some(v.as_str()),
                    "{name} {} {k}",
                    got.name
                );
            }
            if let Some(step) = &got.slurm_step {
                assert!(got.argv.ends_with(&want_cmd));
                let cut = got.argv.len() - want_cmd.len();
                let srun: Vec<String> = got.argv[..cut]
                    .iter()
                    .filter(|a| *a != "--kill-on-bad-exit=1")
                    .cloned()
                    .collect();
                let job_name = srun.iter().position(|a| a == "--job-name").unwrap();
                assert_eq!(srun[job_name + 1], step.name);
                let mut srun = srun;
                srun.drain(job_name..job_name + 2);
                let mut want_srun = want.srun.clone();
                let cut = want_srun.iter().position(|a| a == "--output").unwrap();
                want_srun.drain(cut..cut + 2);
                assert_eq!(srun, want_srun, "{name} {}: srun options", got.name);
                // Its ser.yaml, as srtctl wrote it.
                let (_, ser) = cap.files.iter().find(|(n, _)| n == "ser.yaml").unwrap();
                let planned = plan
                    .files
                    .iter()
                    .find(|f| f.path.ends_with("ser.yaml"))
                    .unwrap();
                assert_eq!(&planned.contents, ser, "{name}: ser.yaml");
                orchestrators += 1;
            }
            frontends += 1;
        }
        // Each endpoint's shared-memory name is its own.
        let mut shm: Vec<String> = plans
            .iter()
            .flat_map(|(_, p)| p.as_ref().unwrap().processes.clone())
            .filter_map(|x| x.env_value("TRTLLM_EPLB_SHM_NAME").map(String::from))
            .collect();
        let all = shm.len();
        shm.sort();
        shm.dedup();
        assert_eq!(shm.len(), all, "{name}: {shm:?}");
    }
    assert!(recipes >= 20, "{recipes} TRT-LLM captures");
    // The 27 captures (grep of the .srtctl.txt files): 152 endpoint sruns, 28 over several nodes,
    // 54 with CUDA_VISIBLE_DEVICES, 78 under numactl, 5 running trtllm-serve, 8 under nsys.
    assert_eq!(
        (endpoints, multi_node, cvd, numactl, serve, nsys),
        (152, 28, 54, 78, 5, 8)
    );
    // The 94 other sruns of the captures (grep): 83 Dynamo frontends, 10 nginx, 1 orchestrator.
    assert_eq!((frontends, orchestrators), (94, 1));
    assert!(
        liveness > 0 && liveness < endpoints,
        "{liveness} of {endpoints}"
    );
    eprintln!("{recipes} recipes: {endpoints} endpoints ({multi_node} multi-node, {liveness} with mcsup's Dynamo liveness), {files} engine files, {frontends} frontend processes ({orchestrators} trtllm_serve orchestrator), equal to srtctl's");
}

/// Issue 31, item 2 (its first piece): each TRT-LLM endpoint's engine file,
/// `trtllm_config_<mode>.yaml`, as mcsup writes it equals what srtctl wrote for the 25 captured
/// recipes, byte for byte.
#[test]
fn trtllm_engine_files_are_srtctls() {
    let trt = dir().join("trtllm");
    let mut files = 0;
    for e in std::fs::read_dir(&trt).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let recipe: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let capture = std::fs::read_to_string(p.with_extension("srtctl.txt")).unwrap();
        // FILE: /LOGS/<name> followed by its lines, each `| `-prefixed.
        let mut blocks: Vec<(String, String)> = Vec::new();
        for line in capture.lines() {
            if let Some(name) = line.strip_prefix("FILE: /LOGS/") {
                blocks.push((name.to_string(), String::new()));
            } else if let (Some(text), Some((_, body))) = (
                line.strip_prefix("| ").or((line == "|").then_some("")),
                blocks.last_mut(),
            ) {
                body.push_str(text);
                body.push('\n');
            }
        }
        for (name, want) in blocks {
            let Some(mode) = name
                .strip_prefix("trtllm_config_")
                .and_then(|m| m.strip_suffix(".yaml"))
            else {
                continue;
            };
            let key = if mode == "agg" { "aggregated" } else { mode };
            let config = recipe["backend"]["trtllm_config"][key]
                .as_mapping()
                .cloned()
                .unwrap_or_default();
            let got = mcsup::engine::trtllm::engine_config_yaml(&config)
                .unwrap_or_else(|e| panic!("{} {name}: {e}", p.display()));
            assert_eq!(got, want, "{} {name}", p.display());
            files += 1;
        }
    }
    assert!(files >= 40, "{files} engine files compared");
    eprintln!("{files} engine files equal srtctl's");
}

/// TRT-LLM's `sequential_node_start: N` (no upstream recipe sets it): the endpoints one node leads
/// start N at a time, each batch once every endpoint of the batch before is ready, as srtctl's
/// `start_all_workers` waits for them; without it they all start at once.
#[test]
fn trtllm_sequential_node_start_batches_the_endpoints_of_a_node() {
    let dir = tempfile::tempdir().unwrap();
    let write = |extra: &str| {
        let path = dir.path().join("r.yaml");
        std::fs::write(
            &path,
            format!(
                "model: {{path: /m/x}}\nresources: {{gpus_per_node: 8, agg_nodes: 1, agg_workers: 3, gpus_per_agg: 2}}\nbackend:\n  type: trtllm\n{extra}"
            ),
        )
        .unwrap();
        let r = recipe::load_file(&path).unwrap();
        plan::plan(&r, &[Role::Aggregated], &job_node("node0", 1)).unwrap()
    };
    let deps = |p: &plan::Plan| -> Vec<(String, Vec<String>)> {
        p.processes
            .iter()
            .filter(|x| x.slurm_step.is_some())
            .map(|x| {
                // etcd and NATS come first for every worker.
                let on: Vec<String> = x
                    .depends_on
                    .iter()
                    .inspect(|d| assert_eq!(d.condition, plan::DependencyCondition::Healthy))
                    .map(|d| d.target.clone())
                    .filter(|t| t != "etcd" && t != "nats")
                    .collect();
                (x.name.clone(), on)
            })
            .collect()
    };
    let none: Vec<String> = Vec::new();
    let batched = write("  sequential_node_start: 2\n");
    assert_eq!(
        deps(&batched),
        vec![
            ("trtllm-agg-0".to_string(), none.clone()),
            ("trtllm-agg-1".to_string(), none.clone()),
            (
                "trtllm-agg-2".to_string(),
                vec!["trtllm-agg-0".to_string(), "trtllm-agg-1".to_string()]
            ),
        ]
    );
    let one = write("  sequential_node_start: 1\n");
    assert_eq!(deps(&one)[2].1, vec!["trtllm-agg-1".to_string()]);
    assert_eq!(deps(&one)[1].1, vec!["trtllm-agg-0".to_string()]);
    let parallel = write("");
    assert!(deps(&parallel).iter().all(|(_, on)| on.is_empty()));
}

/// srt-slurm 2.0's `roles.<role>.restart` (issue 32, item 1): a worker on one node takes the
/// mapped policy (srtctl's limit over the whole job); a worker over two nodes, one SGLang process
/// per node, does not restart a rank alone (it could not rejoin its group): `never`, said in the
/// plan, until mcsup restarts it as one unit across nodes.
#[test]
fn roles_restart_applies_to_one_node_workers_and_to_every_rank_of_a_multi_node_worker_as_one_unit()
{
    let dir = tempfile::tempdir().unwrap();
    let plan_of = |nodes: u32, gpus: u32, node: &str, n: usize| {
        let path = dir.path().join("r.yaml");
        std::fs::write(
            &path,
            format!(
                "schema: 2\nname: t\nmodel: {{path: /m/x, container: c}}\nengine: sglang\nresources: {{gpus_per_node: 4}}\nroles:\n  agg: {{nodes: {nodes}, workers: 1, gpus: {gpus}, restart: {{policy: on-failure, max_restarts: 4}}, args: {{tp-size: {gpus}}}}}\n"
            ),
        )
        .unwrap();
        let r = recipe::load_file(&path).unwrap();
        plan::plan(&r, &[Role::Aggregated], &job_node(node, n)).unwrap()
    };
    let one = plan_of(1, 4, "node0", 1);
    let w = one
        .processes
        .iter()
        .find(|p| p.kind == ProcessKind::Worker)
        .unwrap();
    assert_eq!(w.restart.policy, plan::RestartPolicy::OnFailure);
    assert_eq!(w.restart.max_restarts, 4);
    assert_eq!(w.restart.window, plan::role_restart::WHOLE_JOB);
    assert!(!one.ignored_sections.iter().any(|s| s.contains("restart")));
    for node in ["node0", "node1"] {
        let two = plan_of(2, 8, node, 2);
        let w = two
            .processes
            .iter()
            .find(|p| p.kind == ProcessKind::Worker)
            .unwrap();
        // Kept, as one unit with the other rank: the coordinator decides for both.
        assert_eq!(w.restart.policy, plan::RestartPolicy::OnFailure, "{node}");
        assert_eq!(w.restart.max_restarts, 4);
        let unit = w.restart.unit.as_ref().expect("a restart unit");
        assert_eq!(
            (unit.worker.as_str(), unit.nodes.as_slice()),
            ("agg[0]", &["node0".to_string(), "node1".to_string()][..])
        );
        let c = two.control.as_ref().expect("a control connection");
        assert_eq!(
            (c.coordinator.as_str(), c.port),
            ("node0", 0),
            "a free port"
        );
        assert!(c.secret.ends_with("control.secret"));
        let text = mcsup::render::plan_human(&two, false);
        assert!(
            text.contains("as one unit with the other ranks of agg[0] (node0, node1)"),
            "{text}"
        );
    }
    // One node: no control connection, no unit.
    assert!(one.control.is_none());
    assert!(w_unit_none(&one));
}

fn w_unit_none(p: &plan::Plan) -> bool {
    p.processes.iter().all(|p| p.restart.unit.is_none())
}
