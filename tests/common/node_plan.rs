//! A plan for one node of a three-node job `n[1-3]` (n1 = 10.0.0.1 is the infra node), from an
//! inline recipe: the pure plan tests' one way to plan. Included with `#[path]` by the test
//! binaries that need nothing else of `common`.

use std::collections::BTreeMap;
use std::path::Path;

use mcsup::node::{self, MasterMode, NodeInputs};
use mcsup::plan::{self, Plan, Role};
use mcsup::recipe;

fn dns(n: &str) -> Option<std::net::IpAddr> {
    let i: u8 = n.strip_prefix("n")?.parse().ok()?;
    format!("10.0.0.{i}").parse().ok()
}

/// Plan `yaml` for `node` with `roles` (job 5, working directory `/w`).
pub fn plan_on(yaml: &str, node: &str, roles: &[Role]) -> Result<Plan, plan::PlanError> {
    plan_in(yaml, node, "n[1-3]", roles)
}

/// [`plan_on`] in a job of the nodes of `nodelist` (Slurm's form).
pub fn plan_in(
    yaml: &str,
    node: &str,
    nodelist: &str,
    roles: &[Role],
) -> Result<Plan, plan::PlanError> {
    let r = recipe::parse_str(Path::new("t.yaml"), yaml).expect("recipe parses");
    let inputs = NodeInputs {
        node: Some(node.into()),
        nodelist: Some(nodelist.into()),
        job_id: Some("5".into()),
        hostname: "x".into(),
        cwd: "/w".into(),
        tmp_dir: "/scratch".into(),
        master: MasterMode::Auto,
        ..Default::default()
    };
    let ctx = node::resolve(&inputs, &BTreeMap::new(), &dns).unwrap();
    plan::plan(&r, roles, &ctx)
}
