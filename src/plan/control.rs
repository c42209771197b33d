//! The job's control connection in the plan ([`ControlSpec`]): which node coordinates, where it
//! listens, where the secret is. Every node of a job of several nodes plans the same one. Pure.

use std::path::Path;

use super::spec::ControlSpec;
use crate::node::NodeContext;
use crate::recipe::McsupSection;

/// `mcsup.control_port` when the recipe does not say: a free port, chosen by the coordinator
/// at start and written beside the secret.
pub const ANY_PORT: u16 = 0;

/// The secret's file name in the log directory.
pub const SECRET_FILE: &str = "control.secret";

/// The control connection of a job of several nodes (none for one node: nothing to tell).
pub fn spec(ctx: &NodeContext, mc: &McsupSection, log_dir: &Path) -> Option<ControlSpec> {
    if ctx.nodelist.len() < 2 {
        return None;
    }
    Some(ControlSpec {
        coordinator: ctx.infra_node.clone(),
        address: ctx.infra_ip.clone(),
        port: mc.control_port.map_or(ANY_PORT, |p| p.0),
        secret: log_dir.join(SECRET_FILE),
        nodes: ctx.nodelist.clone(),
        silent: crate::plan::ControlSpec::SILENT,
        stores_at_once: super::stores::places(mc, ctx.nodelist.len()),
    })
}
