//! The start order: gates on what runs on other nodes (the Mooncake master, etcd, NATS) and the
//! processes of this node in srtctl 2.0's phases, infra → before_workers (the master first, then
//! the stores and other services) → with_workers and workers → frontend → after_frontend, each
//! phase waiting on the ones before it. Pure.

use std::collections::BTreeSet;
use std::time::Duration;

use super::frontends::FrontendPlan;
use super::kinds;
use super::model::*;
use super::policy::*;
use super::spec::*;
use crate::node::NodeContext;
use crate::recipe::*;

/// Where the job's clients find the Mooncake master: the infra node, or the `external:`
/// endpoint.
pub struct MasterAt<'m> {
    pub service: Option<&'m ServiceModel>,
    pub host: String,
    pub rpc: u16,
    pub external: bool,
}

impl<'m> MasterAt<'m> {
    pub fn of(model: &'m JobModel, ctx: &NodeContext) -> Self {
        let service = model.effective(ServiceType::MooncakeMaster);
        let rpc = model.master_ports[0];
        match service.and_then(|m| m.external.as_deref()).map(endpoint) {
            Some((host, port)) => Self {
                service,
                host,
                rpc: port.unwrap_or(rpc),
                external: true,
            },
            None => Self {
                service,
                host: ctx.infra_ip.clone(),
                rpc,
                external: false,
            },
        }
    }
}

/// What this node's phases wait on: gates on other nodes, and the names each phase depends on.
pub struct Waits {
    pub gates: Vec<GateSpec>,
    /// The master: the local process, or the gate on it.
    master: Option<String>,
    /// The infra phase: local etcd/NATS and the like, or the gates on them.
    infra: Vec<String>,
}

/// The gates on what runs elsewhere that this node's processes need: the master (for stores and
/// Mooncake clients), etcd and NATS (for every later phase).
#[allow(clippy::too_many_arguments)]
pub fn remote_waits(
    model: &JobModel,
    mc: &McsupSection,
    ctx: &NodeContext,
    master: &MasterAt,
    discovery: &[(&'static str, String, &ServiceModel)],
    services: &[ProcessSpec],
    worker_procs: &[ProcessSpec],
    fe: &FrontendPlan,
    warnings: &mut Vec<String>,
) -> Waits {
    let mut gates: Vec<GateSpec> = fe.gates.clone();
    let needs_master = model.mooncake.is_some()
        && (services.iter().any(|p| p.kind == ProcessKind::Store) || !worker_procs.is_empty());
    let mut master_dep: Option<String> = services
        .iter()
        .find(|p| p.kind == ProcessKind::Master)
        .map(|p| p.name.clone());
    if master_dep.is_none() && needs_master {
        let where_ = if master.external {
            "external"
        } else {
            ctx.infra_node.as_str()
        };
        let name = format!(
            "{}@{where_}",
            if model.spelling == Spelling::V2 {
                master
                    .service
                    .map_or("mooncake-master", |m| m.name.as_str())
            } else {
                "master"
            }
        );
        let mut probes = vec![tcp(&master.host, master.rpc)];
        if !master.external {
            probes.push(tcp(&master.host, model.master_ports[1]));
        }
        gates.push(remote_gate(
            &name,
            probes,
            Duration::from_secs_f64(master.service.map_or(120.0, |m| m.readiness.timeout_s)),
        ));
        master_dep = Some(name);
    } else if model.mooncake.is_none()
        && !worker_procs.is_empty()
        && mc.workers != WorkersConfig::default()
    {
        warnings.push("backend.mooncake_kv_store is not set: no Mooncake master or store is managed; only workers run".into());
    }
    let later_phases = !worker_procs.is_empty()
        || !fe.processes.is_empty()
        || services.iter().any(|p| p.phase != Phase::Infra);
    let mut infra: Vec<String> = services
        .iter()
        .filter(|p| p.phase == Phase::Infra)
        .map(|p| p.name.clone())
        .collect();
    for (var, _, svc) in discovery {
        let kind = if *var == "ETCD_ENDPOINTS" {
            ServiceType::Etcd
        } else {
            ServiceType::Nats
        };
        let local = services.iter().any(|p| {
            p.service
                .as_ref()
                .is_some_and(|o| o.r#type == kind.as_str())
        });
        if local || !later_phases {
            continue;
        }
        let (host, port, where_) = match &svc.external {
            Some(e) => {
                let (h, p) = endpoint(e);
                (h, p.unwrap_or(kinds::client_port(kind)), "external")
            }
            None => (
                ctx.infra_ip.clone(),
                discovery_port(svc),
                ctx.infra_node.as_str(),
            ),
        };
        let name = format!("{}@{where_}", svc.name);
        gates.push(remote_gate(
            &name,
            vec![tcp(&host, port)],
            Duration::from_secs_f64(svc.readiness.timeout_s),
        ));
        infra.push(name);
    }
    Waits {
        gates,
        master: master_dep,
        infra,
    }
}

/// This node's processes in phase order, each depending on what its phase waits for.
pub fn start_order(
    model: &JobModel,
    waits: &Waits,
    services: Vec<ProcessSpec>,
    worker_procs: Vec<ProcessSpec>,
    frontends: Vec<ProcessSpec>,
) -> Vec<ProcessSpec> {
    let names =
        |ps: &mut dyn Iterator<Item = &ProcessSpec>| ps.map(|p| p.name.clone()).collect::<Vec<_>>();
    let before = names(&mut services.iter().filter(|p| p.phase == Phase::BeforeWorkers));
    let worker_names = names(&mut worker_procs.iter());
    let frontend_names = names(&mut frontends.iter());
    let mut processes = Vec::new();
    for phase in [
        Phase::Infra,
        Phase::BeforeWorkers,
        Phase::WithWorkers,
        Phase::Workers,
        Phase::Frontend,
        Phase::AfterFrontend,
    ] {
        let members = match phase {
            Phase::Workers => worker_procs.clone(),
            Phase::Frontend => frontends.clone(),
            _ => {
                let mut m: Vec<ProcessSpec> = services
                    .iter()
                    .filter(|p| p.phase == phase)
                    .cloned()
                    .collect();
                // The master launches first in its phase (srtctl: implied services first).
                m.sort_by_key(|p| p.kind != ProcessKind::Master);
                m
            }
        };
        for mut p in members {
            let mut deps: Vec<String> = waits.infra.clone();
            match phase {
                Phase::Infra => deps.clear(),
                Phase::BeforeWorkers => {
                    if p.kind != ProcessKind::Master {
                        deps.extend(waits.master.iter().cloned());
                    }
                }
                Phase::WithWorkers | Phase::Workers => {
                    deps.extend(
                        waits
                            .master
                            .iter()
                            .filter(|_| model.mooncake.is_some())
                            .cloned(),
                    );
                    deps.extend(before.iter().cloned());
                    // A worker's own waits on workers of this node (TRT-LLM's
                    // sequential_node_start) come last.
                    deps.extend(p.depends_on.iter().map(|d| d.target.clone()));
                }
                // Infra first, then the frontend's own waits (plan::frontends: its workers here
                // and elsewhere, or nginx's frontends).
                Phase::Frontend => deps.extend(p.depends_on.iter().map(|d| d.target.clone())),
                Phase::AfterFrontend => {
                    if !frontend_names.is_empty() {
                        deps.extend(frontend_names.iter().cloned());
                    } else if worker_names.is_empty() {
                        deps.extend(before.iter().cloned());
                    } else {
                        deps.extend(worker_names.iter().cloned());
                    }
                }
            }
            let mut seen = BTreeSet::new();
            deps.retain(|d| *d != p.name && seen.insert(d.clone()));
            p.depends_on = deps.into_iter().flat_map(|d| healthy(Some(&d))).collect();
            processes.push(p);
        }
    }
    processes
}

/// Why `text` cannot be an `external:` endpoint, if it cannot: one or more comma-separated
/// `[scheme://]host[:port][/path]`, each with a host and, when given, a port from 1 to 65535,
/// and nothing a shell, an environment line or a probe would read differently (whitespace,
/// control characters, quotes, `;`, `$`, a backquote). The value goes into `ETCD_ENDPOINTS` /
/// `NATS_SERVER` as it is, while the gate probes the first endpoint's host and port.
pub(super) fn bad_endpoint(text: &str) -> Option<String> {
    if let Some(c) = text
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || "\"'`$;\\".contains(*c))
    {
        return Some(format!("{text:?} holds {c:?}"));
    }
    for one in text.split(',') {
        let rest = one.split_once("://").map_or(one, |(_, r)| r);
        let hostport = rest.split('/').next().unwrap_or(rest);
        let (host, port) = endpoint(one);
        if host.is_empty() {
            return Some(format!("{one:?} names no host"));
        }
        let port_text = match hostport.strip_prefix('[') {
            Some(r) => r.split_once(']').map(|(_, p)| p).unwrap_or(""),
            None => hostport.rsplit_once(':').map_or("", |(_, p)| p),
        };
        let port_text = port_text.trim_start_matches(':');
        if hostport.starts_with('[') && !hostport.contains(']') {
            return Some(format!("{one:?} opens a [ it does not close"));
        }
        if !port_text.is_empty() && port.is_none_or(|p| p == 0) {
            return Some(format!(
                "{one:?} has the port {port_text:?}, not one from 1 to 65535"
            ));
        }
    }
    None
}

/// `host` and optional port of an endpoint written as `host:port`, `http://host:port/...` or
/// `nats://host:port`.
fn endpoint(text: &str) -> (String, Option<u16>) {
    let t = text.trim();
    let t = t.split_once("://").map_or(t, |(_, rest)| rest);
    let t = t.split(['/', ',', ';']).next().unwrap_or(t);
    if let Some(rest) = t.strip_prefix('[') {
        if let Some((h, p)) = rest.split_once(']') {
            return (
                h.to_string(),
                p.strip_prefix(':').and_then(|p| p.parse().ok()),
            );
        }
    }
    match t.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h.to_string(), p.parse().ok()),
        _ => (t.to_string(), None),
    }
}

/// The client port of an etcd/NATS service: its probe's port, else the kind's.
fn discovery_port(svc: &ServiceModel) -> u16 {
    match svc.readiness.probe {
        Readiness::Tcp { port } | Readiness::Http { port, .. } => port,
        _ => kinds::client_port(svc.kind),
    }
}

/// `ETCD_ENDPOINTS` / `NATS_SERVER`, each only when such a service is effective (srtctl PR #439),
/// pointing at the infra node or the `external:` endpoint.
pub fn discovery_env<'m>(
    model: &'m JobModel,
    ctx: &NodeContext,
) -> Vec<(&'static str, String, &'m ServiceModel)> {
    let mut out = Vec::new();
    if let Some(e) = model.effective(ServiceType::Etcd) {
        let v = e
            .external
            .clone()
            .unwrap_or_else(|| format!("http://{}:{}", ctx.infra_ip, discovery_port(e)));
        out.push(("ETCD_ENDPOINTS", v, e));
    }
    if let Some(n) = model.effective(ServiceType::Nats) {
        let v = n
            .external
            .clone()
            .unwrap_or_else(|| format!("nats://{}:{}", ctx.infra_ip, discovery_port(n)));
        out.push(("NATS_SERVER", v, n));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_endpoints_are_checked_before_they_reach_an_environment() {
        for ok in [
            "http://10.0.0.9:2379",
            "nats://h1:4222,nats://h2:4222",
            "[fd00::1]:8700",
            "master.example",
            "etcd-0.svc:2379/v3",
        ] {
            assert_eq!(bad_endpoint(ok), None, "{ok}");
        }
        for (bad, says) in [
            ("a:1\nINJECTED=1", "holds '\\n'"),
            ("evil:2379; rm -rf /", "holds ';'"),
            ("[::1]:99999", "not one from 1 to 65535"),
            ("host:0", "not one from 1 to 65535"),
            ("http://:2379", "names no host"),
            ("h:2379,", "names no host"),
            ("[::1:2379", "does not close"),
        ] {
            let why = bad_endpoint(bad).unwrap_or_default();
            assert!(why.contains(says), "{bad:?}: {why}");
        }
    }

    #[test]
    fn endpoints_split_host_and_port() {
        assert_eq!(endpoint("10.0.0.9:8700"), ("10.0.0.9".into(), Some(8700)));
        assert_eq!(
            endpoint("http://10.0.0.9:2379"),
            ("10.0.0.9".into(), Some(2379))
        );
        assert_eq!(
            endpoint("nats://h1:4222,nats://h2:4222"),
            ("h1".into(), Some(4222))
        );
        assert_eq!(endpoint("[fd00::1]:8700"), ("fd00::1".into(), Some(8700)));
        assert_eq!(endpoint("master.example"), ("master.example".into(), None));
    }
}
