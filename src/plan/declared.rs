//! One `services:` entry (srtctl 2.0's `ServiceConfig`) read into a [`ServiceModel`], with
//! srtctl's validation rules, each error naming the entry's key path. Pure.

use super::error::{err, PlanError};
use super::kinds::{self, KindDefaults};
use super::model::{master_base_argv, Place, Readiness, ReadinessModel, ServiceModel};
use crate::mooncake;
use crate::recipe::*;

/// One declared `services:` entry, with srtctl's per-entry rules.
pub(super) fn declared_service(
    s: &ServiceConfig,
    key: &str,
    mc: &McsupSection,
    configs_dir: &str,
    master_ports: [u16; 3],
) -> Result<ServiceModel, PlanError> {
    let d: KindDefaults = kinds::defaults(s.kind);
    let c = Declared {
        s,
        key,
        label: format!("services[{}]", s.name),
        d: &d,
    };
    c.check_command()?;
    c.check_source_and_external()?;
    let (node, per_worker) = c.placement()?;
    c.check_options()?;
    let runnable = c.runnable();
    let recorded = c.recorded(runnable.is_ok());
    let t = s.kind;
    let mut env = Vec::new();
    if t == ServiceType::MooncakeMaster && !mc.master.env.is_empty() {
        env.push(("mcsup.master.env".to_string(), mc.master.env.clone()));
    }
    env.push((format!("{key}.env"), s.env.clone()));
    Ok(ServiceModel {
        name: s.name.clone(),
        kind: t,
        key: key.to_string(),
        implied_by: None,
        enabled: s.enabled,
        external: s.external.clone(),
        argv: c.argv(mc, configs_dir, master_ports),
        preamble: match (kinds::kind_preamble(t, &s.options), &s.preamble) {
            (Some(k), Some(r)) => Some(format!("{k}\n{r}")),
            (k, r) => k.or(r.clone()),
        },
        env,
        place: Place::Node { node, per_worker },
        start: s.start.unwrap_or(d.start),
        readiness: c.readiness(mc),
        inherit_discovery_env: s.inherit_discovery_env,
        critical: s.critical.unwrap_or(d.critical),
        listens: match &s.command {
            None => kinds::listen_port(t, &s.options).into_iter().collect(),
            Some(_) => Vec::new(),
        },
        terminal: s.terminal,
        runnable,
        recorded,
    })
}

/// One `services:` entry being read, with its key path and its kind's defaults.
struct Declared<'a> {
    s: &'a ServiceConfig,
    key: &'a str,
    label: String,
    d: &'a KindDefaults,
}

impl Declared<'_> {
    /// `command`, `args` and `build_command` as srtctl's schema accepts them.
    fn check_command(&self) -> Result<(), PlanError> {
        let (s, key, label, d, t) = (self.s, self.key, &self.label, self.d, self.s.kind);
        if let Some(c) = &s.command {
            if c.0.is_empty() {
                return Err(err(format!("{key}.command"), format!("{label}.command, if set, must be non-empty (omit it to use the type's default)"), "remove `command:` or give the program and its arguments"));
            }
        } else if d.command.is_empty() && !d.builds_command {
            return Err(err(
            format!("{key}.command"),
            format!("{label}.command is required for type {:?}", t.as_str()),
            "give the program and its arguments as a list, e.g. command: [python3, -m, my.service]",
        ));
        }
        let command: &[String] = s.command.as_ref().map_or(&[], |c| &c.0);
        for (field, words) in [("command", command), ("args", &s.args.0[..])] {
            if let Some(i) = words.iter().position(|a| a.is_empty()) {
                return Err(err(
                    format!("{key}.{field}[{i}]"),
                    format!("{label}.command/args must not contain empty arguments"),
                    "remove the empty \"\" items",
                ));
            }
        }
        if s.build_command.as_ref().is_some_and(|b| b.0.is_empty()) {
            return Err(err(
                format!("{key}.build_command"),
                format!(
                    "{label}.build_command, if set, must be non-empty (omit it entirely instead)"
                ),
                "remove `build_command:` or give the build argv",
            ));
        }
        if s.cpus_per_task.is_some_and(|n| n <= 0) {
            return Err(err(
                format!("{key}.cpus_per_task"),
                format!("{label}.cpus_per_task must be positive"),
                "use a whole number of CPUs, 1 or more",
            ));
        }
        if s.build_timeout_seconds.is_some_and(|n| n <= 0) {
            return Err(err(
                format!("{key}.build_timeout_seconds"),
                format!("{label}.build_timeout_seconds must be positive"),
                "use a number of seconds, 1 or more (default 1800)",
            ));
        }
        Ok(())
    }

    /// `source` pinned to an immutable ref; `external` only where the kind allows it.
    fn check_source_and_external(&self) -> Result<(), PlanError> {
        let (s, key, label, d, t) = (self.s, self.key, &self.label, self.d, self.s.kind);
        if let Some(src) = &s.source {
            if src.git.trim().is_empty() {
                return Err(err(
                    format!("{key}.source.git"),
                    "services[].source.git must be a non-empty repository URL",
                    "give the repository URL",
                ));
            }
            let rev = src.rev.trim();
            if rev.is_empty() {
                return Err(err(
                    format!("{key}.source.rev"),
                    "services[].source.rev must be a non-empty immutable ref",
                    "give a commit SHA, a tag, or refs/pull/<n>/head",
                ));
            }
            if ["main", "master", "HEAD"].contains(&rev) {
                return Err(err(format!("{key}.source.rev"), format!("services[].source.rev must be an immutable ref (commit SHA, tag, or refs/pull/<n>/head), not a moving branch name: {rev:?}"), "pin a commit SHA or a tag"));
            }
        }
        if let Some(ext) = &s.external {
            if ext.trim().is_empty() {
                return Err(err(
                    format!("{key}.external"),
                    format!("{label}.external must be a non-empty endpoint"),
                    "give the service's address, e.g. etcd: http://10.0.0.9:2379",
                ));
            }
            if let Some(why) = super::order::bad_endpoint(ext.trim()) {
                return Err(err(
                    format!("{key}.external"),
                    format!("{label}.external {why}"),
                    "give the endpoint as its clients dial it, e.g. http://10.0.0.9:2379 (several: comma-separated)",
                ));
            }
            if !d.supports_external {
                return Err(err(
                    format!("{key}.external"),
                    format!(
                        "{label}.external is only valid for discovery-plane kinds, not {:?}",
                        t.as_str()
                    ),
                    "external works for etcd, nats and mooncake-master; remove `external:`",
                ));
            }
            if s.terminal {
                return Err(err(
                    format!("{key}.terminal"),
                    format!("{label}.terminal cannot be set on an external service"),
                    "remove `terminal:`: mcsup launches nothing for an external service",
                ));
            }
        }
        Ok(())
    }

    /// The node the service is placed on and whether it runs once per worker, with srtctl's
    /// rules (a `placement:` block without `node` means `head`; `nodes` owns a pool).
    fn placement(&self) -> Result<(PlacementNode, bool), PlanError> {
        let (s, key, label, d, t) = (self.s, self.key, &self.label, self.d, self.s.kind);
        let placement = s.placement.clone();
        let pool = placement.as_ref().and_then(|p| p.pool.clone());
        if let Some(p) = &placement {
            if p.node.is_some() && p.pool.is_some() {
                return Err(err(
                    format!("{key}.placement"),
                    "services[].placement: give either node or pool, not both",
                    "keep `node:` or `pool:`",
                ));
            }
            if p.pool.is_some() && p.per == Some(Per::Worker) {
                return Err(err(
                    format!("{key}.placement.per"),
                    "services[].placement.per: worker attaches to engine workers, not to a pool",
                    "drop `per: worker` or `pool:`",
                ));
            }
        }
        // srtctl: a `placement:` block without `node` gets the dataclass default `head`, not the kind's.
        let mut node = match &placement {
            None => d.placement,
            Some(p) => p.node.unwrap_or(PlacementNode::Head),
        };
        if let Some(n) = s.nodes {
            if n < 1 {
                return Err(err(
                    format!("{key}.nodes"),
                    format!("{label}.nodes must be at least 1; got {n}"),
                    "give the pool size, 1 or more",
                ));
            }
            if pool.is_some() {
                return Err(err(
                    format!("{key}.placement.pool"),
                    format!("{label}.nodes makes the service its own pool; drop placement.pool"),
                    "remove placement.pool",
                ));
            }
            if placement
                .as_ref()
                .and_then(|p| p.node)
                .is_some_and(|p| p != PlacementNode::Workers)
            {
                return Err(err(format!("{key}.placement.node"), format!("{label}.nodes owns a pool, so placement.node must be workers, meaning that pool (got {:?})", node.as_str()), "write placement.node: workers (or drop it)"));
            }
            node = PlacementNode::Workers;
        }
        let per_worker = placement
            .as_ref()
            .and_then(|p| p.per)
            .map_or(d.per_worker, |p| p == Per::Worker);
        if per_worker {
            if s.nodes.is_some() {
                return Err(err(format!("{key}.placement.per"), format!("{label}.placement.per: worker attaches to engine workers; it cannot own a pool"), "drop `per: worker` or `nodes:`"));
            }
            if !matches!(
                node,
                PlacementNode::Prefill
                    | PlacementNode::Decode
                    | PlacementNode::Agg
                    | PlacementNode::Workers
            ) {
                return Err(err(format!("{key}.placement.node"), format!("{label}.placement.per: worker needs placement.node in prefill, decode, agg, workers; got {:?}", node.as_str()), "place it on prefill, decode, agg or workers"));
            }
            if s.readiness
                .as_ref()
                .is_some_and(|r| !matches!(r.probe, ServiceProbe::Log(_)))
            {
                return Err(err(format!("{key}.readiness"), format!("{label}.placement.per: worker instances share their node's ports, so readiness must be a log probe"), "use readiness: {log: {pattern: \"<a line the service prints when ready>\"}}"));
            }
        }
        if node == PlacementNode::Dedicated && !d.supports_dedicated {
            return Err(err(format!("{key}.placement.node"), format!("{label}.placement.node: dedicated is only supported for infra-class kinds (etcd, nats, mooncake-master); use head, infra, or workers for type {:?}", t.as_str()), "use head, infra, or workers"));
        }
        if matches!(t, ServiceType::Etcd | ServiceType::Nats)
            && !matches!(
                node,
                PlacementNode::Head | PlacementNode::Infra | PlacementNode::Dedicated
            )
        {
            return Err(err(format!("{key}.placement.node"), format!("services[{}] (type {}) must be placed on head, infra, or dedicated; got {:?}. The discovery plane lives on the infra node.", s.name, t, node.as_str()), "use placement.node: infra"));
        }
        Ok((node, per_worker))
    }

    /// `options` keys the kind understands, with valid values.
    fn check_options(&self) -> Result<(), PlanError> {
        let (s, key, label, d, t) = (self.s, self.key, &self.label, self.d, self.s.kind);
        let unknown: Vec<&str> = s
            .options
            .keys()
            .map(String::as_str)
            .filter(|k| !d.option_keys.contains(k))
            .collect();
        if !unknown.is_empty() {
            return Err(err(
                format!("{key}.options.{}", unknown[0]),
                format!(
                    "{label}.options has keys type {:?} does not understand: {}",
                    t.as_str(),
                    unknown.join(", ")
                ),
                if d.option_keys.is_empty() {
                    format!("type {t} takes no options; remove them")
                } else {
                    format!("known options for {t}: {}", d.option_keys.join(", "))
                },
            ));
        }
        if let Some(v) = s.options.get("max_payload_mb") {
            if v.as_u64().is_none_or(|n| n == 0) {
                return Err(err(
                    format!("{key}.options.max_payload_mb"),
                    format!(
                        "services[{}].options.max_payload_mb must be a positive integer",
                        s.name
                    ),
                    "write a whole number of MB, e.g. max_payload_mb: 64",
                ));
            }
        }

        Ok(())
    }

    /// What mcsup does not run here, and why.
    fn runnable(&self) -> Result<(), String> {
        let (s, d, t) = (self.s, self.d, self.s.kind);
        let pool = s.placement.as_ref().and_then(|p| p.pool.as_ref());
        if let Some(why) = d.not_run {
            Err(why.to_string())
        } else if pool.is_some() || s.nodes.is_some() {
            Err("service pools (nodes / placement.pool) are allocated by srtctl's sbatch; mcsup runs on the job's engine nodes only".into())
        } else if s.source.is_some() || s.build_command.is_some() {
            Err("built from source (source / build_command): mcsup does not clone or build".into())
        } else if s.container.is_some()
            && !matches!(t, ServiceType::MooncakeMaster | ServiceType::MooncakeStore)
        {
            Err(format!(
                "runs in its own container image ({}); mcsup runs inside this step's container",
                s.container.as_deref().unwrap_or_default()
            ))
        } else {
            Ok(())
        }
    }

    /// The keys read but not acted on (srun launch options and the like).
    fn recorded(&self, runnable: bool) -> Vec<String> {
        let (s, key) = (self.s, self.key);
        let mut recorded = Vec::new();
        if let Some(c) = &s.container {
            if runnable {
                recorded.push(format!(
                    "{key}.container ({c}: mcsup runs inside the job's container)"
                ));
            }
        }
        for (k, set) in [
            ("cpus_per_task", s.cpus_per_task.is_some()),
            ("cpu_bind", s.cpu_bind.is_some()),
            ("srun_options", !s.srun_options.is_empty()),
            ("metrics", !s.metrics.0.is_empty()),
        ] {
            if set {
                recorded.push(format!("{key}.{k}"));
            }
        }

        recorded
    }

    /// The argv: the recipe's command replaces the kind's default; args are appended.
    fn argv(&self, mc: &McsupSection, configs_dir: &str, master_ports: [u16; 3]) -> Vec<String> {
        let (s, t) = (self.s, self.s.kind);
        let mut argv: Vec<String> = match (&s.command, t) {
            (Some(c), _) => c.0.clone(),
            (None, ServiceType::MooncakeMaster) => {
                let mut a = master_base_argv(mc, master_ports);
                a.extend(
                    mooncake::DEFAULT_MASTER_TUNABLES
                        .iter()
                        .map(|s| s.to_string()),
                );
                a
            }
            (None, _) => kinds::default_argv(t, &s.options, configs_dir),
        };
        argv.extend(s.args.0.iter().cloned());
        if t == ServiceType::MooncakeMaster {
            super::stores::add_cleanup_flags(&mut argv, &mc.master);
        }
        argv
    }

    /// The readiness probe: the recipe's, else the kind's (the master: its ports).
    fn readiness(&self, mc: &McsupSection) -> ReadinessModel {
        let (s, d, t) = (self.s, self.d, self.s.kind);
        match &s.readiness {
            Some(r) => ReadinessModel {
                probe: match &r.probe {
                    ServiceProbe::Tcp(t) => Readiness::Tcp { port: t.port.0 },
                    ServiceProbe::Http(h) => Readiness::Http {
                        port: h.port.0,
                        path: h.path.clone().unwrap_or_else(|| "/health".into()),
                        status: h.status.unwrap_or(200),
                    },
                    ServiceProbe::Log(l) => Readiness::Log {
                        pattern: l.pattern.0.clone(),
                    },
                    ServiceProbe::File(f) => Readiness::File {
                        path: f.path.clone(),
                    },
                },
                timeout_s: r.timeout_seconds.map_or(d.readiness_timeout_s, |t| t.0),
                interval_s: r.interval_seconds.map(|i| i.0),
            },
            None if t == ServiceType::MooncakeMaster => ReadinessModel {
                probe: Readiness::MasterPorts,
                timeout_s: mc
                    .master
                    .timeout_seconds
                    .map_or(d.readiness_timeout_s, |s| s.0),
                interval_s: None,
            },
            None => ReadinessModel {
                probe: d.readiness.clone(),
                timeout_s: d.readiness_timeout_s,
                interval_s: None,
            },
        }
    }
}
