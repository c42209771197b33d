//! The bad-recipe catalogue: each case runs the real `mcsup plan` binary on a broken recipe and
//! asserts exit code 2 and a message that names the file, the key path and a fix. No input may
//! panic (a panic exits 101 and would fail the exit-code assertion).

use std::path::Path;
use std::process::Command;

/// A minimal valid recipe each case starts from (by text substitution or wholesale).
const BASE: &str = r#"
backend:
  type: sglang
  decode_environment:
    MOONCAKE_GLOBAL_SEGMENT_SIZE: "0"
  mooncake_kv_store:
    standalone:
      args: [--port, "8800"]
      placements:
        decode:
          env:
            MOONCAKE_GLOBAL_SEGMENT_SIZE: "400gb"
      health_check:
        port: 8800
        timeout_seconds: 120
mcsup:
  workers:
    decode:
      - name: w
        command: [python, worker.py]
"#;

/// srtctl's layout of a 1P1D job on one two-GPU node (for the cases that need derived workers).
const PD_ONE_NODE: &str = "resources: {gpus_per_node: 2, prefill_nodes: 1, decode_nodes: 0, prefill_workers: 1, decode_workers: 1, gpus_per_prefill: 1, gpus_per_decode: 1}\n";

struct Case {
    name: &'static str,
    /// Recipe text; `None` = write nothing (the case sets the path up itself).
    yaml: String,
    roles: &'static str,
    /// Substrings the message must contain (key path, wording, fix).
    expect: &'static [&'static str],
}

fn sub(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "catalogue bug: `{from}` not in BASE");
    BASE.replacen(from, to, 1)
}

fn cases() -> Vec<Case> {
    let c = |name, yaml: String, expect| Case {
        name,
        yaml,
        roles: "decode",
        expect,
    };
    vec![
        c("unknown placement", sub("        decode:\n", "        storage:\n"),
          &["backend.mooncake_kv_store.standalone.placements.storage", "unknown key `storage`", "fix:", "prefill"]),
        c("typo placements", sub("      placements:", "      placments:"),
          &["backend.mooncake_kv_store.standalone.placments", "did you mean `placements`?"]),
        c("typo standalone", sub("    standalone:", "    standalon:"),
          &["backend.mooncake_kv_store.standalon", "did you mean `standalone`?"]),
        c("typo health_check key", sub("        timeout_seconds: 120", "        timeout_secs: 120"),
          &["health_check.timeout_secs", "did you mean `timeout_seconds`?"]),
        c("typo in backend", sub("  decode_environment:", "  decode_enviroment:"),
          &["decode_enviroment", "did you mean `decode_environment`?"]),
        c("typo top-level mcsup", sub("mcsup:", "mcsupp:"),
          &["mcsupp", "did you mean `mcsup`?"]),
        c("typo in worker", sub("        command: [python, worker.py]", "        comand: [python, worker.py]"),
          &["mcsup.workers.decode[0].comand", "did you mean `command`?"]),
        c("empty store command", sub("      args: [--port, \"8800\"]", "      command: []\n      args: [--port, \"8800\"]"),
          &["standalone.command", "the command is empty", "fix:"]),
        c("empty worker command", sub("        command: [python, worker.py]", "        command: []"),
          &["mcsup.workers.decode[0].command", "empty"]),
        c("size 100gib", sub("\"400gb\"", "\"100gib\""),
          &["placements.decode.env", "100gib", "powers of 1024"]),
        c("size negative", sub("\"400gb\"", "\"-1gb\""),
          &["placements.decode.env", "negative"]),
        c("size empty", sub("\"400gb\"", "\"\""),
          &["placements.decode.env", "empty string"]),
        c("size garbage worker", sub("MOONCAKE_GLOBAL_SEGMENT_SIZE: \"0\"", "MOONCAKE_GLOBAL_SEGMENT_SIZE: \"lots\""),
          &["backend.decode_environment", "not a number"]),
        c("health port 0", sub("        port: 8800", "        port: 0"),
          &["health_check.port", "port 0 is out of range", "1 to 65535"]),
        c("health port 70000", sub("        port: 8800", "        port: 70000"),
          &["health_check.port", "70000", "1 to 65535"]),
        c("negative timeout", sub("timeout_seconds: 120", "timeout_seconds: -5"),
          &["health_check.timeout_seconds", "negative"]),
        c("zero timeout", sub("timeout_seconds: 120", "timeout_seconds: 0"),
          &["health_check.timeout_seconds", "greater than 0"]),
        c("timeout as string", sub("timeout_seconds: 120", "timeout_seconds: \"120s\""),
          &["health_check.timeout_seconds", "not \"120s\""]),
        c("non-string env value", sub("MOONCAKE_GLOBAL_SEGMENT_SIZE: \"0\"", "MC_GID_INDEX: 3"),
          &["backend.decode_environment", "must be a string", "quote it: MC_GID_INDEX: \"3\""]),
        c("boolean env value", sub("MOONCAKE_GLOBAL_SEGMENT_SIZE: \"0\"", "MC_FORCE_HCA: true"),
          &["backend.decode_environment", "quote it: MC_FORCE_HCA: \"true\""]),
        c("non-string arg", sub("args: [--port, \"8800\"]", "args: [--port, 8800]"),
          &["standalone.args", "quote it: \"8800\""]),
        c("args as one string", sub("args: [--port, \"8800\"]", "args: \"--port 8800\""),
          &["standalone.args", "write it as a list"]),
        c("bad env name", sub("MOONCAKE_GLOBAL_SEGMENT_SIZE: \"0\"", "1BAD: \"x\""),
          &["backend.decode_environment", "not a valid environment variable name"]),
        c("empty placements", sub("      placements:\n        decode:\n          env:\n            MOONCAKE_GLOBAL_SEGMENT_SIZE: \"400gb\"\n", "      placements: {}\n"),
          &["standalone.placements", "at least one role"]),
        c("missing placements", sub("      placements:\n        decode:\n          env:\n            MOONCAKE_GLOBAL_SEGMENT_SIZE: \"400gb\"\n", ""),
          &["backend.mooncake_kv_store.standalone", "placements must name at least one role"]),
        c("duplicate worker names", sub("        command: [python, worker.py]", "        command: [python, worker.py]\n      - name: w\n        command: [python, other.py]"),
          &["mcsup.workers.decode[1].name", "duplicate process name `w`"]),
        c("bad restart policy", sub("        command: [python, worker.py]", "        command: [python, worker.py]\n        restart: {policy: sometimes}"),
          &["mcsup.workers.decode[0].restart.policy", "unknown value `sometimes`", "never"]),
        c("bad stop signal", sub("        command: [python, worker.py]", "        command: [python, worker.py]\n        stop: {signal: SIGFOO}"),
          &["mcsup.workers.decode[0].stop.signal", "SIGFOO", "SIGTERM"]),
        c("SIGKILL as drain", format!("{BASE}  shutdown:\n    drain_signal: SIGKILL\n"),
          &["mcsup.shutdown.drain_signal", "cannot be caught"]),
        c("bad regex", sub("        command: [python, worker.py]", "        command: [python, worker.py]\n        readiness: {log_line: \"READY(\"}"),
          &["mcsup.workers.decode[0].readiness.log_line", "not a valid regular expression"]),
        c("readiness without probe", sub("        command: [python, worker.py]", "        command: [python, worker.py]\n        readiness: {timeout_seconds: 5}"),
          &["mcsup.workers.decode[0].readiness", "names no probe"]),
        c("same master ports", format!("{BASE}  master:\n    rpc_port: 9000\n    metadata_port: 9000\n"),
          &["mcsup.master", "must differ"]),
        c("YAML syntax error", sub("  type: sglang", "  type: sglang: oops"),
          &["YAML syntax error", "fix:"]),
        c("tab indentation", sub("  type: sglang", "\ttype: sglang"),
          &["fix:"]),
        c("not a mapping", "just a string\n".into(), &["not a YAML mapping", "fix:"]),
        c("list at top", "- backend\n".into(), &["fix:"]),
        c("empty file", "".into(), &["the recipe is empty", "fix:"]),
        c("only comments", "# nothing here\n".into(), &["the recipe is empty"]),
        c("backend type", sub("  type: sglang", "  type: tensorrt"),
          &["backend.type", "unknown value `tensorrt`", "sglang"]),
        c("count zero", sub("        command: [python, worker.py]", "        command: [python, worker.py]\n        count: 0"),
          &["mcsup.workers.decode[0].count", "count is 0"]),
        c("store segment too small", sub("\"400gb\"", "\"1mb\""),
          &["placements.decode.env.MOONCAKE_GLOBAL_SEGMENT_SIZE", "below Mooncake's minimum of 16 MiB"]),
        c("transfer backend missing", sub("  decode_environment:", "  sglang_config:\n    decode: {tp-size: 8}\n  decode_environment:"),
          &["backend.sglang_config", "disaggregation-transfer-backend: mooncake"]),
        c("duplicate env key", sub("MOONCAKE_GLOBAL_SEGMENT_SIZE: \"0\"", "MOONCAKE_GLOBAL_SEGMENT_SIZE: \"0\"\n    MOONCAKE_GLOBAL_SEGMENT_SIZE: \"1gb\""),
          &["backend.decode_environment", "fix:"]),
        c("unknown worker role", sub("    decode:\n      - name: w", "    storage:\n      - name: w"),
          &["mcsup.workers.storage", "unknown key `storage`"]),
        Case { roles: "prefill,decode", ..c("vLLM profiler window set twice", format!("{PD_ONE_NODE}backend:\n  type: vllm\n  vllm_config:\n    prefill: {{profiler-config.delay_iterations: 3}}\n    decode: {{}}\nprofiling: {{type: nsys, prefill: {{start_step: 1, stop_step: 2}}, decode: {{start_step: 1, stop_step: 2}}}}\n"),
          &["backend.vllm_config.prefill.profiler-config.delay_iterations", "profiling.<mode>.start_step"]) },
        Case { roles: "prefill,decode", ..c("profiling window of the wrong mode", format!("{PD_ONE_NODE}backend:\n  type: sglang\n  sglang_config: {{prefill: {{}}, decode: {{}}}}\nprofiling: {{type: torch, aggregated: {{start_step: 1, stop_step: 2}}}}\n"),
          &["profiling", "profiling.prefill and profiling.decode"]) },
        Case { roles: "prefill,decode", ..c("dynamo wheel given as a file", format!("{PD_ONE_NODE}backend:\n  type: sglang\n  sglang_config: {{prefill: {{}}, decode: {{}}}}\ndynamo: {{wheel: ai_dynamo-1.2.0-py3-none-any.whl}}\n"),
          &["dynamo.wheel", "is a file name", "package version"]) },
        c("success code out of range", sub("        command: [python, worker.py]", "        command: [python, worker.py]\n        restart: {success_codes: [300]}"),
          &["restart.success_codes", "out of range"]),
        // Issue 31, item 4: what is missing for a TRT-LLM recipe, not "nothing would run".
        c("TRT-LLM without worker counts", "backend:\n  type: trtllm\n  trtllm_config:\n    decode: {tensor_parallel_size: 1}\n".into(),
          &["resources: trtllm: srtctl starts each TRT-LLM endpoint as one MPI job over all of its nodes", "needs the worker counts under resources:", "fix: give resources.prefill_workers/decode_workers"]),
        Case { roles: "prefill,decode", ..c("TRT-LLM engine settings not a mapping", format!("{PD_ONE_NODE}backend:\n  type: trtllm\n  trtllm_config:\n    decode: 8\n"),
          &["backend.trtllm_config.decode", "is not a mapping", "fix:"]) },
        Case { roles: "prefill,decode", ..c("TRT-LLM engine setting srtctl's YAML would quote", format!("{PD_ONE_NODE}backend:\n  type: trtllm\n  trtllm_config:\n    decode: {{backend: \"yes\"}}\n"),
          &["backend.trtllm_config.decode", "`yes` would need quoting", "fix:"]) },
        Case { roles: "prefill,decode", ..c("trtllm_serve with several frontends", format!("{PD_ONE_NODE}backend:\n  type: trtllm\nfrontend: {{type: trtllm_serve}}\n"),
          &["frontend.enable_multiple_frontends", "one public endpoint", "fix: set frontend.enable_multiple_frontends: false"]) },
        Case { roles: "prefill,decode", ..c("trtllm_serve in front of SGLang", format!("{PD_ONE_NODE}backend:\n  type: sglang\n  sglang_config: {{prefill: {{}}, decode: {{}}}}\nfrontend: {{type: trtllm_serve, enable_multiple_frontends: false}}\n"),
          &["frontend.type: trtllm_serve fronts TRT-LLM workers only; the engine is sglang", "fix: use frontend.type dynamo"]) },
        Case { roles: "prefill,decode", ..c("trtllm_serve router settings", format!("{PD_ONE_NODE}backend:\n  type: trtllm\nfrontend: {{type: trtllm_serve, enable_multiple_frontends: false, ctx_router: {{type: conversation}}}}\n"),
          &["frontend.ctx_router", "does not write it into trtllm-serve's ser.yaml", "fix:"]) },
        Case { roles: "prefill,decode", ..c("TRT-LLM sequential start below 0", format!("{PD_ONE_NODE}backend:\n  type: trtllm\n  sequential_node_start: -1\n"),
          &["backend.sequential_node_start", "is not a count of endpoints", "fix: write 0"]) },
        // Issue 56, item 3: a file of several jobs is not one recipe, and no placeholder
        // reaches a process.
        Case { roles: "prefill,decode", ..c("a sweep planned as one job", format!("name: s\nsweep: {{chunked_prefill_size: [4096, 8192]}}\n{PD_ONE_NODE}backend:\n  type: sglang\n  sglang_config: {{prefill: {{chunked-prefill-size: \"{{chunked_prefill_size}}\"}}, decode: {{}}}}\n"),
          &["sweep: this file is a sweep, several jobs as srtctl expands it (2 job(s): chunked_prefill_size=4096; chunked_prefill_size=8192)", "fix: `mcsup render -f", "-o DIR` writes each job's expanded recipe", "`mcsup submit -f"]) },
        Case { roles: "prefill,decode", ..c("an override file planned without a selector", format!("base:\n  name: o\n  {}  backend: {{type: sglang, sglang_config: {{prefill: {{}}, decode: {{}}}}}}\noverride_big: {{backend: {{sglang_config: {{decode: {{tp-size: 8}}}}}}}}\nzip_override_conc: {{benchmark: {{type: sa-bench, concurrencies: [[1], [2]]}}}}\n", PD_ONE_NODE),
          &["base: this file is an override file, `base:` and its variants (3 job(s): override_big; zip_override_conc[0]; zip_override_conc[1])", "fix: pick one variant with `", ":SELECTOR`"]) },
        Case { roles: "prefill,decode", ..c("a sweep parameter left in a single recipe", format!("name: s\n{PD_ONE_NODE}backend:\n  type: sglang\n  sglang_config: {{prefill: {{chunked-prefill-size: \"{{chunked_prefill_size}}\"}}, decode: {{}}}}\n"),
          &["backend.sglang_config.prefill.chunked-prefill-size", "`{chunked_prefill_size}` would reach sglang-prefill-0's argument `{chunked_prefill_size}` as written: nothing fills it", "fix: a sweep parameter? add it under `sweep:`"]) },
    ]
}

fn mcsup() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mcsup"))
}

fn run_plan(dir: &Path, recipe: &Path, roles: &str) -> (i32, String) {
    let out = mcsup()
        .current_dir(dir)
        .env_remove("MCSUP_ROLE")
        .env_remove("MCSUP_RECIPE")
        .env_remove("SLURM_JOB_ID")
        .env_remove("SLURM_JOB_NODELIST")
        .args(["plan", "--role", roles, "--recipe"])
        .arg(recipe)
        .args(["--node", "n1"])
        .output()
        .expect("run mcsup");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn base_recipe_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ok.yaml");
    std::fs::write(&p, BASE).unwrap();
    let (code, err) = run_plan(dir.path(), &p, "decode");
    assert_eq!(code, 0, "{err}");
}

#[test]
fn catalogue_of_bad_recipes() {
    let cases = cases();
    assert!(cases.len() >= 25);
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    // Every message as printed (the temp directory made `<dir>`): a change of wording shows in
    // review as a snapshot change.
    let mut messages = String::new();
    for (i, case) in cases.iter().enumerate() {
        let file = dir.path().join(format!("case{i:02}.yaml"));
        std::fs::write(&file, &case.yaml).unwrap();
        let (code, err) = run_plan(dir.path(), &file, case.roles);
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
        if !err.contains(&format!("case{i:02}.yaml")) {
            problems.push("message does not name the file".into());
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
    assert!(
        failures.is_empty(),
        "{} bad-recipe cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    insta::assert_snapshot!("bad_recipe_messages", messages);
}

#[test]
fn directory_missing_file_and_bad_roles() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = run_plan(dir.path(), dir.path(), "decode");
    assert_eq!(code, 2);
    assert!(
        err.contains("is a directory") && err.contains("fix:"),
        "{err}"
    );

    let (code, err) = run_plan(dir.path(), &dir.path().join("nope.yaml"), "decode");
    assert_eq!(code, 2);
    assert!(
        err.contains("nope.yaml") && err.contains("cannot read") && err.contains("fix:"),
        "{err}"
    );

    let ok = dir.path().join("ok.yaml");
    std::fs::write(&ok, BASE).unwrap();
    let (code, err) = run_plan(dir.path(), &ok, "storage");
    assert_eq!(code, 2);
    assert!(
        err.contains("--role") && err.contains("unknown role `storage`"),
        "{err}"
    );

    let bin = dir.path().join("bin.yaml");
    std::fs::write(&bin, [0xff, 0xfe, 0x00, 0x41]).unwrap();
    let (code, err) = run_plan(dir.path(), &bin, "decode");
    assert_eq!(code, 2);
    assert!(err.contains("not UTF-8"), "{err}");
}

#[test]
fn missing_role_and_recipe_are_usage_errors() {
    let out = mcsup()
        .env_remove("MCSUP_ROLE")
        .env_remove("MCSUP_RECIPE")
        .arg("plan")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("fix: pass --recipe"));
}
