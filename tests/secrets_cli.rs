//! Secrets through the real binary: `mcsup plan` (human and JSON) shows no secret value anywhere,
//! warnings included; a redacted JSON plan is marked and `run --plan-file` refuses it; the
//! `--show-secrets` plan runs and its child gets the real value. Non-secrets whose names contain
//! a secret word (`--max-prefill-tokens`, `*_TOKENS_*`) stay visible.

use crate::common;

use std::process::Command;

use common::{TestEnv, MCSUP};

const TOKEN: &str = "hf_S3cretS3cretS3cretS3cret0123";

fn recipe(env: &TestEnv) -> std::path::PathBuf {
    let out = env.path("seen.txt");
    let text = format!(
        r#"backend:
  type: sglang
  decode_environment:
    HF_TOKEN: "{TOKEN}"
    SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK: "4096"
  mooncake_kv_store:
    env:
      HF_TOKEN: "hf_AnotherS3cretAnotherS3cret99"
mcsup:
  log_dir: {logs}
  workers:
    decode:
      - name: w
        command: [sh, -c, 'printf %s "$HF_TOKEN" > {out}', sh, --max-prefill-tokens, "16384", --api-key, "k3y-value", --skip-tokenizer-init, --trust-remote-code]
        critical: false
  allow_empty_node: false
"#,
        logs = env.log_dir().display(),
        out = out.display(),
    );
    let path = env.path("job.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn mcsup(env: &TestEnv, args: &[&str]) -> std::process::Output {
    // The recipe runs the real master: the venv first on PATH.
    let path = format!(
        "{}:{}",
        common::recipe::venv_bin().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new(MCSUP)
        .args(args)
        .env("PATH", path)
        .env("MCSUP_TEST_TAG", &env.tag)
        .env_remove("SLURM_JOB_ID")
        .env_remove("SLURM_JOB_NODELIST")
        .current_dir(env.dir.path())
        .output()
        .unwrap()
}

#[test]
fn plans_hide_secrets_everywhere_and_a_redacted_plan_cannot_run() {
    let env = TestEnv::new();
    let r = recipe(&env);
    let r = r.to_str().unwrap();
    for extra in [&[][..], &["--json"][..]] {
        let out = mcsup(
            &env,
            &[&["plan", "--role", "decode", "--recipe", r][..], extra].concat(),
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(!text.contains("S3cret"), "a secret leaked:\n{text}");
        assert!(!text.contains("k3y-value"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
        // The override warning names the variable but not the values.
        assert!(text.contains("silently overrides"), "{text}");
        // Non-secrets stay visible, and a boolean flag hides nothing.
        assert!(
            text.contains("16384") && text.contains("--trust-remote-code"),
            "{text}"
        );
        assert!(
            text.contains("SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK=4096")
                || text.contains("\"4096\""),
            "{text}"
        );
    }

    // The redacted JSON is marked, and run refuses it before anything starts.
    let out = mcsup(&env, &["plan", "--role", "decode", "--recipe", r, "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["redacted"], serde_json::Value::Bool(true));
    let redacted = env.path("redacted.json");
    std::fs::write(&redacted, &out.stdout).unwrap();
    let run = mcsup(
        &env,
        &[
            "run",
            "--plan-file",
            redacted.to_str().unwrap(),
            "--skip-preflight",
        ],
    );
    assert_eq!(run.status.code(), Some(2));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("<redacted>") && err.contains("--show-secrets"),
        "{err}"
    );
    assert!(!env.path("seen.txt").exists(), "nothing may start");

    // With --show-secrets the plan runs, and the child sees the real (mooncake_kv_store) value.
    let out = mcsup(
        &env,
        &[
            "plan",
            "--role",
            "decode",
            "--recipe",
            r,
            "--json",
            "--show-secrets",
        ],
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json.get("redacted").is_none());
    let full = env.path("full.json");
    std::fs::write(&full, &out.stdout).unwrap();
    let run = mcsup(
        &env,
        &[
            "run",
            "--plan-file",
            full.to_str().unwrap(),
            "--skip-preflight",
        ],
    );
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(env.path("seen.txt")).unwrap(),
        "hf_AnotherS3cretAnotherS3cret99"
    );
    env.assert_no_leftovers();
}

/// Issue 29, class 6: a preamble's credentials are hidden too (assignments to secret names,
/// credential-shaped words, inside quotes), a newline in a value cannot forge a line of the text
/// plan, and a hand-edited plan with `<redacted>` in its preamble does not run.
#[test]
fn preambles_and_newlines_cannot_show_or_forge_a_secret() {
    let env = TestEnv::new();
    let sk = "sk-PreambleS3cretPreambleS3cret";
    let text = format!(
        r#"backend:
  type: sglang
mcsup:
  log_dir: {logs}
  workers:
    decode:
      - name: w
        command: [sh, -c, 'echo "$MY_NOTE" > {out}']
        preamble: |
          export MY_PASSWORD=hunter2-S3cret
          curl -s -H "Authorization: Bearer {sk}" http://127.0.0.1:9/ || true
        env:
          MY_NOTE: "first line\nHF_TOKEN=<redacted>"
        critical: false
"#,
        logs = env.log_dir().display(),
        out = env.path("seen.txt").display(),
    );
    let path = env.path("job.yaml");
    std::fs::write(&path, text).unwrap();
    let r = path.to_str().unwrap();
    for extra in [&[][..], &["--json"][..]] {
        let out = mcsup(
            &env,
            &[&["plan", "--role", "decode", "--recipe", r][..], extra].concat(),
        );
        let shown = String::from_utf8(out.stdout).unwrap();
        assert_eq!(out.status.code(), Some(0), "{shown}");
        assert!(!shown.contains("S3cret"), "a secret leaked:\n{shown}");
        assert!(shown.contains("MY_PASSWORD=<redacted>"), "{shown}");
        assert!(shown.contains("Bearer <redacted>"), "{shown}");
    }
    let human = String::from_utf8(mcsup(&env, &["plan", "--role", "decode", "--recipe", r]).stdout)
        .unwrap();
    // The value's second line stays inside its (escaped) value: no line of the plan starts with
    // it, and the preamble's lines are marked as the preamble's.
    assert!(
        !human
            .lines()
            .any(|l| l.trim_start().starts_with("HF_TOKEN=")),
        "a forged line:\n{human}"
    );
    assert!(
        human.contains(r#"MY_NOTE="first line\nHF_TOKEN=<redacted>""#),
        "{human}"
    );
    assert!(
        human.contains("     | export MY_PASSWORD=<redacted>"),
        "{human}"
    );

    // The full plan, hand-edited: a `<redacted>` put into the preamble is refused too.
    let out = mcsup(
        &env,
        &[
            "plan",
            "--role",
            "decode",
            "--recipe",
            r,
            "--json",
            "--show-secrets",
        ],
    );
    let mut json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["processes"][0]["preamble"]
        .as_str()
        .unwrap()
        .contains("hunter2-S3cret"));
    json["processes"][0]["preamble"] = "export MY_PASSWORD=<redacted>".into();
    let edited = env.path("edited.json");
    std::fs::write(&edited, serde_json::to_vec(&json).unwrap()).unwrap();
    std::fs::set_permissions(&edited, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let run = mcsup(
        &env,
        &[
            "run",
            "--plan-file",
            edited.to_str().unwrap(),
            "--skip-preflight",
        ],
    );
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert!(err.contains("<redacted>"), "{err}");
    assert!(!env.path("seen.txt").exists(), "nothing may start");
    env.assert_no_leftovers();
}
