//! End to end for an srt-slurm 2.0 recipe: real etcd (Debian `etcd-server`) and NATS
//! (`nats-server`) implied by the default dynamo frontend and a NATS request plane, the real
//! Mooncake master (declared `type: mooncake-master`) and store services (one `mooncake-store`
//! entry per role, each with its own segment), a `generic` service that uses etcd and NATS through
//! the discovery variables, and the synthetic zero-segment workers, on two "nodes".
//!
//! Both nodes run in one private network namespace (`unshare --net`, loopback only), so the recipe
//! keeps srtctl's default ports (2379, 4222, 8700-8702) without touching anything else on the
//! machine; node n1 is 127.0.0.1 and n2 127.0.0.2. srtctl's `/configs` binaries are a directory of
//! links to the Debian ones (`mcsup.configs_dir`). Needs root (the CI runs as root) and
//! `unshare`/`nsenter`.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::recipe::{metric, repo};
use common::{assert_no_diagnosis, environ, names, wait_for, Ev, Mcsup, TestEnv};
use nix::sys::signal::Signal;

const MIB: u64 = 1 << 20;

/// A network namespace held open by a `sleep`; processes join it with `nsenter`.
struct Netns {
    holder: Child,
}

impl Netns {
    fn new(env: &TestEnv) -> Netns {
        let holder = Command::new("unshare")
            .args(["--net", "sh", "-c", "ip link set lo up && exec sleep 600"])
            .env("MCSUP_TEST_TAG", &env.tag)
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare --net (run the tests as root)");
        let pid = holder.id();
        wait_for("the namespace's loopback", Duration::from_secs(10), || {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            (comm.trim() == "sleep").then_some(())
        });
        Netns { holder }
    }

    fn path(&self) -> String {
        format!("--net=/proc/{}/ns/net", self.holder.id())
    }

    /// Run a command inside the namespace and return its stdout.
    fn run(&self, argv: &[&str]) -> String {
        let out = Command::new("nsenter")
            .arg(self.path())
            .arg("--")
            .args(argv)
            .output()
            .expect("nsenter");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn http_get(&self, url: &str) -> String {
        let py = format!(
            "import urllib.request\ntry:\n print(urllib.request.urlopen('{url}', timeout=3).read().decode())\nexcept Exception as e:\n print('ERR', e)"
        );
        self.run(&["python3", "-c", &py])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// The `/configs` srtctl mounts: its etcd and nats-server, here the Debian packages' binaries.
fn configs_dir(env: &TestEnv) -> PathBuf {
    let dir = env.path("configs");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, candidates) in [
        ("etcd", ["/usr/bin/etcd", "/usr/local/bin/etcd"]),
        (
            "nats-server",
            ["/usr/sbin/nats-server", "/usr/bin/nats-server"],
        ),
    ] {
        let found = candidates.iter().find(|c| Path::new(c).exists());
        common::require(
            found.is_some(),
            name,
            "run scripts/setup.sh (scripts/test.sh does)",
        );
        let target = found.unwrap();
        std::os::unix::fs::symlink(target, dir.join(name)).unwrap();
    }
    dir
}

/// Connects to NATS_SERVER with the NATS protocol (INFO, CONNECT, PING -> PONG), then idles.
const NATS_CHECK: &str = r#"
import os, socket, sys, time
url = os.environ["NATS_SERVER"]
host, port = url.split("://", 1)[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=5)
f = s.makefile("rb")
info = f.readline()
assert info.startswith(b"INFO "), info
s.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
pong = f.readline()
assert pong.strip() == b"PONG", pong
print("DISCOVERY OK", os.environ["ETCD_ENDPOINTS"], url, flush=True)
time.sleep(3600)
"#;

fn write_recipe(env: &TestEnv, path: &Path) {
    let worker = |role: &str| {
        format!(
            r#"    {role}:
      - name: worker
        command: [python, {w}]
        args: [--name, "{{node}}-{{role}}-{{index}}", --block-size, "65536", --blocks, "16", --interval, "0.05", --report-every, "1"]
        readiness: {{log_line: "READY", timeout_seconds: 60}}
        stop: {{grace_seconds: 10}}
"#,
            w = repo().join("workers/synthetic_worker.py").display()
        )
    };
    let text = format!(
        r#"schema: 2
name: e2e-services
dynamo:
  request_plane: nats
engine: sglang
roles:
  prefill:
    env: {{MOONCAKE_GLOBAL_SEGMENT_SIZE: "0", MOONCAKE_LOCAL_BUFFER_SIZE: "16mb", MOONCAKE_PROTOCOL: tcp}}
  decode:
    env: {{MOONCAKE_GLOBAL_SEGMENT_SIZE: "0", MOONCAKE_LOCAL_BUFFER_SIZE: "16mb", MOONCAKE_PROTOCOL: tcp}}
services:
  - name: mooncake-master
    type: mooncake-master
  - name: store-prefill
    type: mooncake-store
    placement: {{node: prefill}}
    args: [--port, "8800", --max-wait-time, "30"]
    env: {{MOONCAKE_PROTOCOL: tcp, MOONCAKE_LOCAL_BUFFER_SIZE: "16mb", MOONCAKE_GLOBAL_SEGMENT_SIZE: 32mb}}
    readiness: {{port: 8800, timeout_seconds: 60}}
  - name: store-decode
    type: mooncake-store
    placement: {{node: decode}}
    args: [--port, "8801", --max-wait-time, "30"]
    env: {{MOONCAKE_PROTOCOL: tcp, MOONCAKE_LOCAL_BUFFER_SIZE: "16mb", MOONCAKE_GLOBAL_SEGMENT_SIZE: 48mb}}
    readiness: {{port: 8801, timeout_seconds: 60}}
  - name: discovery-check
    type: generic
    placement: {{node: workers}}
    preamble: 'etcdctl --endpoints "$ETCD_ENDPOINTS" put mcsup-e2e/{{node}} ok >/dev/null || exit 3'
    command: [python3, -c, {check}]
    readiness: {{log: {{pattern: "DISCOVERY OK"}}, timeout_seconds: 30}}
mcsup:
  configs_dir: {configs}
  master: {{timeout_seconds: 60}}
  workers:
{wp}{wd}  preflight: {{headroom_gib: 1}}
  log_dir: {log}
  node_addresses: {{n1: 127.0.0.1, n2: 127.0.0.2}}
  control_port: {control}
"#,
        control = common::free_port(),
        check = serde_json::to_string(NATS_CHECK).unwrap(),
        configs = configs_dir(env).display(),
        wp = worker("prefill"),
        wd = worker("decode"),
        log = env.log_dir().display(),
    );
    std::fs::write(path, text).unwrap();
}

fn start(env: &TestEnv, ns: &Netns, node: &str, role: &str, recipe: &Path) -> Mcsup {
    let wrapper = ["nsenter".to_string(), ns.path(), "--".to_string()];
    common::start_recipe(
        env,
        node,
        &wrapper,
        recipe,
        &["--role", role, "--node", node, "--nodelist", "n[1-2]"],
    )
}

/// `a` happened (first) before `b`.
fn before(evs: &[Ev], a: (&str, &str), b: (&str, &str)) {
    assert!(
        Mcsup::index_of(evs, a.0, a.1) < Mcsup::index_of(evs, b.0, b.1),
        "{} {} must come before {} {}: {:#?}",
        a.0,
        a.1,
        b.0,
        b.1,
        names(evs)
    );
}

#[test]
fn two_nodes_2_0_recipe_with_etcd_nats_master_stores_and_a_generic_service() {
    let env = TestEnv::new();
    let ns = Netns::new(&env);
    let recipe = env.path("job.yaml");
    write_recipe(&env, &recipe);

    let mut n1 = start(&env, &ns, "n1", "prefill", &recipe);
    let mut n2 = start(&env, &ns, "n2", "decode", &recipe);
    let long = Duration::from_secs(90);
    n1.wait_event("discovery-check", "ready", long);
    n2.wait_event("discovery-check", "ready", long);
    // etcd's and NATS's data live in the infra node's scratch directory (in its TMPDIR), which
    // mcsup made private; the other node runs neither, so it has none.
    let scratch = env.path("n1").join("mcsup-local-n1");
    let m = std::fs::symlink_metadata(&scratch).unwrap();
    assert!(
        m.is_dir() && m.permissions().mode() & 0o7777 == 0o700,
        "{m:?}"
    );
    assert!(scratch.join("etcd").is_dir() && scratch.join("nats").is_dir());
    assert!(!env.path("n2").join("mcsup-local-n2").exists());

    // n1 (infra): start by phase — etcd and NATS, then the master, then the store, then the
    // worker, then the after-frontend service.
    let e1 = n1.events();
    for infra in ["etcd", "nats"] {
        before(&e1, (infra, "ready"), ("mooncake-master", "spawned"));
    }
    before(
        &e1,
        ("mooncake-master", "ready"),
        ("store-prefill", "spawned"),
    );
    before(&e1, ("store-prefill", "ready"), ("worker", "spawned"));
    before(&e1, ("worker", "ready"), ("discovery-check", "spawned"));
    // n2 runs no etcd, NATS or master: it gates on n1's, then starts its own store.
    let e2 = n2.events();
    for gate in ["etcd@n1", "nats@n1", "mooncake-master@n1"] {
        before(&e2, (gate, "ready"), ("store-decode", "spawned"));
    }
    assert!(n2.pid_of("mooncake-master").is_none() && n2.pid_of("etcd").is_none());
    before(&e2, ("store-decode", "ready"), ("worker", "spawned"));

    // Workers see the discovery plane, and the generic service really used it.
    for (m, node_ip) in [(&n1, "127.0.0.1"), (&n2, "127.0.0.2")] {
        let env_of = environ(m.pid_of("worker").expect("worker pid"));
        assert!(
            env_of.contains(&"ETCD_ENDPOINTS=http://127.0.0.1:2379".to_string()),
            "{env_of:?}"
        );
        assert!(
            env_of.contains(&"NATS_SERVER=nats://127.0.0.1:4222".to_string()),
            "{env_of:?}"
        );
        assert!(
            env_of.contains(&"MOONCAKE_MASTER=127.0.0.1:8700".to_string()),
            "{env_of:?}"
        );
        assert!(
            env_of.contains(&format!("MOONCAKE_LOCAL_HOSTNAME={node_ip}")),
            "{env_of:?}"
        );
        assert!(
            env_of.contains(&"MOONCAKE_GLOBAL_SEGMENT_SIZE=0".to_string()),
            "{env_of:?}"
        );
    }
    let keys = ns.run(&[
        "etcdctl",
        "--endpoints",
        "http://127.0.0.1:2379",
        "get",
        "--prefix",
        "mcsup-e2e/",
        "--keys-only",
    ]);
    assert!(
        keys.contains("mcsup-e2e/n1") && keys.contains("mcsup-e2e/n2"),
        "{keys}"
    );

    // The master counts exactly the two role-sized segments: 32 + 48 MiB; workers add none.
    let text = wait_for(
        "both stores registered and workers writing",
        Duration::from_secs(30),
        || {
            let t = ns.http_get("http://127.0.0.1:8702/metrics");
            (metric(&t, "master_total_capacity_bytes") == Some(80 * MIB)
                && metric(&t, "master_key_count").unwrap_or(0) > 0)
                .then_some(t)
        },
    );
    assert_eq!(
        metric(&text, "master_total_capacity_bytes"),
        Some(80 * MIB),
        "{text}"
    );

    // Teardown: n2 first (its store unmounts from a live master), then n1, each by tier.
    n2.signal(Signal::SIGTERM);
    assert_eq!(n2.wait_exit(Duration::from_secs(40)), 0, "{}", n2.stderr());
    n1.signal(Signal::SIGTERM);
    assert_eq!(n1.wait_exit(Duration::from_secs(40)), 0, "{}", n1.stderr());
    assert!(!scratch.exists(), "the scratch directory goes with the run");
    let e1 = n1.events();
    before(&e1, ("discovery-check", "stopped"), ("worker", "stopping"));
    before(&e1, ("worker", "stopped"), ("store-prefill", "stopping"));
    before(
        &e1,
        ("store-prefill", "stopped"),
        ("mooncake-master", "stopping"),
    );
    for infra in ["etcd", "nats"] {
        before(&e1, ("mooncake-master", "stopped"), (infra, "stopping"));
    }
    let e2 = n2.events();
    before(&e2, ("discovery-check", "stopped"), ("worker", "stopping"));
    before(&e2, ("worker", "stopped"), ("store-decode", "stopping"));
    assert_no_diagnosis(&env.log_dir());

    drop(ns);
    env.assert_no_leftovers();
}
