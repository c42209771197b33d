//! The docs state facts the code also holds; these tests keep the two from drifting. Each fact
//! has one source in the code, and the page that states it is checked against that source.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use mcsup::exit::ExitCode;
use mcsup::node::{self, MasterMode, NodeInputs};
use mcsup::plan::{self, ProcessKind, ProcessSpec, RestartPolicy, Role};

fn doc(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The rows of the markdown table under `heading`: first cell -> the other cells.
fn table_under(text: &str, heading: &str) -> BTreeMap<String, Vec<String>> {
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("no `{heading}`"));
    text[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // header and separator
        .map(|l| {
            let cells: Vec<String> = l
                .trim()
                .trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect();
            (cells[0].clone(), cells[1..].to_vec())
        })
        .collect()
}

#[test]
fn the_exit_code_table_is_the_exit_code_type() {
    let rows: BTreeMap<String, String> = table_under(&doc("docs/supervision.md"), "## Exit codes")
        .into_iter()
        .map(|(k, v)| (k, v.join(" | ")))
        .collect();
    let mut want: BTreeMap<String, String> = ExitCode::TABLE
        .iter()
        .map(|(c, meaning)| (c.code().to_string(), meaning.to_string()))
        .collect();
    want.insert("N, 128+S".into(), ExitCode::CHILD_MEANING.into());
    assert_eq!(rows, want);
}

/// A minimal recipe: every supervision setting left to its default.
const MINIMAL: &str = r#"
backend:
  type: sglang
  mooncake_kv_store:
    standalone:
      command: [python, -m, mooncake.mooncake_store_service]
      placements:
        aggregated:
          env: {MOONCAKE_GLOBAL_SEGMENT_SIZE: "1gb"}
mcsup:
  workers:
    aggregated:
      - name: w
        command: [sleep, "60"]
"#;

fn minimal_plan() -> plan::Plan {
    let r = mcsup::recipe::parse_str(Path::new("minimal.yaml"), MINIMAL).unwrap();
    let inputs = NodeInputs {
        hostname: "laptop".into(),
        cwd: "/job".into(),
        master: MasterMode::Auto,
        ..Default::default()
    };
    let ctx = node::resolve(&inputs, &BTreeMap::new(), &|_| None).unwrap();
    plan::plan(&r, &[Role::Aggregated], &ctx).unwrap()
}

fn of(p: &plan::Plan, kind: ProcessKind) -> &ProcessSpec {
    p.processes.iter().find(|x| x.kind == kind).unwrap()
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", s as u64)
    } else {
        format!("{s}")
    }
}

fn policy(p: RestartPolicy) -> &'static str {
    match p {
        RestartPolicy::Never => "never",
        RestartPolicy::OnFailure => "on-failure",
        RestartPolicy::Always => "always",
    }
}

/// docs/recipe.md's `mcsup:` key table states the defaults the planner applies.
#[test]
fn the_recipe_page_states_the_planners_defaults() {
    let text = doc("docs/recipe.md");
    let rows = table_under(&text, "## `mcsup:`");
    let default = |key: &str| -> String {
        rows.get(&format!("`{key}`"))
            .unwrap_or_else(|| panic!("docs/recipe.md has no row `{key}`"))[0]
            .clone()
    };
    let p = minimal_plan();
    let (master, store, worker) = (
        of(&p, ProcessKind::Master),
        of(&p, ProcessKind::Store),
        of(&p, ProcessKind::Worker),
    );

    // Ports.
    assert_eq!(
        default("master.rpc_port` / `metadata_port` / `metrics_port"),
        format!(
            "{} / {} / {}",
            mcsup::mooncake::DEFAULT_RPC_PORT,
            mcsup::mooncake::DEFAULT_METADATA_PORT,
            mcsup::mooncake::DEFAULT_METRICS_PORT
        )
    );
    assert!(master
        .argv
        .contains(&format!("--rpc_port={}", mcsup::mooncake::DEFAULT_RPC_PORT)));
    // The master's readiness timeout.
    assert_eq!(
        default("master.timeout_seconds"),
        secs(master.readiness.as_ref().unwrap().timeout)
    );
    // Stop signals and graces, per kind.
    let stop = default("master.stop`, `store.stop`, worker `stop");
    for (who, p) in [("master", master), ("store", store), ("workers", worker)] {
        let said = format!("{who} {} {} s", p.stop.signal, secs(p.stop.grace));
        assert!(
            stop.contains(&said),
            "docs/recipe.md says `{stop}`, the planner: `{said}`"
        );
    }
    // Restart policies, per kind, and the restart numbers.
    let restart = default("*.restart.policy");
    for (who, p) in [("master", master), ("store", store), ("workers", worker)] {
        let said = format!("{who} `{}`", policy(p.restart.policy));
        assert!(
            restart.contains(&said),
            "docs/recipe.md says `{restart}`, the planner: `{said}`"
        );
    }
    let r = &store.restart;
    assert_eq!(
        default("*.restart.backoff_initial_seconds` / `backoff_factor` / `backoff_max_seconds"),
        format!(
            "{} / {:.1} / {}",
            secs(r.backoff_initial),
            r.backoff_factor,
            secs(r.backoff_max)
        )
    );
    assert_eq!(
        default("*.restart.reset_after_seconds"),
        secs(r.reset_after)
    );
    assert_eq!(
        default("*.restart.max_restarts` / `window_seconds"),
        format!("{} / {}", r.max_restarts, secs(r.window))
    );
    assert_eq!(
        default("*.restart.success_codes"),
        format!("`{:?}`", r.success_codes)
    );
    // Shutdown.
    assert_eq!(
        default("shutdown.deadline_seconds"),
        secs(p.shutdown.deadline)
    );
    assert_eq!(
        default("shutdown.drain_signal"),
        format!("`{}`", p.shutdown.drain_signal)
    );
    assert_eq!(
        default("shutdown.exit_when_workers_done"),
        format!("`{}`", p.shutdown.exit_when_workers_done)
    );
    // The canary.
    let c = mcsup::plan::CanarySpec::default();
    assert_eq!(default("canary.enabled"), format!("`{}`", c.enabled));
    assert_eq!(
        default("canary.period_seconds` / `failure_threshold` / `timeout_seconds"),
        format!("{} / {} / {}", secs(c.period), c.threshold, secs(c.timeout))
    );
    assert_eq!(p.canary, c);
    // Engine liveness.
    assert_eq!(
        default("engine_liveness.period_seconds` / `timeout_seconds` / `failure_threshold"),
        format!(
            "{} / {} (25 for `/health_generate`) / {}",
            secs(mcsup::engine::liveness::PERIOD),
            secs(mcsup::engine::liveness::TIMEOUT),
            mcsup::engine::liveness::THRESHOLD
        )
    );
    assert_eq!(secs(mcsup::engine::liveness::GENERATE_TIMEOUT), "25");
    // Preflight headroom, workers.
    assert_eq!(
        default("preflight.headroom_gib"),
        (p.memory.headroom_bytes >> 30).to_string()
    );
    assert_eq!(
        default("workers.<role>[i].critical"),
        format!("`{}`", worker.critical)
    );
}

/// docs/recipe.md's example `mcsup:` section (every key, most with its default) is a valid
/// section for the real loader, which refuses unknown keys there.
#[test]
fn the_recipe_pages_mcsup_example_is_a_valid_section() {
    let text = doc("docs/recipe.md");
    let at = text.find("## `mcsup:`").unwrap();
    let block = text[at..]
        .split("```yaml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap();
    assert!(block.starts_with("mcsup:"), "{block}");
    let backend = MINIMAL.split("mcsup:").next().unwrap();
    let recipe = format!("{backend}{block}");
    if let Err(e) = mcsup::recipe::parse_str(Path::new("docs/recipe.md"), &recipe) {
        panic!("the example does not load: {e}\n{recipe}");
    }
    // And it is not vacuous: a misspelt key in the same place is refused.
    let bad = recipe.replacen("drain_signal:", "drian_signal:", 1);
    assert!(mcsup::recipe::parse_str(Path::new("bad.yaml"), &bad).is_err());
}

#[test]
fn the_job_view_page_states_where_a_large_job_starts() {
    let page = doc("docs/job-view.md");
    for fact in [
        format!(
            "every process up to {}; beyond, the ones that need a look",
            mcsup::render::FULL_TABLE_UP_TO
        ),
        format!(
            "one each up to {} nodes; beyond, nodes whose outcome reads the same share",
            mcsup::render::NODE_LINES_UP_TO
        ),
        format!(
            "In a\njob of more than {} processes only the groups and nodes",
            mcsup::render::OPEN_ALL_UP_TO
        ),
    ] {
        assert!(
            page.contains(&fact),
            "docs/job-view.md does not say: {fact}"
        );
    }
}
