//! Fuzz the whole pipeline on recipes that parse: node resolution with the recipe's
//! `mcsup.node_addresses`, `plan::plan` for every role alone and a co-located prefill+decode pair,
//! on a fixed two-node Slurm context and a local one, then both renderers. Every input also goes
//! through `migrate::migrate` (v1 -> 2.0). Any panic is a bug.
#![no_main]

use std::collections::BTreeMap;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use mcsup::node::{self, MasterMode, NodeInputs};
use mcsup::plan::{self, Role};
use mcsup::{migrate, recipe, render, mooncake::size};

/// The node contexts tried on every recipe: the second node of a two-node Slurm job (the master
/// runs elsewhere), its infra node, and a single local machine. No DNS: names do not resolve.
fn inputs() -> [NodeInputs; 3] {
    let slurm = |node: &str| NodeInputs {
        node: Some(node.into()),
        nodelist: Some("gpu-[01-02]".into()),
        job_id: Some("4242".into()),
        hostname: "laptop".into(),
        cwd: "/job".into(),
        master: MasterMode::Auto,
        ..Default::default()
    };
    [
        slurm("gpu-02"),
        slurm("gpu-01"),
        NodeInputs { hostname: "laptop".into(), cwd: "/work".into(), ..Default::default() },
    ]
}

const ROLE_SETS: [&[Role]; 4] = [
    &[Role::ALL[0]],
    &[Role::ALL[1]],
    &[Role::ALL[2]],
    // Co-located prefill + decode on one node.
    &[Role::Prefill, Role::Decode],
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = size::parse_mooncake_size(text);
    // The v1 -> 2.0 migrator (`mcsup migrate`): Ok or Err, never a panic; its error must render.
    if let Err(e) = migrate::migrate(Path::new("fuzz.yaml"), text) {
        let _ = e.to_string();
    }
    let Ok(recipe) = recipe::parse_str(Path::new("fuzz.yaml"), text) else { return };

    let addresses: BTreeMap<String, String> =
        recipe.mcsup.as_ref().map(|m| m.node_addresses.clone()).unwrap_or_default();
    for inp in inputs() {
        let ctx = match node::resolve(&inp, &addresses, &|_| None) {
            Ok(c) => c,
            Err(e) => {
                let _ = e.to_string();
                continue;
            }
        };
        for roles in ROLE_SETS {
            match plan::plan(&recipe, roles, &ctx) {
                Ok(p) => {
                    let _ = render::plan_human(&p, false);
                    let _ = render::plan_human(&p, true);
                    let _ = render::plan_json(&p, false);
                    let _ = render::plan_json(&p, true);
                }
                Err(e) => {
                    let _ = e.to_string();
                }
            }
        }
    }
});
