//! Hostile and careless inputs through the real binary (issue 12, items 6 to 8): every input is
//! bounded (worker count, node list, recipe and plan file size and kind, YAML nesting), preflight
//! helpers cannot stall mcsup or outlive it, and nonsense that used to be accepted (signals that
//! cannot stop or drain, a flag given twice, overflowing sizes, an unchecked plan file) is an
//! error that names the file, the key and the fix.
//!
//! Every mcsup here runs under a time limit the test enforces itself (the child is SIGKILLed and
//! the test fails) and with its address space capped, so an unbounded read or expansion ends in an
//! allocation failure instead of taking the machine down.

use crate::common;

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ms, TestEnv, MCSUP, TESTCHILD};

/// Address-space cap for every mcsup started here.
const ADDRESS_SPACE: u64 = 2 << 30;

/// How a bounded run of the real binary ended.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Ran {
    fn describe(&self) -> String {
        format!(
            "exit {:?} after {:?}\nstdout:\n{}\nstderr:\n{}",
            self.code,
            self.elapsed,
            tail(&self.stdout),
            tail(&self.stderr)
        )
    }
}

fn tail(s: &str) -> &str {
    let cut = s.len().saturating_sub(4000);
    let cut = (cut..s.len()).find(|i| s.is_char_boundary(*i)).unwrap_or(0);
    &s[cut..]
}

/// A `mcsup` command for this test: tagged, outside Slurm, in the test's directory.
fn mcsup(env: &TestEnv, args: &[&str]) -> Command {
    let mut c = Command::new(MCSUP);
    c.args(args)
        .env("MCSUP_TEST_TAG", &env.tag)
        .env_remove("SLURM_JOB_ID")
        .env_remove("SLURM_JOB_NODELIST")
        .env_remove("SLURMD_NODENAME")
        .env_remove("SLURM_MEM_PER_NODE")
        .env_remove("SLURM_MEM_PER_CPU")
        .env_remove("SLURM_CPUS_ON_NODE")
        .env_remove("MCSUP_RECIPE")
        .env_remove("MCSUP_ROLE")
        .current_dir(env.dir.path())
        .stdin(Stdio::null());
    c
}

/// Start `cmd` with its output in files and its address space capped.
fn spawn(env: &TestEnv, mut cmd: Command, name: &str) -> std::process::Child {
    let out = std::fs::File::create(env.path(&format!("{name}.stdout"))).unwrap();
    let err = std::fs::File::create(env.path(&format!("{name}.stderr"))).unwrap();
    cmd.stdout(out).stderr(err);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::resource::setrlimit(
                nix::sys::resource::Resource::RLIMIT_AS,
                ADDRESS_SPACE,
                ADDRESS_SPACE,
            )
            .map_err(std::io::Error::from)
        });
    }
    cmd.spawn().expect("spawn mcsup")
}

/// Run `cmd` to completion; SIGKILL it and fail the test if it takes longer than `limit`.
fn run_within(env: &TestEnv, limit: Duration, cmd: Command) -> Ran {
    let name = format!(
        "run{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let what = format!("{cmd:?}");
    let start = Instant::now();
    let mut child = spawn(env, cmd, &name);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let stderr =
                std::fs::read_to_string(env.path(&format!("{name}.stderr"))).unwrap_or_default();
            panic!(
                "{what} did not finish within {limit:?} (killed)\nstderr:\n{}",
                tail(&stderr)
            );
        }
        std::thread::sleep(ms(10));
    };
    let read = |ext: &str| {
        String::from_utf8_lossy(
            &std::fs::read(env.path(&format!("{name}.{ext}"))).unwrap_or_default(),
        )
        .into_owned()
    };
    Ran {
        code: status.code(),
        stdout: read("stdout"),
        stderr: read("stderr"),
        elapsed: start.elapsed(),
    }
}

/// Assert a usage error (exit 2) whose message contains every one of `needles`.
fn assert_refused(r: &Ran, needles: &[&str]) {
    assert_eq!(r.code, Some(2), "expected exit 2\n{}", r.describe());
    for n in needles {
        assert!(
            r.stderr.contains(n),
            "the error should mention {n:?}\n{}",
            r.describe()
        );
    }
    assert!(
        r.stderr.contains("fix:"),
        "the error should say how to fix it\n{}",
        r.describe()
    );
}

fn write(env: &TestEnv, name: &str, text: &str) -> PathBuf {
    let p = env.path(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// A one-worker recipe (the worker never runs in the planning tests).
fn worker_recipe(env: &TestEnv, worker_extra: &str, mcsup_extra: &str) -> String {
    format!(
        "mcsup:\n  log_dir: {logs}\n{mcsup_extra}  workers:\n    aggregated:\n      - name: w\n        command: [{TESTCHILD}, --exit-after, \"0\"]\n        critical: false\n        env: {{MCSUP_TEST_TAG: \"{tag}\"}}\n{worker_extra}",
        logs = env.log_dir().display(),
        tag = env.tag,
    )
}

fn plan_args(recipe: &str) -> Vec<&str> {
    vec!["plan", "--role", "agg", "--node", "n1", "--recipe", recipe]
}

/// `mcsup plan` of `recipe` (a path) as the agg role on n1, bounded by `limit`.
fn plan_within(env: &TestEnv, recipe: &Path, limit: Duration) -> Ran {
    run_within(env, limit, mcsup(env, &plan_args(recipe.to_str().unwrap())))
}

// ---------------------------------------------------------------------------------------------
// A. Unbounded inputs
// ---------------------------------------------------------------------------------------------

#[test]
fn worker_count_above_the_bound_is_refused_quickly() {
    let env = TestEnv::new();
    for count in ["1000000", "4294967295", "1025"] {
        let r = write(
            &env,
            "job.yaml",
            &worker_recipe(&env, &format!("        count: {count}\n"), ""),
        );
        let ran = plan_within(&env, &r, ms(10_000));
        assert_refused(&ran, &["count", "1024"]);
        assert!(
            ran.stderr.contains("job.yaml"),
            "names the file\n{}",
            ran.describe()
        );
    }
    // The bound itself is allowed, and plans quickly.
    let r = write(
        &env,
        "job.yaml",
        &worker_recipe(&env, "        count: 1024\n", ""),
    );
    let ran = plan_within(&env, &r, ms(10_000));
    assert_eq!(ran.code, Some(0), "{}", ran.describe());
    // Many entries cannot add up past the bound either.
    let mut text = worker_recipe(&env, "        count: 1000\n", "");
    text.push_str(&format!(
        "      - name: v\n        count: 1000\n        command: [{TESTCHILD}]\n"
    ));
    let r = write(&env, "job.yaml", &text);
    let ran = plan_within(&env, &r, ms(10_000));
    assert_refused(&ran, &["1024"]);
}

#[test]
fn a_recipe_that_is_a_device_is_refused() {
    let env = TestEnv::new();
    let ran = run_within(&env, ms(10_000), mcsup(&env, &plan_args("/dev/zero")));
    assert_refused(&ran, &["/dev/zero", "not a regular file"]);
}

#[test]
fn a_plan_file_that_is_a_device_is_refused() {
    let env = TestEnv::new();
    let ran = run_within(
        &env,
        ms(10_000),
        mcsup(&env, &["run", "--plan-file", "/dev/zero"]),
    );
    assert_refused(&ran, &["/dev/zero", "not a regular file"]);
}

#[test]
fn a_fifo_recipe_that_never_ends_is_cut_off_at_the_size_limit() {
    let env = TestEnv::new();
    let fifo = env.path("recipe.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let head = worker_recipe(&env, "", "");
    let path = fifo.clone();
    // A writer that never stops: a valid recipe followed by endless comment lines. It ends when
    // mcsup closes the FIFO (EPIPE) or after 20 s.
    let writer = std::thread::spawn(move || {
        let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(&path) else {
            return 0u64;
        };
        let start = Instant::now();
        let mut sent = 0u64;
        if f.write_all(head.as_bytes()).is_err() {
            return sent;
        }
        let line = format!("# {}\n", "x".repeat(1000));
        while start.elapsed() < Duration::from_secs(20) {
            if f.write_all(line.as_bytes()).is_err() {
                break;
            }
            sent += line.len() as u64;
        }
        sent
    });
    let ran = plan_within(&env, &fifo, ms(15_000));
    let sent = writer.join().unwrap();
    assert_refused(&ran, &["recipe.fifo", "4 MiB"]);
    assert!(
        sent < 64 << 20,
        "mcsup stopped reading at the limit (writer sent {sent} bytes)"
    );
}

#[test]
fn deeply_nested_yaml_in_an_ignored_section_is_refused_quickly() {
    let env = TestEnv::new();
    // ~160 KB: 80 000 nested flow lists in a section mcsup ignores. libyaml's scanner costs
    // O(tokens x flow depth): unbounded, this took minutes.
    let depth = 80_000;
    let text = format!(
        "{}slurm_extra: {}{}\n",
        worker_recipe(&env, "", ""),
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let r = write(&env, "deep.yaml", &text);
    let ran = plan_within(&env, &r, ms(10_000));
    assert_refused(&ran, &["deep.yaml", "nest", "64"]);
    assert!(
        ran.stderr.contains("slurm_extra"),
        "names the section\n{}",
        ran.describe()
    );
    // Block nesting counts too.
    let mut block = String::from("slurm_extra:\n");
    for i in 0..100 {
        block.push_str(&format!("{}k{i}:\n", "  ".repeat(i + 1)));
    }
    block.push_str(&format!("{}v: 1\n", "  ".repeat(101)));
    let r = write(
        &env,
        "deep.yaml",
        &format!("{}{block}", worker_recipe(&env, "", "")),
    );
    let ran = plan_within(&env, &r, ms(10_000));
    assert_refused(&ran, &["deep.yaml", "nest", "64"]);
    // Ordinary nesting in an ignored section is fine.
    let r = write(
        &env,
        "ok.yaml",
        &format!(
            "{}slurm_extra: {{a: [1, [2, {{b: [3]}}]]}}\n",
            worker_recipe(&env, "", "")
        ),
    );
    let ran = plan_within(&env, &r, ms(10_000));
    assert_eq!(ran.code, Some(0), "{}", ran.describe());
}

#[test]
fn a_huge_environment_block_is_refused_quickly() {
    let env = TestEnv::new();
    // ~4 MiB: 178 000 variables. The plan merges env blocks variable by variable (a linear search
    // each): unbounded, this took minutes.
    let mut text = format!(
        "mcsup:\n  workers:\n    aggregated:\n      - name: w\n        command: [{TESTCHILD}]\n        env:\n"
    );
    for i in 0..178_000 {
        text.push_str(&format!("          A{i}: \"1\"\n"));
    }
    let r = write(&env, "env.yaml", &text);
    let ran = plan_within(&env, &r, ms(15_000));
    assert_refused(&ran, &["env.yaml:", "env.A1024", "1024 variables"]);
}

#[test]
fn a_huge_nodelist_is_refused_before_it_is_expanded() {
    let env = TestEnv::new();
    let r = write(&env, "job.yaml", &worker_recipe(&env, "", ""));
    for list in [
        "n[1-10000000]",
        "n[1-1000][1-1000]",
        "n[0-18446744073709551615]",
    ] {
        let mut args = plan_args(r.to_str().unwrap());
        args.extend(["--nodelist", list]);
        let ran = run_within(&env, ms(5_000), mcsup(&env, &args));
        assert_refused(&ran, &[list, "4096"]);
    }
}

// ---------------------------------------------------------------------------------------------
// B. Preflight helpers
// ---------------------------------------------------------------------------------------------

/// A recipe with a master (so the preflight asks `mooncake_master --help`) and one worker, on free
/// ports; the fake master is the only `mooncake_master` on PATH.
fn master_recipe(env: &TestEnv) -> PathBuf {
    let port = |_| common::free_port();
    let (rpc, meta, metrics) = (port(0), port(1), port(2));
    write(
        env,
        "job.yaml",
        &format!(
            "backend:\n  type: sglang\n  mooncake_kv_store:\n    env:\n      MOONCAKE_PROTOCOL: tcp\nmcsup:\n  log_dir: {logs}\n  master:\n    rpc_port: {rpc}\n    metadata_port: {meta}\n    metrics_port: {metrics}\n  workers:\n    aggregated:\n      - name: w\n        command: [/bin/true]\n",
            logs = env.log_dir().display()
        ),
    )
}

/// A `bin/mooncake_master` shell script with this body.
fn fake_master(env: &TestEnv, body: &str) -> PathBuf {
    let dir = env.path("bin");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("mooncake_master");
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn preflight_cmd(env: &TestEnv, bin: &Path, recipe: &Path) -> Command {
    let mut c = mcsup(
        env,
        &[
            "preflight",
            "--json",
            "--role",
            "agg",
            "--node",
            "n1",
            "--recipe",
            recipe.to_str().unwrap(),
        ],
    );
    c.env("PATH", format!("{}:/usr/bin:/bin", bin.display()));
    c
}

fn master_flags_check(ran: &Ran) -> serde_json::Value {
    let report: serde_json::Value = serde_json::from_str(&ran.stdout)
        .unwrap_or_else(|e| panic!("not a JSON report: {e}\n{}", ran.describe()));
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "master flags")
        .cloned()
        .unwrap_or_else(|| panic!("no `master flags` check\n{}", ran.describe()))
}

#[test]
fn a_preflight_tool_printing_a_mebibyte_still_answers() {
    let env = TestEnv::new();
    let recipe = master_recipe(&env);
    // 1 MiB on stdout between two real gflags lines, and some noise on stderr: the help text
    // of a big binary, far past a pipe's 64 KiB.
    let bin = fake_master(
        &env,
        "echo '    -rpc_port (port) type: int32 default: 50051'\nhead -c 1048576 /dev/zero | tr '\\0' 'x'\necho\nhead -c 200000 /dev/zero | tr '\\0' 'y' >&2\nfor f in enable_http_metadata_server http_metadata_server_port enable_metric_reporting metrics_port eviction_high_watermark_ratio default_kv_lease_ttl rpc_thread_num; do echo \"    -$f (x) type: int32 default: 1\"; done",
    );
    let ran = run_within(&env, ms(9_000), preflight_cmd(&env, &bin, &recipe));
    let check = master_flags_check(&ran);
    assert!(
        !check["message"]
            .as_str()
            .unwrap_or_default()
            .contains("did not answer"),
        "{check}"
    );
    assert!(
        ran.elapsed < ms(8_000),
        "answered without waiting for the timeout: {:?}",
        ran.elapsed
    );
    env.assert_no_leftovers();
}

#[test]
fn a_preflight_tool_that_times_out_leaves_no_process() {
    let env = TestEnv::new();
    let recipe = master_recipe(&env);
    // A master whose `--help` never returns and leaves a grandchild behind (both tagged: they
    // inherit mcsup's environment).
    let bin = fake_master(&env, "sleep 300 &\nsleep 300");
    let mut cmd = preflight_cmd(&env, &bin, &recipe);
    cmd.args(["--tool-timeout", "0.5"]);
    let ran = run_within(&env, ms(25_000), cmd);
    let check = master_flags_check(&ran);
    assert!(
        check["message"]
            .as_str()
            .unwrap_or_default()
            .contains("did not answer in 0.5 s"),
        "{check}"
    );
    // Nothing of the helper's group is left, grandchild included.
    env.assert_no_leftovers();
}

#[test]
fn sigterm_during_the_preflight_leaves_no_helper() {
    let env = TestEnv::new();
    let recipe = master_recipe(&env);
    let marker = env.path("helper.started");
    let bin = fake_master(
        &env,
        &format!("touch {}\nsleep 300 &\nsleep 300", marker.display()),
    );
    let mut child = spawn(&env, preflight_cmd(&env, &bin, &recipe), "sigterm");
    let start = Instant::now();
    while !marker.exists() {
        if start.elapsed() > ms(10_000) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the helper never started");
        }
        std::thread::sleep(ms(10));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > ms(5_000) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mcsup did not end within 5 s of SIGTERM during the preflight");
        }
        std::thread::sleep(ms(10));
    }
    env.assert_no_leftovers();
}

/// The same in `mcsup run`, where mcsup's own writer threads exist: SIGTERM or SIGHUP while a
/// helper hangs used to kill mcsup (rc 143/129: the signal landed in a thread that did not hold
/// it) and leave the helper's group running. Now the signal waits, the helper's group goes, and
/// `run` ends cleanly without starting anything.
#[test]
fn a_stop_signal_during_runs_preflight_stops_it_before_anything_starts() {
    for sig in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGHUP,
    ] {
        let env = TestEnv::new();
        let recipe = master_recipe(&env);
        let marker = env.path("helper.started");
        let bin = fake_master(
            &env,
            &format!("touch {}\nsleep 300 &\nsleep 300", marker.display()),
        );
        let mut cmd = mcsup(
            &env,
            &[
                "run",
                "--role",
                "agg",
                "--node",
                "n1",
                "--recipe",
                recipe.to_str().unwrap(),
            ],
        );
        cmd.env("PATH", format!("{}:/usr/bin:/bin", bin.display()));
        let mut child = spawn(&env, cmd, "run");
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        common::wait_for("the helper to start", ms(10_000), || {
            marker.exists().then_some(())
        });
        nix::sys::signal::kill(pid, sig).unwrap();
        let ran = common::wait_for("mcsup to end", ms(10_000), || child.try_wait().unwrap());
        let stderr = std::fs::read_to_string(env.path("run.stderr")).unwrap_or_default();
        assert_eq!(ran.code(), Some(0), "{sig}: {ran:?} {stderr}");
        assert!(
            stderr.contains(&format!(
                "{sig} during the preflight on n1: stopped before anything started"
            )),
            "{sig}: {stderr}"
        );
        // Nothing of the plan started: no events file.
        assert!(!env.log_dir().join("n1.events.jsonl").exists());
        env.assert_no_leftovers();
    }
}

// ---------------------------------------------------------------------------------------------
// C. Nonsense that used to be accepted
// ---------------------------------------------------------------------------------------------

#[test]
fn drain_and_stop_signals_that_cannot_do_their_job_are_refused() {
    let env = TestEnv::new();
    for sig in [
        "SIGCHLD", "SIGWINCH", "SIGCONT", "SIGTSTP", "SIGURG", "SIGPIPE",
    ] {
        let r = write(
            &env,
            "job.yaml",
            &worker_recipe(&env, "", &format!("  shutdown:\n    drain_signal: {sig}\n")),
        );
        let ran = plan_within(&env, &r, ms(10_000));
        assert_refused(&ran, &[sig, "mcsup.shutdown.drain_signal", "job.yaml:"]);
        let r = write(
            &env,
            "job.yaml",
            &worker_recipe(&env, &format!("        stop: {{signal: {sig}}}\n"), ""),
        );
        let ran = plan_within(&env, &r, ms(10_000));
        assert_refused(&ran, &[sig, "stop.signal"]);
    }
    for (drain, stop) in [
        ("SIGUSR1", "SIGTERM"),
        ("SIGUSR2", "SIGINT"),
        ("SIGHUP", "SIGQUIT"),
    ] {
        let r = write(
            &env,
            "job.yaml",
            &worker_recipe(
                &env,
                &format!("        stop: {{signal: {stop}}}\n"),
                &format!("  shutdown:\n    drain_signal: {drain}\n"),
            ),
        );
        let ran = plan_within(&env, &r, ms(10_000));
        assert_eq!(ran.code, Some(0), "{drain}/{stop}: {}", ran.describe());
    }
}

#[test]
fn a_flag_given_twice_under_two_spellings_is_refused_with_both_lines() {
    let env = TestEnv::new();
    let text = "backend:\n  type: sglang\n  sglang_config:\n    aggregated:\n      model-path: /m\n      tp-size: 8\n      mem-fraction-static: 0.8\n      tp_size: 4\n";
    let r = write(&env, "job.yaml", text);
    let ran = plan_within(&env, &r, ms(10_000));
    assert_refused(
        &ran,
        &[
            "job.yaml:8:",
            "backend.sglang_config.aggregated.tp_size",
            "`tp-size`",
            "line 6",
            "--tp-size",
        ],
    );
    // The very same spelling twice.
    let text = "backend:\n  type: sglang\n  sglang_config:\n    aggregated:\n      model-path: /m\n      tp-size: 8\n      tp-size: 16\n";
    let r = write(&env, "job.yaml", text);
    let ran = plan_within(&env, &r, ms(10_000));
    assert_refused(&ran, &["job.yaml:7:", "tp-size", "line 6"]);
    // 2.0 spelling: roles.<role>.args.
    let text = "schema: 2\nengine:\n  type: sglang\nroles:\n  agg:\n    args:\n      model-path: /m\n      tp-size: 8\n      tp_size: 4\n";
    let r = write(&env, "job2.yaml", text);
    let ran = plan_within(&env, &r, ms(10_000));
    assert_refused(&ran, &["tp_size", "tp-size"]);
}

/// A SGLang recipe whose aggregated role has a HiCache L2 sized per rank.
fn hicache_recipe(env: &TestEnv, tp: &str) -> PathBuf {
    write(
        env,
        "hc.yaml",
        &format!(
            "backend:\n  type: sglang\n  sglang_config:\n    aggregated:\n      model-path: /m\n      enable-hierarchical-cache: true\n      hicache-size: 100\n      tp-size: {tp}\n      dp-size: 2\n"
        ),
    )
}

fn sysroot_preflight(env: &TestEnv, recipe: &Path) -> Command {
    let sysroot = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysroot/no-rdma");
    mcsup(
        env,
        &[
            "preflight",
            "--json",
            "--role",
            "agg",
            "--node",
            "n1",
            "--recipe",
            recipe.to_str().unwrap(),
            "--sysroot",
            sysroot.to_str().unwrap(),
        ],
    )
}

fn failed_checks(ran: &Ran) -> Vec<serde_json::Value> {
    let report: serde_json::Value = serde_json::from_str(&ran.stdout)
        .unwrap_or_else(|e| panic!("not a JSON report: {e}\n{}", ran.describe()));
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .cloned()
        .collect()
}

/// `run`'s own preflight counts Slurm's allocation in the memory budget (not only `mcsup
/// preflight`), and a run the budget refuses starts nothing.
#[test]
fn run_checks_the_budget_against_slurms_allocation() {
    let env = TestEnv::new();
    let recipe = write(
        &env,
        "small.yaml",
        "backend:\n  type: sglang\n  sglang_config:\n    aggregated:\n      model-path: /m\n      enable-hierarchical-cache: true\n      hicache-size: 1\n      tp-size: 1\n      dp-size: 1\n",
    );
    let run = |mem_mib: &str| {
        let mut cmd = mcsup(
            &env,
            &[
                "run",
                "--role",
                "agg",
                "--node",
                "n1",
                "--no-console",
                "--recipe",
                recipe.to_str().unwrap(),
            ],
        );
        cmd.env("SLURM_MEM_PER_NODE", mem_mib);
        run_within(&env, ms(20_000), cmd)
    };
    // 1 GiB: less than the store's default segment alone.
    let ran = run("1024");
    assert_eq!(ran.code, Some(1), "{}", ran.describe());
    assert!(
        ran.stderr
            .lines()
            .any(|l| l.contains("preflight memory budget") && l.contains("only 1 GiB is available")),
        "the budget names Slurm's 1 GiB\n{}",
        ran.describe()
    );
    assert!(
        ran.stderr.contains("nothing was started"),
        "{}",
        ran.describe()
    );
    // 1 TiB: the node's own memory is the limit, and it is enough (the run may still be refused
    // for other reasons here, e.g. no SGLang installed).
    let ran = run("1048576");
    assert!(
        !ran.stderr.contains("preflight memory budget"),
        "no budget failure with a large allocation\n{}",
        ran.describe()
    );
    env.assert_no_leftovers();
}

#[test]
fn huge_slurm_mem_per_node_is_reported_not_wrapped() {
    let env = TestEnv::new();
    let recipe = hicache_recipe(&env, "2");
    let mut cmd = sysroot_preflight(&env, &recipe);
    // 2^44 MiB = 2^64 bytes: `mb << 20` wrapped to "0 B".
    cmd.env("SLURM_MEM_PER_NODE", "17592186044416");
    let ran = run_within(&env, ms(10_000), cmd);
    assert_eq!(ran.code, Some(1), "{}", ran.describe());
    let fails = failed_checks(&ran);
    assert!(
        fails.iter().any(|c| {
            let m = c["message"].as_str().unwrap_or_default();
            m.contains("SLURM_MEM_PER_NODE=17592186044416") && c["fix"].is_string()
        }),
        "a failed check names the variable: {fails:#?}"
    );
    assert!(
        !ran.stdout.contains("\"0 B\""),
        "no wrapped size: {}",
        ran.stdout
    );
    // Per-CPU form too.
    let mut cmd = sysroot_preflight(&env, &recipe);
    cmd.env("SLURM_MEM_PER_CPU", "9223372036854775807")
        .env("SLURM_CPUS_ON_NODE", "4");
    let ran = run_within(&env, ms(10_000), cmd);
    let fails = failed_checks(&ran);
    assert!(
        fails.iter().any(|c| c["message"]
            .as_str()
            .unwrap_or_default()
            .contains("SLURM_MEM_PER_CPU")),
        "{}",
        ran.describe()
    );
}

#[test]
fn huge_tp_size_is_reported_not_wrapped() {
    let env = TestEnv::new();
    // 2^63 x dp-size 2 wraps to 0 ranks (then "1 ranks"); in a debug build it panicked.
    let recipe = hicache_recipe(&env, "9223372036854775808");
    let ran = plan_within(&env, &recipe, ms(10_000));
    assert_eq!(ran.code, Some(0), "{}", ran.describe());
    assert!(
        !ran.stdout.contains("x 1 ranks"),
        "no wrapped rank count\n{}",
        ran.describe()
    );
    let ran = run_within(&env, ms(10_000), sysroot_preflight(&env, &recipe));
    assert_eq!(ran.code, Some(1), "{}", ran.describe());
    let fails = failed_checks(&ran);
    assert!(
        fails.iter().any(|c| {
            let m = c["message"].as_str().unwrap_or_default();
            m.contains("tp-size 9223372036854775808") && m.contains("overflow")
        }),
        "a failed check names the overflowing flags: {fails:#?}"
    );
}

// ---------------------------------------------------------------------------------------------
// C. Plan files get the recipe's validation
// ---------------------------------------------------------------------------------------------

/// A runnable plan (`mcsup plan --json --show-secrets`) whose one worker exits at once.
fn plan_json(env: &TestEnv) -> serde_json::Value {
    let r = write(env, "job.yaml", &worker_recipe(env, "", ""));
    let mut args = plan_args(r.to_str().unwrap());
    args.extend(["--json", "--show-secrets"]);
    let ran = run_within(env, ms(10_000), mcsup(env, &args));
    assert_eq!(ran.code, Some(0), "{}", ran.describe());
    serde_json::from_str(&ran.stdout).unwrap()
}

fn write_plan(env: &TestEnv, plan: &serde_json::Value, mode: u32) -> PathBuf {
    let p = env.path("plan.json");
    std::fs::write(&p, serde_json::to_string_pretty(plan).unwrap()).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

fn run_plan(env: &TestEnv, plan: &Path) -> Ran {
    run_within(
        env,
        ms(20_000),
        mcsup(
            env,
            &[
                "run",
                "--skip-preflight",
                "--no-console",
                "--plan-file",
                plan.to_str().unwrap(),
            ],
        ),
    )
}

#[test]
fn a_valid_plan_file_still_runs() {
    let env = TestEnv::new();
    let plan = plan_json(&env);
    let ran = run_plan(&env, &write_plan(&env, &plan, 0o600));
    assert_eq!(ran.code, Some(0), "{}", ran.describe());
    env.assert_no_leftovers();
}

#[test]
fn plan_file_env_names_are_validated() {
    let env = TestEnv::new();
    let mut plan = plan_json(&env);
    plan["processes"][0]["env"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "A=B", "value": "x", "source": "test"}));
    let ran = run_plan(&env, &write_plan(&env, &plan, 0o600));
    assert_refused(&ran, &["plan.json", "`A=B`", "processes[0]"]);
    env.assert_no_leftovers();
}

#[test]
fn plan_file_files_outside_log_dir_are_refused() {
    let env = TestEnv::new();
    std::fs::create_dir_all(env.path("elsewhere")).unwrap();
    for target in [
        env.path("elsewhere/evil.txt"),
        env.log_dir().join("../elsewhere/evil.txt"),
    ] {
        let mut plan = plan_json(&env);
        plan["files"] = serde_json::json!([
            {"path": target, "contents": "owned\n", "purpose": "test"}
        ]);
        let ran = run_plan(&env, &write_plan(&env, &plan, 0o600));
        assert_refused(&ran, &["plan.json", "files[0]", "log_dir"]);
        assert!(
            !env.path("elsewhere/evil.txt").exists(),
            "nothing was written outside log_dir"
        );
    }
    // Inside log_dir is fine.
    let mut plan = plan_json(&env);
    let inside = env.log_dir().join("n1.extra.json");
    plan["files"] = serde_json::json!([{"path": inside, "contents": "{}\n", "purpose": "test"}]);
    let ran = run_plan(&env, &write_plan(&env, &plan, 0o600));
    assert_eq!(ran.code, Some(0), "{}", ran.describe());
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "{}\n");
    let mode = std::fs::metadata(&inside).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    env.assert_no_leftovers();
}

/// `dirs` (profiling output) are made only below log_dir: a plan file naming another place is
/// refused before anything is made; one inside is made before the processes start.
#[test]
fn plan_file_dirs_outside_log_dir_are_refused() {
    let env = TestEnv::new();
    for target in [env.path("elsewhere"), env.log_dir().join("../elsewhere")] {
        let mut plan = plan_json(&env);
        plan["dirs"] = serde_json::json!([target]);
        let ran = run_plan(&env, &write_plan(&env, &plan, 0o600));
        assert_refused(&ran, &["plan.json", "dirs[0]", "log_dir"]);
        assert!(
            !env.path("elsewhere").exists(),
            "nothing made outside log_dir"
        );
    }
    let mut plan = plan_json(&env);
    let inside = env.log_dir().join("profiles/prefill");
    plan["dirs"] = serde_json::json!([inside]);
    let ran = run_plan(&env, &write_plan(&env, &plan, 0o600));
    assert_eq!(ran.code, Some(0), "{}", ran.describe());
    assert!(inside.is_dir());
    env.assert_no_leftovers();
}

/// Round 4's N18: an empty `log_dir` is refused naming the key, not "error: : No such file".
#[test]
fn a_plan_file_with_an_empty_log_dir_is_refused() {
    let env = TestEnv::new();
    let mut plan = plan_json(&env);
    plan["log_dir"] = serde_json::json!("");
    plan["dirs"] = serde_json::json!([]);
    plan["files"] = serde_json::json!([]);
    let ran = run_plan(&env, &write_plan(&env, &plan, 0o600));
    assert_refused(&ran, &["plan.json", "log_dir", "is empty"]);
    env.assert_no_leftovers();
}

/// The adversarial re-run's D18: a working directory that does not exist fails the preflight,
/// naming the process and the directory (the start then failed with "sleep: No such file or
/// directory", blaming the program); nothing starts.
#[test]
fn a_missing_working_directory_fails_the_preflight() {
    let env = TestEnv::new();
    let mut plan = plan_json(&env);
    plan["processes"][0]["cwd"] = serde_json::json!("/nonexistent/mcsup-dir");
    let ran = run_plan(&env, &write_plan(&env, &plan, 0o600));
    assert_ne!(ran.code, Some(0), "{}", ran.describe());
    assert!(
        ran.stderr
            .contains("working directory /nonexistent/mcsup-dir cannot be entered")
            && ran.stderr.contains("fix: create it on this node"),
        "{}",
        ran.describe()
    );
    assert!(!ran.stderr.contains("spawned"), "{}", ran.describe());
    env.assert_no_leftovers();
}

/// Round 4's N18: a key no plan has (a typo in a hand-edited file) is refused with its path,
/// not dropped: `restrat` would otherwise run with the restart policy it meant to change.
#[test]
fn a_plan_file_with_a_key_mcsup_does_not_know_is_refused() {
    let env = TestEnv::new();
    let mut plan = plan_json(&env);
    plan["unknown_field"] = serde_json::json!(1);
    plan["processes"][0]["restrat"] = serde_json::json!({"policy": "always"});
    let ran = run_plan(&env, &write_plan(&env, &plan, 0o600));
    assert_refused(
        &ran,
        &[
            "plan.json",
            "unknown_field",
            "processes.0.restrat",
            "not a key of a plan",
            "fix:",
        ],
    );
    env.assert_no_leftovers();
}

#[test]
fn a_plan_file_writable_by_others_is_refused() {
    let env = TestEnv::new();
    let plan = plan_json(&env);
    for mode in [0o666, 0o620, 0o602] {
        let ran = run_plan(&env, &write_plan(&env, &plan, mode));
        assert_refused(&ran, &["plan.json", "writable", "chmod 600"]);
    }
    env.assert_no_leftovers();
}

#[test]
fn plan_file_signals_are_validated() {
    let env = TestEnv::new();
    let mut plan = plan_json(&env);
    plan["shutdown"]["drain_signal"] = "SIGCHLD".into();
    let ran = run_plan(&env, &write_plan(&env, &plan, 0o600));
    assert_refused(&ran, &["plan.json", "SIGCHLD", "shutdown.drain_signal"]);
    let mut plan = plan_json(&env);
    plan["processes"][0]["stop"]["signal"] = "SIGWINCH".into();
    let ran = run_plan(&env, &write_plan(&env, &plan, 0o600));
    assert_refused(&ran, &["plan.json", "SIGWINCH", "processes[0]"]);
    env.assert_no_leftovers();
}

#[test]
fn aggregate_and_migrate_inputs_are_bounded_too() {
    let env = TestEnv::new();
    let ran = run_within(
        &env,
        ms(10_000),
        mcsup(&env, &["preflight", "--aggregate", "/dev/zero"]),
    );
    assert_refused(&ran, &["/dev/zero", "not a regular file"]);
    let ran = run_within(&env, ms(10_000), mcsup(&env, &["migrate", "/dev/zero"]));
    assert_refused(&ran, &["/dev/zero", "not a regular file"]);
    // An endless pipe on stdin is cut off at the limit, not read until memory runs out.
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        &format!("head -c 80000000 /dev/zero | tr '\\0' x | {MCSUP} preflight --aggregate -"),
    ]);
    let ran = run_within(&env, ms(20_000), cmd);
    assert_refused(&ran, &["larger than 64 MiB"]);
}

#[test]
fn too_many_services_and_unusable_node_names_are_refused() {
    let env = TestEnv::new();
    let mut text = String::from("schema: 2\nengine: sglang\nroles: {decode: {}}\nservices:\n");
    for i in 0..300 {
        text.push_str(&format!("  - {{name: s{i}, command: [sleep, \"1\"]}}\n"));
    }
    let r = write(&env, "many.yaml", &text);
    let ran = plan_within(&env, &r, ms(10_000));
    assert_refused(&ran, &["300 services", "at most 256"]);

    let r = write(&env, "ok.yaml", &worker_recipe(&env, "", ""));
    for bad in ["../x", "/abs/x", "..", "a/b"] {
        let ran = run_within(
            &env,
            ms(10_000),
            mcsup(
                &env,
                &[
                    "plan",
                    "--role",
                    "agg",
                    "--recipe",
                    r.to_str().unwrap(),
                    "--node",
                    bad,
                ],
            ),
        );
        assert_refused(&ran, &["node name", bad]);
    }
}

// ---------------------------------------------------------------------------------------------
// Smaller gaps (issue 29, class 8)
// ---------------------------------------------------------------------------------------------

/// A recipe saved with a byte-order mark is read (it was refused as "more than one document");
/// YAML merge keys, which srtctl's loader applies, are applied (`<<: *worker`); a key given
/// twice in one mapping (`node_addresses: {n1: .., n1: ..}`) is refused with both lines, where
/// the last one used to win without a word.
#[test]
fn a_bom_merge_keys_and_a_key_given_twice() {
    let env = TestEnv::new();
    let base = worker_recipe(&env, "", "");
    let bom = write(&env, "bom.yaml", &format!("\u{feff}{base}"));
    let ran = plan_within(&env, &bom, ms(10_000));
    assert_eq!(ran.code, Some(0), "{}", ran.describe());

    let merged = format!(
        "x-worker: &w\n  command: [{TESTCHILD}, --exit-after, \"0\"]\n  critical: false\nmcsup:\n  log_dir: {}\n  workers:\n    aggregated:\n      - <<: *w\n        name: w\n",
        env.log_dir().display()
    );
    let m = write(&env, "merge.yaml", &merged);
    let ran = plan_within(&env, &m, ms(10_000));
    assert_eq!(ran.code, Some(0), "{}", ran.describe());
    assert!(
        ran.stdout.contains(TESTCHILD) && ran.stdout.contains("--exit-after"),
        "{}",
        ran.describe()
    );

    let twice = base.replace(
        "mcsup:\n",
        "mcsup:\n  node_addresses:\n    n1: 10.0.0.1\n    n1: 10.0.0.2\n",
    );
    let d = write(&env, "twice.yaml", &twice);
    let ran = plan_within(&env, &d, ms(10_000));
    assert_refused(
        &ran,
        &[
            "twice.yaml:4:5: mcsup.node_addresses.n1",
            "`n1` is given twice in this mapping (first on line 3)",
        ],
    );
}

/// A node list that counts down (`n[5-1]`) or names a node twice is refused as Slurm would
/// refuse it; both used to plan (n5 as the infra node, or the duplicate dropped).
#[test]
fn node_lists_that_count_down_or_repeat_a_node_are_refused() {
    let env = TestEnv::new();
    let r = write(&env, "job.yaml", &worker_recipe(&env, "", ""));
    for (list, says) in [
        ("n[5-1]", "the range `5-1` counts down"),
        ("n1,n[1-2]", "`n1` is in it more than once"),
    ] {
        let mut args = plan_args(r.to_str().unwrap());
        args.extend(["--nodelist", list]);
        let ran = run_within(&env, ms(10_000), mcsup(&env, &args));
        assert_refused(&ran, &[says]);
    }
}

/// A worker named `mcsup` would be mcsup itself in the events and the status: refused.
#[test]
fn a_process_named_mcsup_is_refused() {
    let env = TestEnv::new();
    let r = write(
        &env,
        "job.yaml",
        &worker_recipe(&env, "", "").replace("- name: w\n", "- name: mcsup\n"),
    );
    let ran = plan_within(&env, &r, ms(10_000));
    assert_refused(&ran, &["a worker or service is named `mcsup`"]);
}

/// Issue 29, class 8: a hand-written plan's durations are bounded (an `interval_ms` of 0 probed
/// ~50,000 times a second; years overflow the clock), and so are a recipe's (a liveness period
/// of a nanosecond was accepted).
#[test]
fn durations_that_would_spin_or_overflow_are_refused() {
    let env = TestEnv::new();
    let probe = serde_json::json!({"type": "file", "path": env.path("never").to_str().unwrap()});
    let readiness = serde_json::json!({
        "probes": [probe.clone()], "initial_delay_ms": 0, "interval_ms": 0,
        "max_interval_ms": 1000, "attempt_timeout_ms": 1000, "timeout_ms": 5000
    });
    let liveness = serde_json::json!({
        "probe": probe, "period_ms": 1, "attempt_timeout_ms": 1000, "failure_threshold": 3
    });
    for (set, key) in [
        (
            ("readiness", readiness),
            "processes[0].readiness.interval_ms",
        ),
        (("liveness", liveness), "processes[0].liveness.period_ms"),
        (
            ("stop_grace", serde_json::json!(u64::MAX / 2)),
            "processes[0].stop.grace_ms",
        ),
    ] {
        let mut plan = plan_json(&env);
        match set.0 {
            "stop_grace" => plan["processes"][0]["stop"]["grace_ms"] = set.1,
            field => plan["processes"][0][field] = set.1,
        }
        let ran = run_plan(&env, &write_plan(&env, &plan, 0o600));
        assert_refused(&ran, &["plan.json", key, "outside"]);
    }
    let r = write(
        &env,
        "job.yaml",
        &worker_recipe(
            &env,
            "        liveness: {tcp: {port: 9}, period_seconds: 1.0e-9}\n",
            "",
        ),
    );
    let ran = plan_within(&env, &r, ms(10_000));
    assert_refused(&ran, &["job.yaml", "period_seconds", "too short"]);
    let r = write(
        &env,
        "job.yaml",
        &worker_recipe(
            &env,
            "        liveness: {tcp: {port: 9}, period_seconds: 0.005}\n",
            "",
        ),
    );
    let ran = plan_within(&env, &r, ms(10_000));
    assert_refused(&ran, &["job.yaml", "period_seconds is under 0.01 s"]);
    env.assert_no_leftovers();
}

/// Issue 29, class 8: a spawn that fails on mcsup's own limit (here `ulimit -n 24` and twelve
/// workers, each needing a pipe) is said to be mcsup's limit, with the fix, not the program's
/// failure ("sleep: Too many open files" read as if the program had failed).
#[test]
fn a_spawn_that_hits_mcsups_file_limit_says_so() {
    let env = TestEnv::new();
    let r = write(
        &env,
        "job.yaml",
        &worker_recipe(&env, "        count: 12\n", "")
            .replace("--exit-after, \"0\"]", "--exit-after, \"2000\"]"),
    );
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "ulimit -n 24; exec \"$@\"", "sh", MCSUP])
        .args(["run", "--skip-preflight", "--no-console"])
        .args(&plan_args(r.to_str().unwrap())[1..]);
    cmd.env("MCSUP_TEST_TAG", &env.tag)
        .current_dir(env.dir.path())
        .stdin(Stdio::null());
    let ran = run_within(&env, ms(20_000), cmd);
    assert!(
        ran.stderr.contains("Too many open files")
            && ran
                .stderr
                .contains("a limit of mcsup's, not the program's failure")
            && ran.stderr.contains("ulimit -n"),
        "{}",
        ran.describe()
    );
    env.assert_no_leftovers();
}

/// Issue 30, item 4: a planned port somebody already listens on fails the preflight naming the
/// port, the listener's pid, command and user (here another user's Python, as a leftover of an
/// earlier job would be), not only "in use".
#[test]
fn a_squatter_on_a_planned_port_is_named() {
    let env = TestEnv::new();
    let port = common::free_port();
    let r = write(
        &env,
        "job.yaml",
        &worker_recipe(
            &env,
            &format!("        readiness: {{tcp: {{port: {port}}}}}\n"),
            "",
        ),
    );
    let root = nix::unistd::geteuid().is_root();
    let mut squatter = common::python_listener(&env, port, root.then_some(60001));
    let mut args = plan_args(r.to_str().unwrap());
    args[0] = "preflight";
    args.push("--json");
    let ran = run_within(&env, ms(20_000), mcsup(&env, &args));
    let _ = squatter.kill();
    let _ = squatter.wait();
    let report: serde_json::Value = serde_json::from_str(&ran.stdout)
        .unwrap_or_else(|e| panic!("not a JSON report: {e}\n{}", ran.describe()));
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == format!("w port {port}"))
        .unwrap_or_else(|| panic!("no check of port {port}: {report:#}"))
        .clone();
    let message = check["message"].as_str().unwrap_or_default();
    assert_eq!(check["status"], "fail", "{check}");
    assert!(
        message.contains(&format!("port {port} is already in use"))
            && message.contains(&format!("pid {}", squatter.id()))
            && message.contains("python3")
            && message.contains(if root { "uid 60001" } else { "user " }),
        "{message}"
    );
    env.assert_no_leftovers();
}

/// Issue 30, item 5, on the live node: `NCCL_SOCKET_IFNAME` must select an interface that
/// carries the address mcsup advertises for the node (`--node-ip`), or NCCL listens where the
/// peers do not connect. `lo` carries 127.0.0.1, not 10.9.9.9.
#[test]
fn a_socket_ifname_without_the_nodes_address_is_warned() {
    let env = TestEnv::new();
    let r = write(&env, "job.yaml", &worker_recipe(&env, "", ""));
    for (ip, status, words) in [
        ("127.0.0.1", "ok", "selects lo"),
        (
            "10.9.9.9",
            "warn",
            "does not carry this node's address 10.9.9.9",
        ),
    ] {
        let mut args = plan_args(r.to_str().unwrap());
        args[0] = "preflight";
        args.extend(["--json", "--node-ip", ip]);
        let mut cmd = mcsup(&env, &args);
        cmd.env("NCCL_SOCKET_IFNAME", "=lo");
        let ran = run_within(&env, ms(20_000), cmd);
        let report: serde_json::Value = serde_json::from_str(&ran.stdout)
            .unwrap_or_else(|e| panic!("not a JSON report: {e}\n{}", ran.describe()));
        let check = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "NCCL_SOCKET_IFNAME==lo")
            .unwrap_or_else(|| panic!("no check: {report:#}"))
            .clone();
        assert_eq!(check["status"], status, "{ip}: {check}");
        assert!(
            check["message"].as_str().unwrap_or("").contains(words),
            "{ip}: {check}"
        );
    }
    env.assert_no_leftovers();
}

/// One worker, this node the coordinator of a control connection on 127.0.0.1:`port` with
/// `others` as the job's other nodes.
fn coordinator_plan(env: &TestEnv, port: u16, others: &[&str]) -> mcsup::plan::Plan {
    let mut plan = env.plan(vec![env.up(
        "worker",
        mcsup::plan::ProcessKind::Worker,
        &[],
    )]);
    let mut nodes = vec![plan.node.name.clone()];
    nodes.extend(others.iter().map(|n| n.to_string()));
    plan.control = Some(mcsup::plan::ControlSpec {
        coordinator: plan.node.name.clone(),
        address: "127.0.0.1".into(),
        port,
        secret: env.log_dir().join("control.secret"),
        nodes,
        silent: mcsup::plan::ControlSpec::SILENT,
        stores_at_once: 0,
    });
    plan
}

/// Round 4's L5: the coordinator's control port (`mcsup.control_port`), taken by another
/// process, fails the preflight like the job's other ports, naming who holds it; it used to pass
/// and mcsup then failed to start with exit code 3.
#[test]
fn a_taken_control_port_fails_the_preflight() {
    let env = TestEnv::new();
    let held = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let plan = coordinator_plan(&env, port, &["n2"]);
    let mut m = env.start(&plan);
    let code = m.wait_exit(Duration::from_secs(15));
    let err = m.stderr();
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains(&format!(
            "mcsup's control connection (mcsup.control_port) port {port}"
        )) && err.contains(&format!("port {port} is already in use on this node")),
        "{err}"
    );
    assert!(
        !m.events().iter().any(|e| e.event == "spawned"),
        "nothing starts"
    );
    drop(held);
}

/// The adversarial re-run's false positive: a listener on another address of the control port
/// (127.0.0.5 here) is no clash for a coordinator that binds 127.0.0.1, as mcsup does; the
/// preflight passes and the job starts.
#[test]
fn a_control_port_held_on_another_address_is_no_clash() {
    let env = TestEnv::new();
    let held = std::net::TcpListener::bind("127.0.0.5:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let plan = coordinator_plan(&env, port, &[]);
    let mut m = env.start(&plan);
    m.wait_event("worker", "ready", Duration::from_secs(15));
    assert!(!m.stderr().contains("already in use"), "{}", m.stderr());
    m.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(m.wait_exit(Duration::from_secs(15)), 0, "{}", m.stderr());
    drop(held);
    env.assert_no_leftovers();
}
