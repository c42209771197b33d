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

/// Why the flags are there, for the plan's notes.
pub fn master_cleanup_note(added: &[String]) -> String {
    format!(
        "the master gets {}: mcsup restarts a store that fails, and a crashed store's transfer-engine metadata would otherwise stay in the master's HTTP metadata server after --client_ttl ({CLIENT_TTL_SECONDS} s, Mooncake's default) drops its segment (kvcache-ai/Mooncake #1363, #2498; the pinned 0.3.13.post1 has the flag, the preflight checks that the installed master accepts it); `mcsup.master.metadata_cleanup: false` leaves them out",
        added.join(" ")
    )
}

/// Is this argv Mooncake's store service (the program that has the client HTTP server)?
fn is_store_service(argv: &[String]) -> bool {
    argv.iter()
        .any(|a| a == "mooncake.mooncake_store_service" || a.ends_with("mooncake_store_service"))
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
            match p.readiness.as_ref().and_then(|r| r.probes.iter().find_map(|x| match x {
                ProbeSpec::MooncakeSegment(s) => Some(s),
                _ => None,
            })) {
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
        assert!(master_cleanup_note(&["--x".into()]).contains("#1363"));
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
