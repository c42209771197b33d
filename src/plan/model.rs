//! One model for every recipe spelling: [`normalize`] folds srt-slurm v1
//! (`backend.mooncake_kv_store`), the seed's `standalone:` (PR #265) and srt-slurm 2.0
//! (`engine:`, `roles:`, `services:`) into a [`JobModel`]: the engine, each role's env and flags,
//! and the effective services (implied ones first, then the declared ones, as srtctl's
//! `effective_services` orders them).
//!
//! The fold follows `srtctl migrate` where it has a rule and extends it where it has none (the
//! seed's placements become store services, keeping their per-role merge). Every service keeps
//! the recipe key it came from, in the user's spelling, for provenance and errors. Whole-recipe
//! rules (unique names, one master, stores need a master, `roles:` not mixed with `backend:`)
//! are checked here; per-entry syntax was checked by the parser. Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};

use super::error::{err, PlanError};
use super::kinds;
pub use super::kinds::Readiness;
use crate::domain::Role;
use crate::mooncake;
use crate::recipe::*;

/// At most this many `services:` entries (real recipes declare a handful).
pub const MAX_SERVICES: usize = 256;

/// Which spelling the recipe used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spelling {
    /// srt-slurm v1 (`backend:`).
    V1,
    /// v1 with the seed's `backend.mooncake_kv_store.standalone`.
    V1Standalone,
    /// srt-slurm 2.0 (`schema: 2`, or `engine:`/`roles:`/`services:`).
    V2,
}

impl Spelling {
    pub fn as_str(self) -> &'static str {
        match self {
            Spelling::V1 => "v1",
            Spelling::V1Standalone => "v1+standalone",
            Spelling::V2 => "2.0",
        }
    }
}

/// One role's settings for its workers.
#[derive(Debug, Clone, Default)]
pub struct RoleModel {
    pub env: EnvMap,
    /// Where `env` came from (`backend.prefill_environment`, `roles.prefill.env`).
    pub env_key: String,
    pub flags: Option<FlagMap>,
    /// Where `flags` came from (`backend.sglang_config.prefill`, `roles.prefill.args`).
    pub flags_key: String,
    /// `roles.<role>.critical` (2.0): a worker that dies does not end the job when false.
    pub critical: Option<bool>,
    /// `roles.<role>.restart` (2.0), as mcsup's restart settings
    /// ([`super::role_restart`]).
    pub restart: Option<RestartConfig>,
}

/// The Mooncake side every worker sees.
#[derive(Debug, Clone, Default)]
pub struct MooncakeModel {
    /// The key that enabled it (`backend.mooncake_kv_store`, `services[mooncake-master]`).
    pub key: String,
    /// `mooncake_kv_store.env`: injected into every worker after its role env.
    pub worker_env: EnvMap,
    /// vLLM's client JSON (`store_config`).
    pub store_config: Option<BTreeMap<String, serde_json::Value>>,
    /// `external:` master endpoint (`host:port`); nothing launched.
    pub external: Option<String>,
}

/// Where a service runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Place {
    /// 2.0 `placement.node` (and `per`).
    Node {
        node: PlacementNode,
        per_worker: bool,
    },
    /// The seed's per-role placements: one instance per node that has any of these roles;
    /// co-located roles must agree and share the instance.
    Roles(Vec<RoleOverlay>),
}

/// One role's layer of a seed placement.
#[derive(Debug, Clone, PartialEq)]
pub struct RoleOverlay {
    pub role: Role,
    pub env: EnvMap,
    pub args: Vec<String>,
    pub key: String,
}

/// A readiness with its timing.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadinessModel {
    pub probe: Readiness,
    pub timeout_s: f64,
    pub interval_s: Option<f64>,
}

/// One effective service.
#[derive(Debug, Clone)]
pub struct ServiceModel {
    pub name: String,
    pub kind: ServiceType,
    /// The recipe key, in the user's spelling.
    pub key: String,
    pub implied_by: Option<String>,
    pub enabled: bool,
    pub external: Option<String>,
    /// The argv before this node's placeholders: the command (kind default or the recipe's)
    /// followed by `args`. For the master, mcsup's managed ports are part of it.
    pub argv: Vec<String>,
    pub preamble: Option<String>,
    /// Recipe env layers in order (`(source, vars)`), applied between the kind's defaults and
    /// its forced variables.
    pub env: Vec<(String, EnvMap)>,
    pub place: Place,
    pub start: StartPhase,
    pub readiness: ReadinessModel,
    pub inherit_discovery_env: bool,
    pub critical: bool,
    /// Ports its command listens on that its readiness does not name: an exporter's web port
    /// when the command is the kind's own ([`kinds::listen_port`]).
    pub listens: Vec<u16>,
    /// srtctl 2.0's `terminal: true`: the job ends once every terminal service has exited,
    /// with the worst exit status.
    pub terminal: bool,
    /// `Err(why)`: mcsup does not run it (listed in the plan, an error with `--strict`).
    pub runnable: Result<(), String>,
    /// Keys mcsup records but does not act on (srun options, metrics, ...).
    pub recorded: Vec<String>,
}

impl ServiceModel {
    /// srtctl's label for messages.
    pub fn label(&self) -> String {
        format!("services[{}]", self.name)
    }

    /// The ports an instance owns on its node (probe port, else the kind's default ports, and
    /// the ports its command listens on).
    pub fn owned_ports(&self, master_ports: [u16; 3]) -> Vec<u16> {
        let mut ports = match &self.readiness.probe {
            Readiness::Tcp { port } | Readiness::Http { port, .. } => vec![*port],
            Readiness::MasterPorts => master_ports.to_vec(),
            _ => kinds::defaults(self.kind).readiness_ports.to_vec(),
        };
        ports.extend(
            self.listens
                .iter()
                .filter(|p| !ports.contains(p))
                .collect::<Vec<_>>(),
        );
        ports
    }
}

/// A recipe, normalised.
#[derive(Debug, Clone)]
pub struct JobModel {
    pub spelling: Spelling,
    /// The engine the recipe names (`crate::engine::ENGINES`).
    pub engine: &'static dyn crate::engine::EngineKind,
    pub roles: BTreeMap<Role, RoleModel>,
    pub environment: EnvMap,
    /// srtctl v1's `observability:` (default, i.e. off, for a 2.0 recipe: not read there).
    pub observability: crate::engine::observability::Observability,
    pub mooncake: Option<MooncakeModel>,
    /// Effective services, implied first, then declared; disabled ones kept for the listing.
    pub services: Vec<ServiceModel>,
    /// Keys accepted but not interpreted.
    pub ignored: Vec<String>,
    pub warnings: Vec<String>,
    /// Master ports: RPC, metadata, metrics.
    pub master_ports: [u16; 3],
}

impl JobModel {
    /// The effective (enabled) services.
    pub fn enabled(&self) -> impl Iterator<Item = &ServiceModel> {
        self.services.iter().filter(|s| s.enabled)
    }

    /// The effective service of `kind`, if one is declared or implied and enabled.
    pub fn effective(&self, kind: ServiceType) -> Option<&ServiceModel> {
        self.enabled().find(|s| s.kind == kind)
    }
}

/// A top-level key the recipe parser does not know, as the plan lists it: `None` for a section
/// the planner reads whole, the key with what is read of it for a section read in part, the key
/// itself for one mcsup does not interpret.
fn partly_read(key: &str, is_v2: bool) -> Option<String> {
    let read = match key {
        // srtctl v1's worker-side profiling: the nsys prefix, its env, vLLM's window.
        "profiling" if !is_v2 => return None,
        "observability" if !is_v2 => "enabled, enable_otel and otel_endpoint",
        // srtctl's layout: worker counts, GPUs per node and worker, spread_workers.
        "resources" => return None,
        "model" => "model.path",
        "health_check" => {
            "max_attempts, interval_seconds, fatal_log_markers and extra_fatal_log_patterns"
        }
        // srtctl's benchmark stage, read whole (plan::benchmark).
        "benchmark" => return None,
        "infra" => "etcd_nats_dedicated_node",
        _ => return Some(key.to_string()),
    };
    Some(format!("{key} (mcsup reads only {read})"))
}

/// Fold a parsed recipe into the model: its spelling, the engine and roles, the Mooncake block
/// (the implied master and the seed's standalone stores), the implied and the declared services,
/// then the rules across them.
pub fn normalize(recipe: &Recipe) -> Result<JobModel, PlanError> {
    let mc = recipe.mcsup.clone().unwrap_or_default();
    let is_v2 = recipe.schema.is_some()
        || recipe.engine.is_some()
        || recipe.roles.is_some()
        || recipe.services.is_some();
    let engine = crate::engine::of_recipe(recipe)?;
    let ports = master_ports(&mc)?;
    let mut model = new_model(recipe, engine, is_v2, ports)?;
    if let (Some(_), Some(_)) = (&recipe.engine, &recipe.backend) {
        return Err(err(
            "engine",
            "the recipe has both `engine:` (2.0) and `backend:` (v1)",
            "keep one: `engine:` with `roles:` (2.0), or `backend:` (v1); `srtctl migrate` rewrites a v1 recipe",
        ));
    }
    let backend = recipe.backend.clone().unwrap_or_default();
    match &recipe.roles {
        Some(roles) => read_roles_v2(roles, &backend, &mut model)?,
        None => read_roles_v1(&backend, &mut model),
    }
    read_engine(recipe, &backend, &mut model);
    let declared = recipe.services.clone().unwrap_or_default();
    read_mooncake_block(recipe, &backend, &mc, &declared, is_v2, &mut model)?;
    if is_v2 {
        model.spelling = Spelling::V2;
    }
    let configs_dir = mc.configs_dir.clone().unwrap_or_else(|| "/configs".into());
    add_implied_discovery(recipe, &mc, &configs_dir, is_v2, &mut model)?;
    add_declared(&declared, &mc, &configs_dir, &mut model)?;
    link_master(&declared, &mut model)?;
    check_across(&declared, &model)?;
    check_transfer_backend(&model)?;
    Ok(model)
}

/// `mcsup.master`'s three ports, which must differ.
fn master_ports(mc: &McsupSection) -> Result<[u16; 3], PlanError> {
    let rpc = mc
        .master
        .rpc_port
        .map_or(mooncake::DEFAULT_RPC_PORT, |p| p.0);
    let meta = mc
        .master
        .metadata_port
        .map_or(mooncake::DEFAULT_METADATA_PORT, |p| p.0);
    let metrics = mc
        .master
        .metrics_port
        .map_or(mooncake::DEFAULT_METRICS_PORT, |p| p.0);
    if rpc == meta || rpc == metrics || meta == metrics {
        return Err(err(
            "mcsup.master",
            format!(
                "the master's ports must differ (rpc {rpc}, metadata {meta}, metrics {metrics})"
            ),
            "give rpc_port, metadata_port and metrics_port three different values",
        ));
    }
    Ok([rpc, meta, metrics])
}

/// The model before roles and services: environment, observability, and the keys mcsup does
/// not read outside the engine.
fn new_model(
    recipe: &Recipe,
    engine: &'static dyn crate::engine::EngineKind,
    is_v2: bool,
    ports: [u16; 3],
) -> Result<JobModel, PlanError> {
    let mut model = JobModel {
        spelling: Spelling::V1,
        engine,
        roles: BTreeMap::new(),
        environment: recipe.environment.clone(),
        observability: if is_v2 {
            Default::default()
        } else {
            crate::engine::observability::Observability::from_recipe(recipe)?
        },
        mooncake: None,
        services: Vec::new(),
        ignored: recipe
            .ignored
            .iter()
            .filter_map(|k| partly_read(k, is_v2))
            .collect(),
        warnings: Vec::new(),
        master_ports: ports,
    };
    if let Some(serde_yaml::Value::Mapping(m)) = &recipe.frontend {
        for k in m.keys().filter_map(|k| k.as_str()) {
            if !crate::engine::frontend::RECIPE_KEYS.contains(&k) {
                model.ignored.push(format!("frontend.{k}"));
            }
        }
    }
    if recipe.dynamo.is_some() {
        let read = if is_v2 {
            "request_plane / event_plane"
        } else {
            "request_plane / event_plane / wheel"
        };
        model
            .ignored
            .push(format!("dynamo (mcsup reads only {read})"));
    }
    if !is_v2 {
        // srtctl's runtime environment: the wheel's variables, then `environment:`.
        let mut env = crate::engine::dynamo_wheel_env(recipe)?;
        env.retain(|(k, _)| recipe.environment.get(k).is_none());
        env.extend(recipe.environment.0.iter().cloned());
        model.environment = EnvMap(env);
    }

    Ok(model)
}

/// 2.0's `roles:`: each declared role's env and engine flags, and the keys mcsup does not read.
fn read_roles_v2(roles: &Roles, backend: &Backend, model: &mut JobModel) -> Result<(), PlanError> {
    let mixed: Vec<&str> = [
        (
            "backend.prefill_environment",
            !backend.prefill_environment.is_empty(),
        ),
        (
            "backend.decode_environment",
            !backend.decode_environment.is_empty(),
        ),
        (
            "backend.aggregated_environment",
            !backend.aggregated_environment.is_empty(),
        ),
        ("backend.sglang_config", backend.sglang_config.is_some()),
        ("backend.vllm_config", backend.vllm_config.is_some()),
    ]
    .into_iter()
    .filter(|(_, set)| *set)
    .map(|(k, _)| k)
    .collect();
    if !mixed.is_empty() {
        return Err(err(
            "roles",
            format!(
                "cannot be combined with the fields it expands into: {}",
                mixed.join(", ")
            ),
            "move those keys under roles.<role>.env / roles.<role>.args and drop them from backend",
        ));
    }
    let engine_name = model.engine.name();
    let role_args = model.engine.role_args();
    for role in Role::ALL {
        if let Some(rc) = roles.for_role(role) {
            let name = role.short();
            // A declared role runs a worker even without args (srtctl derives one per role).
            use crate::engine::RoleArgs;
            let flags = match (&rc.args, role_args) {
                (Some(v), RoleArgs::Flags) => {
                    Some(serde_yaml::from_value::<FlagMap>(v.clone()).map_err(|e| {
                        let msg = e.to_string();
                        let (m, f) = msg.split_once(FIX_MARKER).map_or(
                            (msg.as_str(), "write each flag as `name: value`"),
                            |(m, f)| (m, f),
                        );
                        err(format!("roles.{name}.args"), m.to_string(), f.to_string())
                    })?)
                }
                (Some(_), RoleArgs::Unread) => {
                    model.ignored.push(format!("roles.{name}.args ({engine_name} flags: mcsup derives no {engine_name} worker)"));
                    None
                }
                (None, RoleArgs::Flags) => Some(FlagMap::default()),
                (_, RoleArgs::Settings) | (None, RoleArgs::Unread) => None,
            };
            model.roles.insert(
                role,
                RoleModel {
                    env: rc.env.clone(),
                    env_key: format!("roles.{name}.env"),
                    flags,
                    flags_key: format!("roles.{name}.args"),
                    critical: rc.critical,
                    restart: rc
                        .restart
                        .as_ref()
                        .map(|v| {
                            super::role_restart::from_recipe(v, &format!("roles.{name}.restart"))
                        })
                        .transpose()?,
                },
            );
            // nodes, workers and gpus size srtctl's layout; kv_events is srtctl's
            // kv-events config: all four are read where the layout is planned.
            for (key, set) in [
                ("extra_args", rc.extra_args.is_some()),
                ("engine", rc.engine.is_some()),
                ("sidecar", rc.sidecar.is_some()),
                ("container", rc.container.is_some()),
                ("mooncake_store_config", rc.mooncake_store_config.is_some()),
                ("srun_options", rc.srun_options.is_some()),
            ] {
                if set {
                    model.ignored.push(format!("roles.{name}.{key}"));
                }
            }
        }
    }
    Ok(())
}

/// v1's `backend:`: each role's `<role>_environment` and `<engine>_config.<role>` flags.
fn read_roles_v1(backend: &Backend, model: &mut JobModel) {
    let section = model.engine.flags_section();
    let flags_section = (section, backend.role_flags(section));
    for role in Role::ALL {
        let env = match role {
            Role::Prefill => &backend.prefill_environment,
            Role::Decode => &backend.decode_environment,
            Role::Aggregated => &backend.aggregated_environment,
        };
        model.roles.insert(
            role,
            RoleModel {
                // `observability.enabled` adds Dynamo's span env (srtctl's
                // `expand_observability`, at load time).
                env: model.observability.role_env(env),
                env_key: format!("backend.{role}_environment"),
                flags: flags_section.1.and_then(|f| f.for_role(role)).cloned(),
                flags_key: format!("backend.{}.{role}", flags_section.0),
                critical: None,
                restart: None,
            },
        );
    }
}
/// The engine (`engine.type` or `backend.type`) and its section's keys the engine does not read.
fn read_engine(recipe: &Recipe, backend: &Backend, model: &mut JobModel) {
    let (section_ignored, prefix) = match &recipe.engine {
        Some(e) => (&e.ignored, "engine."),
        None => (&backend.ignored, "backend."),
    };
    // The engine's own keys are read by its launch (src/engine/), not ignored.
    let read = model.engine.recipe_keys();
    model.ignored.extend(
        section_ignored
            .iter()
            .filter(|k| !k.strip_prefix(prefix).is_some_and(|k| read.contains(&k)))
            .cloned(),
    );
}

/// The Mooncake block (v1 `backend.mooncake_kv_store`, 2.0 `engine.mooncake_kv_store`): the
/// worker side, the implied master, and the seed's standalone stores.
fn read_mooncake_block(
    recipe: &Recipe,
    backend: &Backend,
    mc: &McsupSection,
    declared: &[ServiceConfig],
    is_v2: bool,
    model: &mut JobModel,
) -> Result<(), PlanError> {
    let (mk, mk_key) = match (
        &backend.mooncake_kv_store,
        recipe
            .engine
            .as_ref()
            .and_then(|e| e.mooncake_kv_store.as_ref()),
    ) {
        (Some(m), _) => (Some(m.clone()), "backend.mooncake_kv_store"),
        (None, Some(m)) => (Some(m.clone()), "engine.mooncake_kv_store"),
        (None, None) => (None, ""),
    };
    let declared_masters: Vec<usize> = declared
        .iter()
        .enumerate()
        .filter(|(_, s)| s.kind == ServiceType::MooncakeMaster && s.enabled)
        .map(|(i, _)| i)
        .collect();
    if declared_masters.len() > 1 {
        return Err(err(
            format!("services[{}]", declared_masters[1]),
            "only one mooncake-master service is supported",
            "keep one `type: mooncake-master` entry",
        ));
    }
    if let (Some(&i), Some(m)) = (declared_masters.first(), &mk) {
        // The env block alone may stay (migrate leaves it when no role carries it).
        let master_keys = m.container.is_some()
            || !m.master_extra_args.0.is_empty()
            || m.master_args.is_some()
            || m.store_config.is_some()
            || m.standalone.is_some();
        if master_keys {
            return Err(err(
                format!("services[{i}]"),
                format!("a mooncake-master service cannot be combined with {mk_key}; declare one or the other"),
                format!("move {mk_key}'s container/master_extra_args/store_config onto the services entry (container, args, options.store_config) and drop {mk_key}"),
            ));
        }
    }
    let Some(m) = &mk else {
        return Ok(());
    };
    model.mooncake = Some(MooncakeModel {
        key: mk_key.into(),
        worker_env: m.env.clone(),
        store_config: m.store_config.clone(),
        external: None,
    });
    if let Some(c) = &m.container {
        model.ignored.push(format!(
            "{mk_key}.container ({c}: mcsup runs inside the job's container)"
        ));
    }
    model
        .services
        .push(implied_master(m, mk_key, mc, model.master_ports, is_v2));
    if let Some(sa) = m.standalone.as_ref() {
        model.spelling = Spelling::V1Standalone;
        model
            .services
            .push(standalone_store(sa, &format!("{mk_key}.standalone")));
    }
    Ok(())
}

/// The master the Mooncake block implies (srtctl: `implied_services`, reason = the block's key).
fn implied_master(
    m: &MooncakeKvStore,
    mk_key: &str,
    mc: &McsupSection,
    ports: [u16; 3],
    is_v2: bool,
) -> ServiceModel {
    let mut argv = master_base_argv(mc, ports);
    match &m.master_args {
        Some(a) => argv.extend(a.0.iter().cloned()),
        None => argv.extend(
            mooncake::DEFAULT_MASTER_TUNABLES
                .iter()
                .map(|s| s.to_string()),
        ),
    }
    argv.extend(m.master_extra_args.0.iter().cloned());
    super::stores::add_cleanup_flags(&mut argv, &mc.master);
    let mut env = Vec::new();
    if !mc.master.env.is_empty() {
        env.push(("mcsup.master.env".to_string(), mc.master.env.clone()));
    }
    ServiceModel {
        name: if is_v2 {
            "mooncake-master".into()
        } else {
            "master".into()
        },
        kind: ServiceType::MooncakeMaster,
        key: mk_key.into(),
        implied_by: Some(mk_key.into()),
        enabled: true,
        external: None,
        argv,
        preamble: None,
        env,
        place: Place::Node {
            node: PlacementNode::Infra,
            per_worker: false,
        },
        start: StartPhase::BeforeWorkers,
        readiness: ReadinessModel {
            probe: Readiness::MasterPorts,
            timeout_s: mc.master.timeout_seconds.map_or(120.0, |s| s.0),
            interval_s: None,
        },
        inherit_discovery_env: true,
        critical: true,
        listens: Vec::new(),
        terminal: false,
        runnable: Ok(()),
        recorded: Vec::new(),
    }
}

/// The seed's standalone stores: one service placed per enabled role.
fn standalone_store(sa: &Standalone, key: &str) -> ServiceModel {
    let mut overlays = Vec::new();
    for role in Role::ALL {
        if let Some(p) = sa.placements.for_role(role).filter(|p| p.enabled) {
            overlays.push(RoleOverlay {
                role,
                env: p.env.clone(),
                args: p.args.0.clone(),
                key: format!("{key}.placements.{role}"),
            });
        }
    }
    let mut argv = sa.command.0.clone();
    argv.extend(sa.args.0.iter().cloned());
    let mut recorded = Vec::new();
    for (k, set) in [
        ("cpus_per_task", sa.cpus_per_task.is_some()),
        ("cpu_bind", sa.cpu_bind.is_some()),
        ("srun_options", !sa.srun_options.is_empty()),
    ] {
        if set {
            recorded.push(format!(
                "{key}.{k} (an srun launch option: mcsup runs inside the step)"
            ));
        }
    }
    ServiceModel {
        name: "store".into(),
        kind: ServiceType::MooncakeStore,
        key: key.to_string(),
        implied_by: None,
        enabled: sa.enabled && !overlays.is_empty(),
        external: None,
        argv,
        preamble: sa.preamble.clone(),
        env: vec![("standalone.env".to_string(), sa.env.clone())],
        place: Place::Roles(overlays),
        start: StartPhase::BeforeWorkers,
        readiness: ReadinessModel {
            probe: sa
                .health_check
                .map_or(Readiness::None, |h| Readiness::Tcp { port: h.port.0 }),
            timeout_s: sa.health_check.map_or(120.0, |h| h.timeout_seconds.0),
            interval_s: None,
        },
        inherit_discovery_env: true,
        critical: sa.critical,
        listens: Vec::new(),
        terminal: false,
        runnable: Ok(()),
        recorded,
    }
}

/// The discovery services a frontend or plane implies (2.0: a Dynamo frontend needs etcd, a
/// NATS plane NATS; v1: srtctl's head infrastructure).
fn add_implied_discovery(
    recipe: &Recipe,
    mc: &McsupSection,
    configs_dir: &str,
    is_v2: bool,
    model: &mut JobModel,
) -> Result<(), PlanError> {
    let implied = if is_v2 {
        implied_discovery(recipe)
    } else {
        implied_discovery_v1(recipe, mc)?
    };
    for (name, reason) in implied {
        let cfg: ServiceConfig =
            serde_yaml::from_str(&format!("{{name: {name}, type: {name}}}"))
                .map_err(|e| err("services", e.to_string(), "report this as a bug"))?;
        let mut svc = super::declared::declared_service(
            &cfg,
            &format!("services[{name}]"),
            mc,
            configs_dir,
            model.master_ports,
        )?;
        svc.key = reason.clone();
        svc.implied_by = Some(reason);
        model.services.push(svc);
    }

    Ok(())
}

/// The recipe's `services:`, each checked and read; one named like an implied service replaces it.
fn add_declared(
    declared: &[ServiceConfig],
    mc: &McsupSection,
    configs_dir: &str,
    model: &mut JobModel,
) -> Result<(), PlanError> {
    if declared.len() > MAX_SERVICES {
        return Err(err(
            format!("services[{MAX_SERVICES}]"),
            format!(
                "the recipe declares {} services; mcsup plans at most {MAX_SERVICES}",
                declared.len()
            ),
            "a job runs a handful of services: check the file is the recipe you meant",
        ));
    }
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for (i, s) in declared.iter().enumerate() {
        let key = format!("services[{i}]");
        if s.name.trim().is_empty() {
            return Err(err(
                format!("{key}.name"),
                "services[].name must be a non-empty string",
                "give the service a name (it names its log file)",
            ));
        }
        if !crate::domain::plain_process_name(&s.name) {
            return Err(err(
                format!("{key}.name"),
                format!("`{}` is not a usable service name", s.name),
                crate::domain::PROCESS_NAME_FIX,
            ));
        }
        if let Some(first) = names.insert(s.name.clone(), i) {
            return Err(err(
                format!("{key}.name"),
                format!(
                    "services[{}]: name must be unique (services[{first}] has it too)",
                    s.name
                ),
                "give each service a distinct name",
            ));
        }
        let svc = super::declared::declared_service(s, &key, mc, configs_dir, model.master_ports)?;
        // A declared entry whose name equals an implied one replaces it (srtctl).
        if let Some(pos) = model.services.iter().position(|x| {
            x.implied_by.is_some()
                && (x.name == svc.name
                    || (svc.kind == ServiceType::MooncakeMaster
                        && x.kind == ServiceType::MooncakeMaster))
        }) {
            model.services.remove(pos);
        }
        model.services.push(svc);
    }

    Ok(())
}

/// The effective master is the one the workers and stores register with; a store needs one.
fn link_master(declared: &[ServiceConfig], model: &mut JobModel) -> Result<(), PlanError> {
    if let Some(master) = model.effective(ServiceType::MooncakeMaster).cloned() {
        let mm = model.mooncake.get_or_insert_with(|| MooncakeModel {
            key: master.key.clone(),
            ..MooncakeModel::default()
        });
        mm.external = master.external.clone();
        if mm.store_config.is_none() {
            if let Some(j) = declared
                .iter()
                .find(|s| s.name == master.name)
                .and_then(|s| s.options.get("store_config"))
            {
                mm.store_config = serde_json::to_value(j)
                    .ok()
                    .and_then(|v| serde_json::from_value(v).ok());
            }
        }
    }
    if model.mooncake.is_none() {
        if let Some(store) = model.effective(ServiceType::MooncakeStore) {
            return Err(err(
                store.key.clone(),
                format!("{} (type mooncake-store) requires engine.mooncake_kv_store, which launches the master the store registers with", store.label()),
                "declare the master: add `- {name: mooncake-master, type: mooncake-master}` to services",
            ));
        }
    }
    Ok(())
}

/// Rules across services: stores spelled once, etcd and NATS on the same infra node.
fn check_across(declared: &[ServiceConfig], model: &JobModel) -> Result<(), PlanError> {
    if model.spelling == Spelling::V1Standalone || model.spelling == Spelling::V2 {
        let v1_store = model
            .services
            .iter()
            .any(|s| matches!(s.place, Place::Roles(_)));
        if let (true, Some(s)) = (
            v1_store,
            declared
                .iter()
                .position(|s| s.kind == ServiceType::MooncakeStore),
        ) {
            return Err(err(
                format!("services[{s}]"),
                "stores are declared twice: in mooncake_kv_store.standalone and as a mooncake-store service",
                "keep one spelling (`mcsup migrate` prints the services: form of the standalone block)",
            ));
        }
    }
    let dedicated = |k: ServiceType| {
        model.effective(k).map(|s| {
            matches!(
                s.place,
                Place::Node {
                    node: PlacementNode::Dedicated,
                    ..
                }
            )
        })
    };
    if let (Some(a), Some(b)) = (dedicated(ServiceType::Etcd), dedicated(ServiceType::Nats)) {
        if a != b {
            let nats = model
                .effective(ServiceType::Nats)
                .map(|s| s.key.clone())
                .unwrap_or_default();
            return Err(err(
                format!("{nats}.placement.node"),
                "services etcd and nats must agree on placement.node: dedicated (they share the infra node)",
                "give both the same placement.node",
            ));
        }
    }
    Ok(())
}

/// The master's argv before tunables: the program and mcsup's managed ports.
pub(super) fn master_base_argv(mc: &McsupSection, ports: [u16; 3]) -> Vec<String> {
    mooncake::master_argv(mc.master.command.as_ref().map(|c| &c.0[..]), ports)
}

/// The discovery services srtctl 2.0 implies (`services/implicit.py`): etcd under a dynamo
/// frontend (the default `frontend.type`), NATS when a dynamo plane uses it.
fn implied_discovery(recipe: &Recipe) -> Vec<(&'static str, String)> {
    let get = |v: &Option<serde_yaml::Value>, k: &str| -> Option<String> {
        v.as_ref()?.get(k)?.as_str().map(str::to_ascii_lowercase)
    };
    // A Dynamo frontend finds its workers through etcd.
    let frontend = get(&recipe.frontend, "type").map_or(
        Some(crate::engine::frontend::FrontendType::default_kind()),
        |f| crate::engine::frontend::FrontendType::named(&f),
    );
    if !frontend.is_some_and(|f| f.kind().discovers_workers()) {
        return Vec::new();
    }
    let mut out = vec![("etcd", "frontend.type dynamo".to_string())];
    let planes: Vec<String> = ["request_plane", "event_plane"]
        .into_iter()
        .filter(|k| get(&recipe.dynamo, k).as_deref() == Some("nats"))
        .map(|k| format!("dynamo.{k} nats"))
        .collect();
    if !planes.is_empty() {
        out.push(("nats", planes.join(", ")));
    }
    out
}

/// srtctl v1 (`do_sweep.py: start_head_infrastructure`) runs NATS and etcd on the infra node
/// for every frontend but `trtllm_serve` and `vllm`. mcsup runs them for a v1 recipe whose
/// workers it derives from srtctl's layout (the Dynamo workers and frontend need them); a recipe
/// that lists its own workers (`mcsup.workers`) gets none, as before.
fn implied_discovery_v1(
    recipe: &Recipe,
    mc: &McsupSection,
) -> Result<Vec<(&'static str, String)>, PlanError> {
    let kind = crate::engine::frontend::frontend_type(recipe)?;
    // As written, for the reason (`sglang` for v1's router).
    let frontend = recipe
        .raw_get(&["frontend", "type"])
        .and_then(|v| v.as_str())
        .unwrap_or(kind.as_str());
    if !kind.kind().head_infrastructure()
        || mc.workers != WorkersConfig::default()
        || crate::engine::layout::inputs(recipe)?.is_none()
    {
        return Ok(Vec::new());
    }
    let why = format!("srtctl v1 runs it on the infra node (frontend.type {frontend})");
    Ok(vec![("etcd", why.clone()), ("nats", why)])
}

/// srtctl: a disaggregated SGLang recipe with a Mooncake master must use Mooncake as the
/// transfer backend on prefill or decode.
fn check_transfer_backend(model: &JobModel) -> Result<(), PlanError> {
    if !model.engine.checks_transfer_backend() || model.mooncake.is_none() {
        return Ok(());
    }
    // Only flags the recipe wrote count (a 2.0 role without `args` still runs a worker).
    let flags = |r: Role| {
        model
            .roles
            .get(&r)
            .and_then(|m| m.flags.as_ref())
            .filter(|f| !f.0.is_empty())
    };
    let disagg = flags(Role::Prefill).is_some() || flags(Role::Decode).is_some();
    let uses = [Role::Prefill, Role::Decode].iter().any(|r| {
        flags(*r)
            .and_then(|f| {
                f.get("disaggregation-transfer-backend")
                    .or(f.get("disaggregation_transfer_backend"))
            })
            .and_then(|v| v.as_str())
            .is_some_and(|v| v.eq_ignore_ascii_case("mooncake"))
    });
    if disagg && !uses {
        let (key, where_) = if model.spelling == Spelling::V2 {
            (
                "roles.prefill.args",
                "roles.prefill.args nor roles.decode.args has",
            )
        } else {
            (
                "backend.sglang_config",
                "backend.sglang_config.prefill nor .decode has",
            )
        };
        return Err(err(
            key,
            format!("a Mooncake master is configured but neither {where_} 'disaggregation-transfer-backend: mooncake'"),
            format!("add `disaggregation-transfer-backend: mooncake` to {key} (and decode)"),
        ));
    }
    Ok(())
}

/// Names of the services, for "did you mean" in `mcsup.services`.
pub fn service_names(model: &JobModel) -> BTreeSet<&str> {
    model.services.iter().map(|s| s.name.as_str()).collect()
}
