//! What Mooncake itself says about a store, wired into its plan: ready only when the master
//! lists its segment under its name at the planned size and protocol (after its REST port
//! answers), alive while its own client `/health` answers (a managed
//! `MOONCAKE_CLIENT_HTTP_PORT`), and the master options a supervisor that restarts stores owes
//! them. Pure.
//!
//! Sources (the pinned `mooncake-transfer-engine-non-cuda` 0.3.13.post1, measured on loopback):
//! the store service starts the client HTTP server when `MOONCAKE_ENABLE_CLIENT_HTTP_SERVER` is
//! true (`mooncake_config.py` `load_from_env`, default port 9300); `/health` answers 200
//! `{"status":"healthy"}` or 503 `{"status":"master_unreachable"}` within a second of the master's
//! death (`real_client.cpp` `health_check`); a port it cannot bind is only a warning ("continuing
//! without HTTP endpoints"). The master's `--enable_metadata_cleanup_on_timeout` removes a dead
//! client's transfer-engine metadata when `--client_ttl` drops its segment (kvcache-ai/Mooncake
//! #1363, #2498).

use super::spec::*;
use crate::domain::flag_value;
use crate::mooncake::segments::host_part;
use crate::mooncake::{self, size};

/// Mooncake's default client HTTP port (`mooncake_config.py`): the first store of a node gets
/// it, the next ones the ports after it, unless `mcsup.store.client_http_port` moves the base.
pub const DEFAULT_CLIENT_HTTP_PORT: u16 = 9300;
pub const ENABLE_CLIENT_HTTP: &str = "MOONCAKE_ENABLE_CLIENT_HTTP_SERVER";
pub const CLIENT_HTTP_PORT: &str = "MOONCAKE_CLIENT_HTTP_PORT";

/// What the master must show, where it answers: its admin server (`--metrics_port`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterAdmin {
    pub host: String,
    pub port: u16,
}

/// The master flags mcsup adds when it may restart stores, and the client TTL it states.
pub const CLIENT_TTL_SECONDS: u32 = 10;

/// The flags to add to a master's argv (those it does not set already); none when the program
/// is not `mooncake_master` itself (a wrapper's arguments are its own).
pub fn master_cleanup_flags(argv: &[String]) -> Vec<String> {
    let program = argv.first().map(|a| a.rsplit('/').next().unwrap_or(a));
    if program != Some(mooncake::MASTER_PROGRAM) {
        return Vec::new();
    }
    let has = |flag: &str| {
        argv.iter()
            .any(|a| a == &format!("--{flag}") || a.starts_with(&format!("--{flag}=")))
    };
    let mut out = Vec::new();
    if !has("enable_metadata_cleanup_on_timeout") {
        out.push("--enable_metadata_cleanup_on_timeout=true".to_string());
    }
    if !has("client_ttl") {
        out.push(format!("--client_ttl={CLIENT_TTL_SECONDS}"));
    }
    out
}

/// The flags mcsup added at the end of `argv` (see [`master_cleanup_flags`]), if any.
pub fn master_cleanup_added(argv: &[String]) -> Vec<String> {
    (1..=2.min(argv.len()))
        .rev()
        .map(|k| argv.split_at(argv.len() - k))
        .find(|(before, tail)| master_cleanup_flags(before) == *tail)
        .map(|(_, tail)| tail.to_vec())
        .unwrap_or_default()
}

/// Add [`master_cleanup_flags`] to a master's argv, unless `mcsup.master.metadata_cleanup` is
/// false.
pub fn add_cleanup_flags(argv: &mut Vec<String>, master: &crate::recipe::MasterConfig) {
    if master.metadata_cleanup != Some(false) {
        let added = master_cleanup_flags(argv);
        argv.extend(added);
    }
}

/// Why the flags are there, for the plan's notes: `joining` stores may register at once.
pub fn master_cleanup_note(added: &[String], joining: u32) -> String {
    let ttl = client_ttl(joining);
    let why_ttl = if ttl == CLIENT_TTL_SECONDS {
        format!("{ttl} s, Mooncake's default")
    } else {
        format!("{ttl} s: {TTL_PER_JOINING_STORE} s for each of the {joining} stores that may register at once, above Mooncake's default {CLIENT_TTL_SECONDS} s, so that a master busy with their joins expires no client (kvcache-ai/Mooncake#3937, #4181)")
    };
    format!(
        "the master gets {}: mcsup restarts a store that fails, and a crashed store's transfer-engine metadata would otherwise stay in the master's HTTP metadata server after --client_ttl ({why_ttl}) drops its segment (kvcache-ai/Mooncake #1363, #2498; the pinned 0.3.13.post1 has the flag, the preflight checks that the installed master accepts it); `mcsup.master.metadata_cleanup: false` leaves them out",
        added.join(" ")
    )
}

/// `mcsup.store.register_at_once` when the recipe does not say: below the burst of 12 joining
/// clients that made healthy clients miss their heartbeats in kvcache-ai/Mooncake#4181.
pub const REGISTER_AT_ONCE: u32 = 8;

/// What the master's `--client_ttl` must outlast per store registering at the same time: a
/// master that takes a join under its client lock answers no heartbeat meanwhile
/// (kvcache-ai/Mooncake#3937). An allowance, not a measurement: a site that knows its master's
/// join time sets `--client_ttl` in the master's args, which mcsup then leaves alone.
pub const TTL_PER_JOINING_STORE: u32 = 2;

/// The limit the coordinator keeps on a job of `nodes` nodes: 0 (none) when the recipe turns it
/// off or the job has no more nodes than the limit (one store per node cannot exceed it).
pub fn places(mc: &crate::recipe::McsupSection, nodes: usize) -> u32 {
    let k = mc.store.register_at_once.unwrap_or(REGISTER_AT_ONCE);
    if k == 0 || nodes <= k as usize {
        0
    } else {
        k
    }
}

/// The gate that holds this node's stores until the coordinator gives them their place (a job
/// with a limit: `control.stores_at_once` > 0), each store depending on it; and what the plan
/// says of it. Its bound: one store readiness per round of places the job's nodes need.
pub fn wait_for_places(
    processes: &mut [ProcessSpec],
    control: Option<&ControlSpec>,
) -> Option<(GateSpec, String)> {
    let c = control.filter(|c| c.stores_at_once > 0)?;
    let stores: Vec<&ProcessSpec> = processes
        .iter()
        .filter(|p| p.kind == ProcessKind::Store)
        .collect();
    let each = stores
        .iter()
        .filter_map(|p| p.readiness.as_ref().map(|r| r.timeout))
        .max()?;
    let rounds = c.nodes.len().div_ceil(c.stores_at_once as usize) as u32;
    let name = format!("store-places@{}", c.coordinator);
    let gate = super::policy::remote_gate(
        &name,
        vec![ProbeSpec::StorePlace {
            coordinator: c.coordinator.clone(),
            at_once: c.stores_at_once,
        }],
        each.saturating_mul(rounds),
    );
    let note = format!(
        "stores: at most {k} of the job's stores register with the Mooncake master at a time (mcsup.store.register_at_once; {n} nodes): this node's {m} wait for their place from the coordinator on {coord} (`{name}`, at most {rounds} x {each} s), and hold it until the master lists them at their size; a master busy with more joins than its client_ttl allows expires every client (kvcache-ai/Mooncake#3937, #4181)",
        k = c.stores_at_once,
        n = c.nodes.len(),
        m = stores.len(),
        coord = c.coordinator,
        each = each.as_secs(),
    );
    for p in processes
        .iter_mut()
        .filter(|p| p.kind == ProcessKind::Store)
    {
        p.depends_on.push(DependencySpec {
            target: name.clone(),
            condition: DependencyCondition::Healthy,
        });
    }
    Some((gate, note))
}

/// The `--client_ttl` a master needs when up to `joining` stores register with it at once:
/// Mooncake's default, or [`TTL_PER_JOINING_STORE`] per store when that is longer.
pub fn client_ttl(joining: u32) -> u32 {
    CLIENT_TTL_SECONDS.max(joining.saturating_mul(TTL_PER_JOINING_STORE))
}

/// The number of stores that may join the master at once in a job of `nodes` nodes under the
/// limit `at_once` (0: none), counting one store per node.
pub fn joining_at_once(nodes: usize, at_once: u32) -> u32 {
    let nodes = u32::try_from(nodes).unwrap_or(u32::MAX);
    if at_once == 0 {
        nodes
    } else {
        nodes.min(at_once)
    }
}

/// Set the `--client_ttl` mcsup added (`added`, from [`master_cleanup_added`]) to `ttl`, in
/// the argv and in `added`.
pub fn set_added_ttl(argv: &mut [String], added: &mut [String], ttl: u32) {
    let flag = format!("--client_ttl={CLIENT_TTL_SECONDS}");
    let new = format!("--client_ttl={ttl}");
    let from = argv.len() - added.len();
    for a in argv[from..].iter_mut().chain(added.iter_mut()) {
        if *a == flag {
            a.clone_from(&new);
        }
    }
}

/// Is this argv Mooncake's store service (the program that has the client HTTP server)?
fn is_store_service(argv: &[String]) -> bool {
    argv.iter().any(|a| a.ends_with("mooncake_store_service"))
}

/// Wire the checks into this node's stores, in plan order: the registration probe (when the
/// store has a readiness and the master's admin server is known) and the `/health` liveness
/// (when the store is Mooncake's store service and the recipe neither disables its HTTP server
/// nor gives its own liveness: `mcsup.store.liveness`, `mcsup.services.<name>.liveness`).
/// Returns the notes to print.
pub fn wire(
    processes: &mut [ProcessSpec],
    admin: Option<&MasterAdmin>,
    port_base: u16,
) -> Vec<String> {
    let mut notes = Vec::new();
    let mut next_port = port_base;
    for p in processes
        .iter_mut()
        .filter(|p| p.kind == ProcessKind::Store)
    {
        if let (Some(a), true) = (admin, p.readiness.is_some()) {
            let size = p.env_value(mooncake::env::CONFIG_PATH).is_none().then(|| {
                mooncake::remount::store_segment_bytes(
                    p.env_value(mooncake::env::GLOBAL_SEGMENT_SIZE),
                )
            });
            let probe = ProbeSpec::MooncakeSegment(SegmentProbe {
                master_host: a.host.clone(),
                admin_port: a.port,
                hostname: p
                    .env_value(mooncake::env::LOCAL_HOSTNAME)
                    .unwrap_or("localhost")
                    .to_string(),
                size_bytes: size,
                protocol: p
                    .env_value(mooncake::env::PROTOCOL)
                    .unwrap_or("tcp")
                    .to_ascii_lowercase(),
            });
            if let Some(r) = p.readiness.as_mut() {
                r.probes.push(probe);
            }
        }
        if p.liveness.is_some() || !is_store_service(&p.argv) {
            continue;
        }
        let enabled = p
            .env_value(ENABLE_CLIENT_HTTP)
            .map(|v| v.trim().to_ascii_lowercase());
        if enabled
            .as_deref()
            .is_some_and(|v| !matches!(v, "true" | "1" | "yes" | "on"))
        {
            continue; // the recipe turned the server off
        }
        let port = match p.env_value(CLIENT_HTTP_PORT).map(str::parse::<u16>) {
            Some(Ok(port)) => port,
            Some(Err(_)) => continue, // the store would fail on it; not ours to guess
            None => {
                let port = next_port;
                next_port = next_port.saturating_add(1);
                set_env(p, CLIENT_HTTP_PORT, port.to_string());
                port
            }
        };
        if enabled.is_none() {
            set_env(p, ENABLE_CLIENT_HTTP, "true".into());
        }
        p.liveness = Some(LivenessSpec {
            probe: ProbeSpec::MooncakeHealth {
                host: "127.0.0.1".into(),
                port,
            },
            period: std::time::Duration::from_secs(1),
            attempt_timeout: std::time::Duration::from_secs(1),
            failure_threshold: 3,
        });
        notes.push(format!(
            "{}: liveness is the store's own /health on port {port} (503 master_unreachable is an event, not a restart: the store remounts when the master is back); readiness waits until the master lists its segment{}",
            p.name,
            match p.segment_probe() {
                Some(s) => format!(
                    " at {} over {}",
                    s.size_bytes.map_or("the config file's size".into(), |b| size::Bytes(b).to_string()),
                    s.protocol
                ),
                None => " (not checked: no readiness, or the master's admin port is unknown)".into(),
            }
        ));
    }
    notes
}

/// `MOONCAKE_MASTER` for a Mooncake client: mcsup's master, unless an earlier layer gave an HA
/// address (`etcd://...`), which passes through ([`lints`] says so): overriding it would point
/// the client at one master and lose the failover.
pub fn set_master(env: &mut super::env::EnvBuilder, addr: &str) {
    let ha = env
        .get(mooncake::env::MASTER)
        .is_some_and(|v| mooncake::is_ha_master_address(&v.value));
    if !ha {
        env.set(mooncake::env::MASTER, addr.to_string(), "forced");
    }
}

/// Lints on this node's Mooncake clients, each with its source:
/// - an HA master address (`etcd://...`) in a client's environment, passed through;
/// - vLLM workers with `MooncakeStoreConnector` and Python's built-in block hash but no
///   `PYTHONHASHSEED`, or different seeds: each process hashes the same prefix differently and
///   the shared store's hit rate is silently 0 (Mooncake's llm-d/vLLM integration guide;
///   vllm-ascend's KV-pool guide asks for one PYTHONHASHSEED on every node);
/// - a `local_first` master (`--allocation_strategy`) whose clients on this node register under
///   another host than the node's store: "local" is judged by the host part, so nothing is local
///   (Mooncake `allocation_strategy.h` `LocalFirst`, via the segment name).
pub fn lints(
    processes: &[ProcessSpec],
    master_argv: Option<&[String]>,
    warnings: &mut Vec<String>,
) {
    for p in processes {
        if let Some(v) = p
            .env
            .iter()
            .find(|v| v.name == mooncake::env::MASTER && mooncake::is_ha_master_address(&v.value))
        {
            warnings.push(format!(
                "{}: MOONCAKE_MASTER={} ({}) is a Mooncake HA address: passed through as written, not replaced by mcsup's master; the clients find the leader through that backend, so the master mcsup starts must belong to that HA group (--enable_ha with the same backend) or be disabled (source: Mooncake deployment guide §HA)",
                p.name, v.value, v.source
            ));
        }
    }
    let store_connector: Vec<&ProcessSpec> = processes
        .iter()
        .filter(|p| p.kind == ProcessKind::Worker)
        .filter(|p| p.argv.iter().any(|a| a.contains("MooncakeStoreConnector")))
        .filter(|p| {
            // A sha256 block hash does not depend on the seed.
            !flag_value(&p.argv, "prefix-caching-hash-algo")
                .is_some_and(|v| v.starts_with("sha256"))
        })
        .collect();
    let unseeded: Vec<&str> = store_connector
        .iter()
        .filter(|p| p.env_value("PYTHONHASHSEED").is_none())
        .map(|p| p.name.as_str())
        .collect();
    if !unseeded.is_empty() {
        warnings.push(format!(
            "{}: vLLM's MooncakeStoreConnector keys blocks with Python's built-in hash, which is salted per process unless PYTHONHASHSEED is fixed: workers sharing the store would never hit each other's blocks (hit rate silently 0); set PYTHONHASHSEED to one value for every worker of the job (backend.environment), or --prefix-caching-hash-algo sha256 (sources: Mooncake's vLLM/llm-d integration guide; vllm-ascend docs/source/user_guide/feature_guide/kv_pool.md, \"synchronize the PYTHONHASHSEED environment variable across all nodes\")",
            unseeded.join(", ")
        ));
    }
    let seeds: std::collections::BTreeSet<&str> = store_connector
        .iter()
        .filter_map(|p| p.env_value("PYTHONHASHSEED"))
        .collect();
    if seeds.len() > 1 {
        warnings.push(format!(
            "vLLM MooncakeStoreConnector workers on this node use different PYTHONHASHSEED values ({}): their block hashes differ and they never share cached blocks; give every worker the same seed",
            seeds.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    if master_argv.and_then(|a| flag_value(a, "allocation_strategy")) != Some("local_first") {
        return;
    }
    let stores: std::collections::BTreeSet<&str> = processes
        .iter()
        .filter(|p| p.kind == ProcessKind::Store)
        .filter_map(|p| p.env_value(mooncake::env::LOCAL_HOSTNAME))
        .map(host_part)
        .collect();
    if stores.is_empty() {
        return;
    }
    for p in processes.iter().filter(|p| p.kind == ProcessKind::Worker) {
        let named = p
            .env_value(mooncake::env::REQUESTER_LOCAL_HOSTNAME)
            .or(p.env_value(mooncake::env::LOCAL_HOSTNAME));
        if let Some(h) = named.map(host_part).filter(|h| !stores.contains(h)) {
            warnings.push(format!(
                "{}: the master allocates local_first, but this worker registers as {h} while this node's store registers as {}: the master matches them by host part, so no allocation is local; give both the same MOONCAKE_LOCAL_HOSTNAME host (source: Mooncake allocation_strategy local_first)",
                p.name,
                stores.iter().copied().collect::<Vec<_>>().join(", ")
            ));
        }
    }
}

fn set_env(p: &mut ProcessSpec, name: &str, value: String) {
    p.env.retain(|v| v.name != name);
    p.env.push(EnvVar {
        name: name.into(),
        value,
        source: "mcsup (store liveness)".into(),
        overrode: Vec::new(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cleanup_flags_are_added_unless_the_recipe_sets_them() {
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            master_cleanup_flags(&argv(&["mooncake_master", "--rpc_port=1"])),
            [
                "--enable_metadata_cleanup_on_timeout=true",
                "--client_ttl=10"
            ]
        );
        assert_eq!(
            master_cleanup_flags(&argv(&[
                "mooncake_master",
                "--client_ttl=30",
                "--enable_metadata_cleanup_on_timeout=false"
            ])),
            Vec::<String>::new()
        );
        assert_eq!(
            master_cleanup_flags(&argv(&["mooncake_master", "--client_ttl", "30"])),
            ["--enable_metadata_cleanup_on_timeout=true"]
        );
        assert!(master_cleanup_note(&["--x".into()], 2).contains("#1363"));
        assert_eq!(
            master_cleanup_flags(&argv(&["/opt/mc/bin/wrap.sh", "--rpc_port=1"])),
            Vec::<String>::new(),
            "a wrapper's arguments are its own"
        );
        let mut full = argv(&["/usr/bin/mooncake_master", "--rpc_port=1"]);
        full.extend(master_cleanup_flags(&full));
        assert_eq!(master_cleanup_added(&full).len(), 2);
        assert_eq!(
            master_cleanup_added(&argv(&[
                "mooncake_master",
                "--client_ttl=30",
                "--enable_metadata_cleanup_on_timeout=true"
            ])),
            ["--enable_metadata_cleanup_on_timeout=true"],
            "the recipe's own ttl is not mcsup's"
        );
        assert!(master_cleanup_added(&argv(&["mooncake_master", "--rpc_port=1"])).is_empty());
    }
}
