//! The bad-recipe catalogue for srt-slurm 2.0 recipes (`schema: 2`, `engine:`, `roles:`, typed
//! `services:`): each case runs the real `mcsup plan` binary on a broken recipe and asserts exit
//! code 2 and a message that names the file at the RIGHT line (`file:LINE:COL`), the key path,
//! srtctl's wording where mcsup uses it, and a `fix:`. No input may panic (a panic exits 101 and
//! would fail the exit-code assertion).
//!
//! Each case names the line the message must point at by a marker: the line where the LAST
//! occurrence of that text in the recipe begins (appended services come last, so `readiness:` means the appended
//! entry's readiness, not the base store's).
//!
//! The functions after the main catalogue each pin one class of message that was once wrong (an
//! error inside a block reported at the block's first line, a sub-key missing from the key path,
//! no fix, a typo accepted), so it stays right.

use std::path::Path;
use std::process::Command;

/// A minimal valid 2.0 recipe each case starts from: a declared master and a decode store.
/// `services:` is the last key, so an entry appended to the text becomes `services[2]`.
const BASE: &str = r#"schema: 2
engine:
  type: sglang
roles:
  prefill:
    env:
      MOONCAKE_GLOBAL_SEGMENT_SIZE: "0"
    args:
      disaggregation-transfer-backend: mooncake
  decode:
    env:
      MOONCAKE_GLOBAL_SEGMENT_SIZE: "0"
    args:
      disaggregation-transfer-backend: mooncake
services:
  - name: mooncake-master
    type: mooncake-master
  - name: store-decode
    type: mooncake-store
    placement:
      node: decode
    args: [--port, "8800"]
    env:
      MOONCAKE_GLOBAL_SEGMENT_SIZE: 400gb
    readiness:
      port: 8800
"#;

/// A valid recipe that places nothing on a decode node other than the infra node: TRT-LLM
/// (mcsup derives no worker for it), and the only store is on prefill.
const PREFILL_STORE_ONLY: &str = r#"schema: 2
engine: trtllm
roles:
  prefill: {}
  decode: {}
services:
  - name: mooncake-master
    type: mooncake-master
  - name: store-prefill
    type: mooncake-store
    placement:
      node: prefill
    args: [--port, "8800"]
    env:
      MOONCAKE_GLOBAL_SEGMENT_SIZE: 100gb
    readiness:
      port: 8800
"#;

/// A second store, on prefill, on the same port as the base's decode store.
const PREFILL_STORE_ENTRY: &str = r#"  - name: store-prefill
    type: mooncake-store
    placement:
      node: prefill
    args: [--port, "8800"]
    env:
      MOONCAKE_GLOBAL_SEGMENT_SIZE: 100gb
    readiness:
      port: 8800
"#;

struct Case {
    name: &'static str,
    yaml: String,
    /// `--role`.
    roles: &'static str,
    /// `--node` (`n1` is the infra node of `n[1-2]`).
    node: &'static str,
    /// The message must point at the line where the last occurrence of this text begins.
    at: &'static str,
    /// Substrings the message must contain (key path, wording, fix).
    expect: &'static [&'static str],
}

impl Case {
    fn on(mut self, roles: &'static str, node: &'static str) -> Case {
        self.roles = roles;
        self.node = node;
        self
    }
}

fn c(name: &'static str, yaml: String, at: &'static str, expect: &'static [&'static str]) -> Case {
    Case {
        name,
        yaml,
        roles: "decode",
        node: "n1",
        at,
        expect,
    }
}

/// BASE with `from` replaced (once) by `to`.
fn sub(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "catalogue bug: `{from}` not in BASE");
    BASE.replacen(from, to, 1)
}

/// BASE with one more `services:` entry (it becomes `services[2]`), or any top-level keys.
fn with(tail: &str) -> String {
    format!("{BASE}{tail}")
}

fn cases() -> Vec<Case> {
    vec![
        // ---- names and types ----
        c("blank name", with("  - name: \"\"\n    command: [sleep, \"1\"]\n"), "name: \"\"",
          &["services[2].name", "services[].name must be a non-empty string", "fix:"]),
        c("unusable name", with("  - name: \"my service\"\n    command: [sleep, \"1\"]\n"), "name: \"my service\"",
          &["services[2].name", "`my service` is not a usable service name", "fix:"]),
        c("missing name", with("  - type: etcd\n    placement:\n      node: infra\n"), "- type: etcd",
          &["services[2]", "required key `name` is missing", "fix:"]),
        c("duplicate names", with("  - name: store-decode\n    command: [sleep, \"1\"]\n"), "name: store-decode",
          &["services[2].name", "services[store-decode]: name must be unique", "services[1] has it too", "fix:"]),
        c("unknown type", with("  - name: s\n    type: mooncake-stor\n"), "type: mooncake-stor",
          &["services[2].type", "unknown value `mooncake-stor`", "did you mean `mooncake-store`?", "fix:"]),
        c("typo placement key", with("  - name: s\n    command: [sleep, \"1\"]\n    placment:\n      node: head\n"), "placment:",
          &["services[2].placment", "unknown key `placment`", "did you mean `placement`?"]),
        c("services as a mapping", sub("services:\n", "services:\n  store: {}\nunused:\n"), "store: {}",
          &["services", "invalid type: map, expected a sequence", "fix:"]),
        // ---- command and args ----
        c("generic without command", with("  - name: s\n"), "name: s",
          &["services[2].command", "services[s].command is required for type \"generic\"", "fix:"]),
        c("empty command", with("  - name: s\n    command: []\n"), "command: []",
          &["services[2].command", "services[s].command, if set, must be non-empty (omit it to use the type's default)", "fix:"]),
        c("empty arg in args", with("  - name: s\n    command: [sleep]\n    args: [\"1\", \"\"]\n"), "args: [\"1\", \"\"]",
          &["services[2].args", "services[s].command/args must not contain empty arguments", "fix:"]),
        c("unquoted number in args", sub("args: [--port, \"8800\"]", "args: [--port, 8800]"), "args: [--port, 8800]",
          &["services[1].args", "item 1 must be a string, found a number", "quote it: \"8800\"", "fix:"]),
        c("unquoted number in command", with("  - name: s\n    command: [python3, -m, x, --workers, 4]\n"), "--workers, 4]",
          &["services[2].command", "item 4 must be a string, found a number", "quote it: \"4\""]),
        c("number as env value", with("  - name: s\n    command: [sleep, \"1\"]\n    env:\n      WORKERS: 4\n"), "WORKERS: 4",
          &["services[2].env", "the value of `WORKERS` must be a string", "quote it: WORKERS: \"4\"", "fix:"]),
        c("empty build_command", with("  - name: s\n    command: [sleep, \"1\"]\n    build_command: []\n"), "build_command: []",
          &["services[2].build_command", "services[s].build_command, if set, must be non-empty (omit it entirely instead)", "fix:"]),
        c("enabled as a string", with("  - name: s\n    command: [sleep, \"1\"]\n    enabled: \"yes\"\n"), "enabled: \"yes\"",
          &["services[2].enabled", "expected a boolean", "fix: write true or false"]),
        // ---- the master and the stores ----
        c("two mooncake-master entries", with("  - name: master-2\n    type: mooncake-master\n"), "name: master-2",
          &["services[2]", "only one mooncake-master service is supported", "fix:"]),
        c("declared master and engine.mooncake_kv_store", sub("  type: sglang\n", "  type: sglang\n  mooncake_kv_store:\n    container: /mooncake.sqsh\n"), "name: mooncake-master",
          &["services[0]", "a mooncake-master service cannot be combined with engine.mooncake_kv_store; declare one or the other", "fix:"]),
        c("store without a master", sub("  - name: mooncake-master\n    type: mooncake-master\n", ""), "name: store-decode",
          &["services[0]", "services[store-decode] (type mooncake-store) requires engine.mooncake_kv_store, which launches the master the store registers with", "fix:", "type: mooncake-master"]),
        c("store segment below 16mb", sub("400gb", "8mb"), "MOONCAKE_GLOBAL_SEGMENT_SIZE: 8mb",
          &["services[1].env.MOONCAKE_GLOBAL_SEGMENT_SIZE", "8mb", "below Mooncake's minimum of 16 MiB", "fix:"]),
        c("two stores on one node, same port", with(PREFILL_STORE_ENTRY), "name: store-prefill",
          &["services[2]", "services[store-decode] and services[store-prefill] both listen on port 8800 on node n1; give them disjoint placements or ports", "fix:", "placement.node: workers"])
          .on("prefill,decode", "n1"),
        c("transfer backend not mooncake", BASE.replace("disaggregation-transfer-backend: mooncake", "disaggregation-transfer-backend: nixl"), "args:\n      disaggregation-transfer-backend: nixl\n  decode:",
          &["roles.prefill.args", "neither roles.prefill.args nor roles.decode.args has 'disaggregation-transfer-backend: mooncake'", "fix:"]),
        // ---- placement ----
        c("unknown placement.node", sub("node: decode", "node: decoder"), "node: decoder",
          &["services[1].placement.node", "unknown value `decoder`", "did you mean `decode`?", "fix:"]),
        c("dedicated for a generic service", with("  - name: s\n    command: [sleep, \"1\"]\n    placement:\n      node: dedicated\n"), "node: dedicated",
          &["services[2].placement.node", "services[s].placement.node: dedicated is only supported for infra-class kinds (etcd, nats, mooncake-master); use head, infra, or workers for type \"generic\"", "fix:"]),
        c("etcd placed on decode", with("  - name: etcd\n    type: etcd\n    placement:\n      node: decode\n"), "node: decode",
          &["services[2].placement.node", "services[etcd] (type etcd) must be placed on head, infra, or dedicated; got \"decode\". The discovery plane lives on the infra node.", "fix:"]),
        c("etcd and nats disagree on dedicated", with("  - name: etcd\n    type: etcd\n    placement:\n      node: dedicated\n  - name: nats\n    type: nats\n    placement:\n      node: infra\n"), "node: infra",
          &["services[3].placement.node", "services etcd and nats must agree on placement.node: dedicated (they share the infra node)", "fix:"]),
        c("per: worker on head", with("  - name: s\n    command: [sleep, \"1\"]\n    placement:\n      node: head\n      per: worker\n"), "node: head",
          &["services[2].placement.node", "services[s].placement.per: worker needs placement.node in prefill, decode, agg, workers; got \"head\"", "fix:"]),
        c("per: worker with a tcp probe", with("  - name: s\n    command: [sleep, \"1\"]\n    placement:\n      node: decode\n      per: worker\n    readiness:\n      tcp:\n        port: 9000\n"), "readiness:",
          &["services[2].readiness", "services[s].placement.per: worker instances share their node's ports, so readiness must be a log probe", "fix:"]),
        c("unknown placement.per", with("  - name: s\n    command: [sleep, \"1\"]\n    placement:\n      node: decode\n      per: everyone\n"), "per: everyone",
          &["services[2].placement.per", "unknown value `everyone`", "fix:", "`worker`"]),
        c("per: worker on a pool", with("  - name: s\n    command: [sleep, \"1\"]\n    placement:\n      pool: p\n      per: worker\n"), "per: worker",
          &["services[2].placement.per", "services[].placement.per: worker attaches to engine workers, not to a pool", "fix:"]),
        c("nodes: 0", with("  - name: s\n    command: [sleep, \"1\"]\n    nodes: 0\n"), "nodes: 0",
          &["services[2].nodes", "services[s].nodes must be at least 1; got 0", "fix:"]),
        c("nodes with placement.node decode", with("  - name: s\n    command: [sleep, \"1\"]\n    nodes: 2\n    placement:\n      node: decode\n"), "node: decode",
          &["services[2].placement.node", "services[s].nodes owns a pool, so placement.node must be workers, meaning that pool (got \"decode\")", "fix:"]),
        c("placement with node and pool", with("  - name: s\n    command: [sleep, \"1\"]\n    placement:\n      node: decode\n      pool: p\n"), "placement:",
          &["services[2].placement", "services[].placement: give either node or pool, not both", "fix:"]),
        c("unknown start", with("  - name: s\n    command: [sleep, \"1\"]\n    start: before-workers\n"), "start: before-workers",
          &["services[2].start", "unknown value `before-workers`", "did you mean `before_workers`?", "fix:"]),
        // ---- readiness (the checks serde's own errors carry) ----
        c("bad log regex", with("  - name: s\n    command: [sleep, \"1\"]\n    readiness:\n      log:\n        pattern: \"ready(\"\n"), "pattern: \"ready(\"",
          &["services[2].readiness.log.pattern", "not a valid regular expression", "fix:"]),
        c("readiness port 0", with("  - name: s\n    command: [sleep, \"1\"]\n    readiness:\n      port: 0\n"), "port: 0",
          &["services[2].readiness.port", "port 0 is out of range", "1 to 65535", "fix:"]),
        c("readiness tcp port 70000", with("  - name: s\n    command: [sleep, \"1\"]\n    readiness:\n      tcp:\n        port: 70000\n"), "port: 70000",
          &["services[2].readiness.tcp.port", "port 70000 is out of range", "1 to 65535", "fix:"]),
        // ---- external, terminal, options ----
        c("external on a generic service", with("  - name: s\n    command: [sleep, \"1\"]\n    external: \"10.0.0.9:1234\"\n"), "external:",
          &["services[2].external", "services[s].external is only valid for discovery-plane kinds, not \"generic\"", "fix:"]),
        c("external empty string", with("  - name: etcd\n    type: etcd\n    external: \"\"\n"), "external:",
          &["services[2].external", "services[etcd].external must be a non-empty endpoint", "fix:"]),
        c("store size with a template left in it", sub("MOONCAKE_GLOBAL_SEGMENT_SIZE: 400gb", "MOONCAKE_GLOBAL_SEGMENT_SIZE: \"400gib{}\""), "MOONCAKE_GLOBAL_SEGMENT_SIZE: \"400gib{}\"",
          &["services[1].env.MOONCAKE_GLOBAL_SEGMENT_SIZE", "MOONCAKE_GLOBAL_SEGMENT_SIZE=\"400gib{}\" is not a size Mooncake reads", "fix: write a number"]),
        c("store size made of the node's name", sub("MOONCAKE_GLOBAL_SEGMENT_SIZE: 400gb", "MOONCAKE_GLOBAL_SEGMENT_SIZE: \"{node}gb\""), "MOONCAKE_GLOBAL_SEGMENT_SIZE: \"{node}gb\"",
          &["MOONCAKE_GLOBAL_SEGMENT_SIZE=\"n1gb\" is not a size Mooncake reads"]),
        c("external with a second line", with("  - name: etcd\n    type: etcd\n    external: \"a:1\\nINJECTED=1\"\n"), "external:",
          &["services[2].external", "services[etcd].external \"a:1\\nINJECTED=1\" holds '\\n'", "fix: give the endpoint as its clients dial it"]),
        c("external with a port out of range", with("  - name: etcd\n    type: etcd\n    external: \"[::1]:99999\"\n"), "external:",
          &["services[2].external", "has the port \"99999\", not one from 1 to 65535"]),
        c("external and terminal", with("  - name: etcd\n    type: etcd\n    external: \"http://10.0.0.9:2379\"\n    terminal: true\n"), "terminal: true",
          &["services[2].terminal", "services[etcd].terminal cannot be set on an external service", "fix:"]),
        c("options unknown key", with("  - name: s\n    command: [sleep, \"1\"]\n    options:\n      threads: 4\n"), "threads: 4",
          &["services[2].options.threads", "services[s].options has keys type \"generic\" does not understand: threads", "fix:"]),
        c("nats options typo", with("  - name: nats\n    type: nats\n    options:\n      max_payload: 64\n"), "max_payload: 64",
          &["services[2].options.max_payload", "services[nats].options has keys type \"nats\" does not understand: max_payload", "fix:", "max_payload_mb"]),
        c("nats max_payload_mb 0", with("  - name: nats\n    type: nats\n    options:\n      max_payload_mb: 0\n"), "max_payload_mb: 0",
          &["services[2].options.max_payload_mb", "services[nats].options.max_payload_mb must be a positive integer", "fix:"]),
        // ---- source, build, srun ----
        c("source rev main", with("  - name: s\n    command: [sleep, \"1\"]\n    source:\n      git: https://example.com/x.git\n      rev: main\n"), "rev: main",
          &["services[2].source.rev", "services[].source.rev must be an immutable ref (commit SHA, tag, or refs/pull/<n>/head), not a moving branch name: \"main\"", "fix:"]),
        c("source git empty", with("  - name: s\n    command: [sleep, \"1\"]\n    source:\n      git: \"\"\n      rev: abc123\n"), "git: \"\"",
          &["services[2].source.git", "services[].source.git must be a non-empty repository URL", "fix:"]),
        c("cpus_per_task 0", with("  - name: s\n    command: [sleep, \"1\"]\n    cpus_per_task: 0\n"), "cpus_per_task: 0",
          &["services[2].cpus_per_task", "services[s].cpus_per_task must be positive", "fix:"]),
        c("build_timeout_seconds 0", with("  - name: s\n    command: [sleep, \"1\"]\n    build_timeout_seconds: 0\n"), "build_timeout_seconds: 0",
          &["services[2].build_timeout_seconds", "services[s].build_timeout_seconds must be positive", "fix:"]),
        // ---- engine, roles, schema ----
        c("engine and backend both", with("backend:\n  type: sglang\n"), "engine:",
          &["engine", "the recipe has both `engine:` (2.0) and `backend:` (v1)", "fix:"]),
        c("roles mixed with backend.sglang_config", sub("engine:\n  type: sglang\n", "backend:\n  type: sglang\n  sglang_config:\n    decode:\n      tp-size: 8\n"), "roles:",
          &["roles", "roles: cannot be combined with the fields it expands into: backend.sglang_config", "fix:"]),
        c("engine typo key", sub("  type: sglang", "  typ: sglang"), "typ: sglang",
          &["engine", "unknown key `typ`", "did you mean `type`?"]),
        c("unknown role name", sub("  prefill:\n", "  prefil:\n"), "prefil:",
          &["roles.prefil", "unknown key `prefil`", "did you mean `prefill`?"]),
        c("roles.decode unknown key", sub("  decode:\n    env:", "  decode:\n    environment:"), "environment:",
          &["roles.decode.environment", "unknown key `environment`", "fix:"]),
        c("roles args as a list", sub("      disaggregation-transfer-backend: mooncake\n  decode:", "      - --tp-size 8\n  decode:"), "args:\n      - --tp-size 8",
          &["roles.prefill.args", "expected a mapping of flag names to values", "fix:"]),
        c("--role agg, recipe has prefill and decode", BASE.into(), "roles:",
          &["roles", "the recipe declares no `agg` role (roles: prefill, decode)", "fix: run this node with --role prefill or --role decode"])
          .on("agg", "n1"),
        // ---- the node ----
        // Nothing runs on n2 because mcsup derives no TRT-LLM worker: the error says that, not
        // the generic "no service is placed here" (issue 31, item 4).
        c("a node where nothing runs", PREFILL_STORE_ONLY.into(), "engine: trtllm",
          &["engine.type: trtllm: srtctl starts each TRT-LLM endpoint", "one rank per GPU", "it does not read 2.0's engine: trtllm yet", "nothing would run on this node", "fix: run this recipe with srtctl for now", "mcsup.workers.<role>"])
          .on("decode", "n2"),
        c("a node where nothing runs (not TRT-LLM)", PREFILL_STORE_ONLY.replace("engine: trtllm\n", "engine: sglang\n").replace("  decode: {}\n", "  decode: {}\nmcsup:\n  workers:\n    decode: []\n"), "services:",
          &["services", "nothing would run on node n2 (roles decode)", "fix:", "allow_empty_node"])
          .on("decode", "n2"),
        c("mcsup.services names no service", with("mcsup:\n  services:\n    store-decod:\n      stop: {signal: SIGINT}\n"), "store-decod:",
          &["mcsup.services.store-decod", "no service is named `store-decod`", "fix: use one of: etcd, mooncake-master, store-decode"]),
    ]
}

fn mcsup() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mcsup"))
}

/// `mcsup plan` on `recipe` as node `node` of `n[1-2]` (n1 is the infra node); addresses are
/// given, so nothing depends on DNS.
fn run_plan(dir: &Path, recipe: &Path, roles: &str, node: &str) -> (i32, String) {
    let ip = match node {
        "n1" => "10.0.0.1",
        "n2" => "10.0.0.2",
        other => panic!("catalogue bug: unknown node {other}"),
    };
    let out = mcsup()
        .current_dir(dir)
        .env_remove("MCSUP_ROLE")
        .env_remove("MCSUP_RECIPE")
        .env_remove("SLURM_JOB_ID")
        .env_remove("SLURM_JOB_NODELIST")
        .env_remove("SLURM_NODEID")
        .env_remove("SLURMD_NODENAME")
        .args(["plan", "--role", roles, "--recipe"])
        .arg(recipe)
        .args(["--node", node, "--nodelist", "n[1-2]", "--node-ip", ip])
        .args(["--master-addr", "10.0.0.1"])
        .output()
        .expect("run mcsup");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The 1-based line on which the last occurrence of `marker` in `yaml` begins (a marker may
/// span lines, e.g. `"args:\n      - x"`, to pick one of several `args:` keys).
fn line_of(yaml: &str, marker: &str) -> Option<usize> {
    let i = yaml.rfind(marker)?;
    Some(yaml[..i].matches('\n').count() + 1)
}

/// Run each case in its own directory; return one report per case that does not hold.
/// The problems found, and every message as printed (the temp directory made `<dir>`).
fn check(cases: &[Case]) -> (Vec<String>, String) {
    let mut failures = Vec::new();
    let mut messages = String::new();
    for case in cases {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("recipe.yaml");
        std::fs::write(&file, &case.yaml).unwrap();
        let line = line_of(&case.yaml, case.at).unwrap_or_else(|| {
            panic!(
                "[{}] catalogue bug: `{}` not in the recipe",
                case.name, case.at
            )
        });
        let (code, err) = run_plan(dir.path(), &file, case.roles, case.node);
        messages.push_str(&format!(
            "## {}\n{}\n",
            case.name,
            err.replace(&dir.path().display().to_string(), "<dir>")
                .trim_end()
        ));
        let mut problems = Vec::new();
        if code != 2 {
            problems.push(format!("exit code {code}, want 2"));
        }
        // The position: `<file>:<line>:<column>:`.
        let at = format!("{}:{line}:", file.display());
        match err.find(&at) {
            None => problems.push(format!(
                "want the position `{at}<col>:` (line {line}: `{}`)",
                case.at.trim_end()
            )),
            Some(i) => {
                let rest = &err[i + at.len()..];
                let digits = rest.chars().take_while(char::is_ascii_digit).count();
                if digits == 0 || !rest[digits..].starts_with(':') {
                    problems.push(format!("`{at}` is not followed by a column"));
                }
            }
        }
        if !err.contains("fix:") {
            problems.push("message has no fix".into());
        }
        for want in case.expect {
            if !err.contains(want) {
                problems.push(format!("missing `{want}`"));
            }
        }
        if !problems.is_empty() {
            failures.push(format!(
                "[{}] {}\n--- stderr:\n{err}",
                case.name,
                problems.join("; ")
            ));
        }
    }
    (failures, messages)
}

fn assert_cases(cases: &[Case]) -> String {
    let (failures, messages) = check(cases);
    assert!(
        failures.is_empty(),
        "{} of {} bad-recipe cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    messages
}

/// The recipes the catalogue breaks are themselves valid, in the setting each case uses.
#[test]
fn base_recipes_are_valid() {
    let dir = tempfile::tempdir().unwrap();
    for (name, yaml, roles, node) in [
        ("base", BASE.to_string(), "decode", "n1"),
        ("base, co-located", BASE.to_string(), "prefill,decode", "n1"),
        ("base, second node", BASE.to_string(), "decode", "n2"),
        // The clash needs both roles on one node: each role alone is fine.
        (
            "two stores, decode",
            with(PREFILL_STORE_ENTRY),
            "decode",
            "n1",
        ),
        (
            "two stores, prefill",
            with(PREFILL_STORE_ENTRY),
            "prefill",
            "n2",
        ),
        // The empty node is empty only as decode on n2.
        (
            "prefill store, prefill node",
            PREFILL_STORE_ONLY.to_string(),
            "prefill",
            "n2",
        ),
        (
            "prefill store, infra node",
            PREFILL_STORE_ONLY.to_string(),
            "decode",
            "n1",
        ),
    ] {
        let p = dir.path().join("ok.yaml");
        std::fs::write(&p, &yaml).unwrap();
        let (code, err) = run_plan(dir.path(), &p, roles, node);
        assert_eq!(code, 0, "[{name}] {err}");
    }
}

#[test]
fn catalogue_of_bad_v2_recipes() {
    let cases = cases();
    assert!(cases.len() >= 32, "only {} cases", cases.len());
    // A change of wording shows in review as a snapshot change.
    insta::assert_snapshot!("bad_v2_recipe_messages", assert_cases(&cases));
}

// ---- mcsup message bugs: each function asserts the message mcsup SHOULD print ----

#[test]
fn empty_item_in_command_points_at_the_item() {
    assert_cases(&[c(
        "empty arg in command",
        with("  - name: s\n    command: [sleep, \"\"]\n"),
        "command: [sleep, \"\"]",
        &[
            "services[2].command[1]:",
            "services[s].command/args must not contain empty arguments",
            "fix:",
        ],
    )]);
}

#[test]

fn readiness_errors_point_at_the_offending_key() {
    assert_cases(&[
        c("readiness with two probes",
          with("  - name: s\n    command: [sleep, \"1\"]\n    readiness:\n      tcp:\n        port: 9000\n      log:\n        pattern: ready\n"), "readiness:",
          &["services[2].readiness", "services[].readiness needs exactly one probe: port, tcp, http, log, or file; got tcp, log", "fix:"]),
        c("readiness port and tcp",
          with("  - name: s\n    command: [sleep, \"1\"]\n    readiness:\n      port: 9000\n      tcp:\n        port: 9000\n"), "      tcp:",
          &["services[2].readiness.tcp", "services[].readiness: give either port (shorthand) or tcp, not both", "fix:"]),
        c("readiness with no probe",
          with("  - name: s\n    command: [sleep, \"1\"]\n    readiness:\n      timeout_seconds: 5\n"), "readiness:",
          &["services[2].readiness", "needs exactly one probe: port, tcp, http, log, or file; got none", "fix:"]),
        c("http path without '/'",
          with("  - name: s\n    command: [sleep, \"1\"]\n    readiness:\n      http:\n        port: 9000\n        path: health\n"), "path: health",
          &["services[2].readiness.http.path", "readiness.http.path must start with '/'", "fix:"]),
        c("http status 42",
          with("  - name: s\n    command: [sleep, \"1\"]\n    readiness:\n      http:\n        port: 9000\n        status: 42\n"), "status: 42",
          &["services[2].readiness.http.status", "readiness.http.status must be an HTTP status code", "fix:"]),
        c("empty file path",
          with("  - name: s\n    command: [sleep, \"1\"]\n    readiness:\n      file:\n        path: \"\"\n"), "path: \"\"",
          &["services[2].readiness.file.path", "readiness.file.path must not be empty", "fix:"]),
    ]);
}

#[test]

fn metrics_errors_point_at_the_offending_key() {
    assert_cases(&[
        c("metrics: two endpoints without names",
          with("  - name: s\n    command: [sleep, \"1\"]\n    metrics:\n      - port: 9000\n      - port: 9001\n"), "metrics:",
          &["services[2].metrics", "metrics declares 2 endpoints; give each a distinct name (it becomes the endpoint's name in the parquet)", "fix:"]),
        c("metrics nodes: some",
          with("  - name: s\n    command: [sleep, \"1\"]\n    metrics:\n      port: 9000\n      nodes: some\n"), "nodes: some",
          &["services[2].metrics.nodes", "metrics.nodes must be all or first; got \"some\"", "fix:"]),
        c("metrics path without '/'",
          with("  - name: s\n    command: [sleep, \"1\"]\n    metrics:\n      port: 9000\n      path: metrics\n"), "path: metrics",
          &["services[2].metrics.path", "metrics.path must start with '/'", "fix:"]),
    ]);
}

#[test]

fn value_errors_point_at_the_offending_key_not_the_block() {
    assert_cases(&[
        c("readiness timeout 0 after port",
          with("  - name: s\n    command: [sleep, \"1\"]\n    readiness:\n      port: 9000\n      timeout_seconds: 0\n"), "timeout_seconds: 0",
          &["services[2].readiness.timeout_seconds", "a duration of 0 seconds is not allowed here", "fix:"]),
        c("env: a number as the second variable",
          with("  - name: s\n    command: [sleep, \"1\"]\n    env:\n      MC_TCP_BIND_ADDRESS: \"0.0.0.0\"\n      MC_GID_INDEX: 3\n"), "MC_GID_INDEX: 3",
          &["services[2].env", "the value of `MC_GID_INDEX` must be a string", "quote it: MC_GID_INDEX: \"3\"", "fix:"]),
        c("block-style command: a number as the second item",
          with("  - name: s\n    command:\n      - python3\n      - 4\n"), "- 4",
          &["services[2].command", "item 1 must be a string, found a number", "quote it: \"4\"", "fix:"]),
    ]);
}

#[test]

fn schema_3_points_at_schema() {
    assert_cases(&[c(
        "schema: 3 after other keys",
        format!("name: job\n{}", sub("schema: 2\n", "")) + "schema: 3\n",
        "schema: 3",
        &[
            "schema:",
            "schema 3 is not a recipe layout mcsup reads",
            "fix:",
        ],
    )]);
}

#[test]

fn engine_as_a_list_has_a_fix() {
    assert_cases(&[c(
        "engine as a list",
        sub("  type: sglang\n", "  - sglang\n"),
        "- sglang",
        &[
            "engine",
            "engine must be a type string or a mapping",
            "fix:",
        ],
    )]);
}

#[test]

fn engine_type_typo_is_an_error() {
    assert_cases(&[c(
        "engine type typo",
        sub("  type: sglang", "  type: sglng"),
        "type: sglng",
        &["engine.type", "sglng", "did you mean `sglang`?", "fix:"],
    )]);
}

#[test]

fn empty_node_without_services_points_at_the_role() {
    assert_cases(&[c(
        "a node where nothing runs, no services key",
        "schema: 2\nengine: trtllm\nroles:\n  prefill: {}\n".into(),
        "engine: trtllm",
        &[
            "engine.type: trtllm: srtctl starts each TRT-LLM endpoint",
            "fix:",
        ],
    )
    .on("prefill", "n2")]);
}
