//! TRT-LLM endpoints as srtctl launches them (docs/trtllm.md): each endpoint is one Slurm step
//! over all of its nodes with one rank per GPU (`backends/trtllm.py: get_srun_config`,
//! `cli/mixins/worker_stage.py: start_endpoint_worker`), every rank running the same command
//! (`build_worker_command`), and each mode's engine config file, `trtllm_config_<mode>.yaml`,
//! which srtctl writes with PyYAML's `safe_dump` of the mode's `trtllm_config`. mcsup runs the
//! endpoint from its leader node's mcsup as one supervised process: the step's `srun` client.

use std::collections::BTreeMap;

use super::layout::TopoProcess;
use super::reader::Reader;
use super::{python_str, worker_env, LaunchContext, WorkerLaunch};
use crate::domain::{plan_err, PlanError, Role};
use crate::recipe::Recipe;
use serde_yaml::{Mapping, Value};

/// The `backend.*` keys the TRT-LLM launch reads besides the role environments.
pub const RECIPE_KEYS: &[&str] = &[
    "trtllm_config",
    "publish_events_and_metrics",
    "sequential_node_start",
    "numa_memory_bind",
];

/// The MPI options srtctl gives every endpoint's step, and mcsup's own.
const SRUN_MPI: [&str; 5] = [
    "--mpi",
    "pmix",
    "--oversubscribe",
    "--cpu-bind=verbose,none",
    // mcsup's: one rank's death ends the step on every node (docs/trtllm.md).
    "--kill-on-bad-exit=1",
];

/// A TRT-LLM recipe's launch settings (srtctl's `TRTLLMProtocol`).
#[derive(Debug, Clone)]
pub struct TrtllmSettings {
    /// Each mode's engine file, rendered: `trtllm_config.<prefill|decode|aggregated>`.
    files: BTreeMap<Role, String>,
    /// Each mode's `tensor_parallel_size`, `moe_expert_parallel_size`, `pipeline_parallel_size`
    /// as `str()` writes them, for `trtllm-serve`'s flags.
    parallel: BTreeMap<Role, Vec<(&'static str, String)>>,
    publish_events: bool,
    /// `numa_memory_bind`, else srtctl's rule: on for GB200/GB300 (`resources.gpu_type`).
    numactl: bool,
    /// `sequential_node_start`: endpoints sharing a leader node start this many at a time.
    pub sequential_node_start: u32,
    /// `frontend.type` is `trtllm_serve`: the ranks run `trtllm-serve`, not `dynamo.trtllm`,
    /// and a disaggregated job's orchestrator runs with these settings.
    trtllm_serve: Option<OrchestratorSettings>,
}

/// `frontend:` of a `trtllm_serve` job: the orchestrator's extra flags and environment.
#[derive(Debug, Clone, Default)]
struct OrchestratorSettings {
    /// `frontend.args` as srtctl's `get_frontend_args_list` writes them.
    args: Vec<String>,
    /// `frontend.env`.
    env: Vec<(String, String)>,
}

/// A disaggregated `trtllm_serve` job's orchestrator (srtctl's `TRTLLMServeFrontend`):
/// `trtllm-serve disaggregated --config <log_dir>/ser.yaml`, one rank of a Slurm step on the
/// head node (TRT-LLM imports need an MPI launcher even for it), started once every worker
/// leader answers `/health`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orchestrator {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Where `ser.yaml` goes and its text (`yaml.safe_dump(ser, sort_keys=False)`).
    pub ser_path: String,
    pub ser: String,
    /// The Slurm step's name.
    pub step: String,
    /// The public port (srtctl's `FRONTEND_PUBLIC_PORT`).
    pub port: u16,
}

impl OrchestratorSettings {
    fn from_recipe(recipe: &Recipe) -> Result<Self, PlanError> {
        let r = Reader {
            recipe,
            section: "frontend",
        };
        for key in ["ctx_router", "gen_router", "server_config_extra"] {
            if r.raw(key).is_some() {
                return Err(plan_err(
                    format!("frontend.{key}"),
                    "mcsup does not write it into trtllm-serve's ser.yaml yet",
                    "remove it to run the job with mcsup, or run this recipe with srtctl",
                ));
            }
        }
        if r.boolean("enable_multiple_frontends")?.unwrap_or(true) {
            return Err(plan_err(
                "frontend.enable_multiple_frontends",
                "frontend.type trtllm_serve uses one public endpoint (srtctl refuses it too)",
                "set frontend.enable_multiple_frontends: false",
            ));
        }
        if let Some(p) = r.string("orchestrator_placement")?.filter(|p| p != "head") {
            return Err(plan_err(
                "frontend.orchestrator_placement",
                format!("`{p}`: mcsup places the orchestrator on the head node only"),
                "remove the key (the orchestrator then runs on the head node, srtctl's default)",
            ));
        }
        let mut args = Vec::new();
        if let Some(v) = r.raw("args") {
            let Value::Mapping(m) = v else {
                return Err(r.bad("args", v, "a mapping of flags", "{log_level: info}"));
            };
            for (k, v) in m {
                let k = python_str(k);
                match v {
                    Value::Bool(true) => args.push(format!("--{k}")),
                    Value::Bool(false) | Value::Null => {}
                    v => args.extend([format!("--{k}"), python_str(v)]),
                }
            }
        }
        let mut env = Vec::new();
        if let Some(v) = r.raw("env") {
            let Value::Mapping(m) = v else {
                return Err(r.bad("env", v, "a mapping of variables", "{UCX_TLS: tcp}"));
            };
            env = m
                .iter()
                .map(|(k, v)| (python_str(k), python_str(v)))
                .collect();
        }
        Ok(Self { args, env })
    }
}

impl TrtllmSettings {
    /// Read from `backend.*` (v1). `frontend` is `frontend.type`.
    pub fn from_recipe(
        recipe: &Recipe,
        frontend: super::frontend::FrontendType,
    ) -> Result<Self, PlanError> {
        let r = Reader {
            recipe,
            section: "backend",
        };
        let mut files = BTreeMap::new();
        let mut parallel = BTreeMap::new();
        for role in Role::ALL {
            let key = role.as_str();
            let at = format!("backend.trtllm_config.{key}");
            let config = match recipe.raw_get(&["backend", "trtllm_config", key]) {
                None | Some(Value::Null) => Mapping::new(),
                Some(Value::Mapping(m)) => m.clone(),
                Some(_) => return Err(plan_err(
                    at,
                    "is not a mapping of TRT-LLM engine settings",
                    "write the mode's LLM API options as a mapping, e.g. tensor_parallel_size: 8",
                )),
            };
            let text = engine_config_yaml(&config).map_err(|why| {
                plan_err(
                    at.clone(),
                    why,
                    "write the value as a plain word or number (or run this recipe with srtctl)",
                )
            })?;
            files.insert(role, text);
            let sizes = [
                ("--tensor_parallel_size", "tensor_parallel_size"),
                ("--moe_expert_parallel_size", "moe_expert_parallel_size"),
                ("--pipeline_parallel_size", "pipeline_parallel_size"),
            ]
            .into_iter()
            .filter_map(|(flag, k)| {
                let v = config.get(k).filter(|v| !v.is_null())?;
                Some((flag, python_str(v)))
            })
            .collect();
            parallel.insert(role, sizes);
        }
        let gpu_type = recipe
            .raw_get(&["resources", "gpu_type"])
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        let sequential = r.int("sequential_node_start")?.unwrap_or(0);
        let sequential_node_start = u32::try_from(sequential).map_err(|_| {
            plan_err(
                "backend.sequential_node_start",
                format!("`{sequential}` is not a count of endpoints"),
                "write 0 (all at once), 1 (one at a time) or how many start together",
            )
        })?;
        Ok(Self {
            files,
            parallel,
            publish_events: r.boolean("publish_events_and_metrics")?.unwrap_or(false),
            numactl: r
                .boolean("numa_memory_bind")?
                .unwrap_or(matches!(gpu_type, "gb200" | "gb300")),
            sequential_node_start,
            // `trtllm_serve`: the frontend this engine plans itself.
            trtllm_serve: if frontend
                .kind()
                .planned_by_engine()
                .is_some_and(|(engine, _)| engine == super::EngineKind::name(&Trtllm))
            {
                Some(OrchestratorSettings::from_recipe(recipe)?)
            } else {
                None
            },
        })
    }

    /// The orchestrator of a disaggregated `trtllm_serve` job over the job's processes `all`;
    /// `None` for another frontend, or an aggregated job (its one endpoint serves the public
    /// port itself).
    pub fn orchestrator(
        &self,
        c: &LaunchContext,
        all: &[TopoProcess],
        head: &str,
    ) -> Result<Option<Orchestrator>, PlanError> {
        let Some(o) = &self.trtllm_serve else {
            return Ok(None);
        };
        let urls = |mode: Role| -> Vec<String> {
            all.iter()
                .filter(|p| p.mode == mode && p.is_leader())
                .map(|p| format!("{}:{}", c.node_ips[p.node], p.http_port))
                .collect()
        };
        let (ctx, gen) = (urls(Role::Prefill), urls(Role::Decode));
        if ctx.is_empty() && gen.is_empty() {
            return Ok(None);
        }
        let port = super::frontend::PUBLIC_PORT;
        let mut ser = String::new();
        for (key, list) in [("context_servers", &ctx), ("generation_servers", &gen)] {
            ser.push_str(&format!(
                "{key}:\n  num_instances: {}\n  urls:\n",
                list.len()
            ));
            for u in list {
                let plain = u
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ".-:".contains(ch))
                    && u.starts_with(|ch: char| ch.is_ascii_alphanumeric());
                if !plain {
                    return Err(plan_err(
                        "frontend.type",
                        format!("trtllm_serve: the worker URL `{u}` would need quoting in ser.yaml, which mcsup does not write yet"),
                        "give the nodes IPv4 addresses or plain host names (mcsup.node_addresses)",
                    ));
                }
                ser.push_str(&format!("  - {u}\n"));
            }
        }
        ser.push_str(&format!("hostname: 0.0.0.0\nport: {port}\n"));
        let ser_path = format!("{}/ser.yaml", c.log_dir.trim_end_matches('/'));
        let step = "mcsup.trtllm_serve_orchestrator".to_string();
        let mut argv = step_srun(
            c,
            [
                "--mpi",
                "pmix",
                "--kill-on-bad-exit=1",
                "--nodes",
                "1",
                "--ntasks",
                "1",
                "--nodelist",
                head,
                "--job-name",
                &step,
            ]
            .map(String::from),
        );
        argv.extend(["trtllm-serve", "disaggregated", "--config", &ser_path].map(String::from));
        argv.extend(o.args.iter().cloned());
        Ok(Some(Orchestrator {
            argv,
            env: o.env.clone(),
            ser_path,
            ser,
            step,
            port,
        }))
    }

    /// The engine file of `mode`, as srtctl writes it, and where: `<log_dir>/trtllm_config_<mode>.yaml`.
    pub fn engine_file(&self, log_dir: &str, mode: Role) -> (String, String) {
        (
            config_path(log_dir, mode),
            self.files
                .get(&mode)
                .cloned()
                .unwrap_or_else(|| "{}\n".into()),
        )
    }

    /// The endpoint whose leader process is `leader`, as one process: the `srun` of its step
    /// (`mcsup.<process name>`), each rank running srtctl's command, with srtctl's environment.
    pub fn launch(&self, c: &LaunchContext, leader: &TopoProcess) -> WorkerLaunch {
        let mode = leader.mode;
        let name = endpoint_name(mode, leader.index);
        let step = step_name(mode, leader.index);
        let nodes: Vec<&str> = leader
            .endpoint_nodes
            .iter()
            .map(|n| c.node_names[*n].as_str())
            .collect();
        let per_node = leader.gpus.len();
        let mut argv = step_srun(
            c,
            SRUN_MPI.iter().map(|s| s.to_string()).chain([
                "--nodes".into(),
                nodes.len().to_string(),
                "--ntasks".into(),
                (nodes.len() * per_node).to_string(),
                "--ntasks-per-node".into(),
                per_node.to_string(),
                "--nodelist".into(),
                nodes.join(","),
                "--job-name".into(),
                step.clone(),
            ]),
        );
        if let Some(prof) = &c.profiling {
            let node = &c.node_names[leader.node];
            argv.extend(prof.nsys_prefix_trtllm(&c.log_dir, node, leader));
        }
        if self.numactl && mode != Role::Aggregated {
            argv.extend(["numactl", "-m", "0,1"].map(String::from));
        }
        argv.push("trtllm-llmapi-launch".into());
        let config = config_path(&c.log_dir, mode);
        let (health_port, mut ports) = if self.trtllm_serve.is_some() {
            // An aggregated endpoint is the job's frontend: it serves on the public port.
            let http = if mode == Role::Aggregated {
                super::frontend::PUBLIC_PORT
            } else {
                leader.http_port
            };
            argv.extend([
                "trtllm-serve".into(),
                c.model_arg.clone(),
                "--host".into(),
                "0.0.0.0".into(),
                "--port".into(),
                http.to_string(),
            ]);
            for (flag, v) in self.parallel.get(&mode).into_iter().flatten() {
                argv.extend([flag.to_string(), v.clone()]);
            }
            argv.extend(["--config".into(), config]);
            (http, vec![("http".to_string(), http)])
        } else {
            argv.extend(
                [
                    "python3",
                    "-m",
                    "dynamo.trtllm",
                    "--model-path",
                    &c.model_arg,
                    "--served-model-name",
                    &c.served_model_name,
                ]
                .map(String::from),
            );
            if mode != Role::Aggregated {
                argv.extend(["--disaggregation-mode".into(), mode.short().to_string()]);
            }
            argv.extend([
                "--extra-engine-args".into(),
                config,
                "--request-plane".into(),
                c.request_plane.clone(),
            ]);
            if self.publish_events {
                argv.push("--publish-events-and-metrics".into());
            }
            (leader.sys_port, Vec::new())
        };
        ports.insert(0, ("dyn_system".into(), leader.sys_port));
        // srtctl's `start_endpoint_worker` environment: `start_worker`'s without the request
        // plane (the ranks take it from `--request-plane`).
        let (mut before, after) = worker_env(c, leader);
        before.retain(|(k, _)| k != "DYN_REQUEST_PLANE");
        WorkerLaunch {
            name,
            argv,
            env_before: before,
            env_after: after,
            env_defaults: vec![(
                "TRTLLM_EPLB_SHM_NAME".into(),
                eplb_shm_name(c.job_id.as_deref(), mode, leader.index),
                "srtctl's per-endpoint EPLB shared-memory name (random there; named for the job and the endpoint here)",
            )],
            // Rank 0, which serves, runs on the leader node.
            health_port: leader.is_leader().then_some(health_port),
            ports,
            slurm_step: Some(step),
        }
    }
}

/// The process that runs endpoint `mode[index]` on its leader node.
pub fn endpoint_name(mode: Role, index: u32) -> String {
    format!("trtllm-{}-{index}", mode.short())
}

/// The Slurm step of endpoint `mode[index]` (its srun's `--job-name`).
pub fn step_name(mode: Role, index: u32) -> String {
    format!("mcsup.{}", endpoint_name(mode, index))
}

/// A step's srun: `srun [--jobid J] --overlap`, then `options`, then the step container's
/// options (when mcsup runs on the host), ready for the tasks' command.
fn step_srun(c: &LaunchContext, options: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut argv: Vec<String> = vec!["srun".into()];
    if let Some(job) = &c.job_id {
        argv.extend(["--jobid".into(), job.clone()]);
    }
    argv.push("--overlap".into());
    argv.extend(options);
    argv.extend(c.step_container.iter().flat_map(|x| x.srun_args()));
    argv
}

/// Where the ranks read their mode's engine file.
fn config_path(log_dir: &str, mode: Role) -> String {
    format!(
        "{}/trtllm_config_{}.yaml",
        log_dir.trim_end_matches('/'),
        mode.short()
    )
}

/// `TRTLLM_EPLB_SHM_NAME`: one per endpoint, distinct between the endpoints that share a node
/// and between jobs.
fn eplb_shm_name(job: Option<&str>, mode: Role, index: u32) -> String {
    format!(
        "moe_shared_{}_{}{index}",
        job.unwrap_or("nojob"),
        mode.short()
    )
}

/// What `yaml.safe_dump(config)` writes: keys sorted, block style, a sequence inside a mapping
/// not indented, `{}` for an empty mapping. Values srtctl's recipes hold (mappings, sequences,
/// booleans, null, integers, floats, plain words); a string PyYAML would have to quote is
/// refused rather than guessed at.
pub fn engine_config_yaml(config: &Mapping) -> Result<String, String> {
    if config.is_empty() {
        return Ok("{}\n".into());
    }
    let mut out = String::new();
    mapping(config, 0, &mut out)?;
    Ok(out)
}

fn mapping(m: &Mapping, indent: usize, out: &mut String) -> Result<(), String> {
    let mut entries: Vec<(&str, &Value)> = Vec::with_capacity(m.len());
    for (k, v) in m {
        let Value::String(k) = k else {
            return Err(format!("a key that is not a string: {k:?}"));
        };
        entries.push((k.as_str(), v));
    }
    entries.sort_by(|a, b| a.0.cmp(b.0));
    for (i, (k, v)) in entries.into_iter().enumerate() {
        // The first key of a mapping that is a sequence item follows its `- `.
        if i > 0 || !out.ends_with("- ") {
            out.push_str(&" ".repeat(indent));
        }
        out.push_str(&plain(k)?);
        out.push(':');
        value_after_key(v, indent, out)?;
    }
    Ok(())
}

fn value_after_key(v: &Value, indent: usize, out: &mut String) -> Result<(), String> {
    match v {
        Value::Mapping(m) if !m.is_empty() => {
            out.push('\n');
            mapping(m, indent + 2, out)
        }
        // PyYAML does not indent a sequence that is a mapping's value.
        Value::Sequence(s) if !s.is_empty() => {
            out.push('\n');
            sequence(s, indent, out)
        }
        other => {
            out.push(' ');
            out.push_str(&scalar(other)?);
            out.push('\n');
            Ok(())
        }
    }
}

fn sequence(s: &[Value], indent: usize, out: &mut String) -> Result<(), String> {
    for v in s {
        out.push_str(&" ".repeat(indent));
        out.push_str("- ");
        match v {
            Value::Mapping(m) if !m.is_empty() => mapping(m, indent + 2, out)?,
            Value::Sequence(inner) if !inner.is_empty() => {
                return Err("a sequence inside a sequence".into());
            }
            other => {
                out.push_str(&scalar(other)?);
                out.push('\n');
            }
        }
    }
    Ok(())
}

fn scalar(v: &Value) -> Result<String, String> {
    Ok(match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) if n.is_f64() => python_float(n.as_f64().unwrap_or(f64::NAN)),
        Value::Number(n) => n.to_string(),
        Value::String(s) => plain(s)?,
        Value::Mapping(_) => "{}".into(),
        Value::Sequence(_) => "[]".into(),
        Value::Tagged(t) => return Err(format!("a tagged value: {t:?}")),
    })
}

/// Python's `repr` of a float as PyYAML writes it: `0.8`, `2.0`, `1.0e-05`, `.inf`, `.nan`.
fn python_float(f: f64) -> String {
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf" } else { "-.inf" }.into();
    }
    let exp = if f == 0.0 {
        0
    } else {
        f.abs().log10().floor() as i32
    };
    if (-4..16).contains(&exp) {
        let s = format!("{f}");
        return if s.contains('.') { s } else { format!("{s}.0") };
    }
    // Python: `1e-05`, `1.5e+16`; PyYAML adds `.0` to a mantissa without a point.
    let s = format!("{f:e}");
    let (mantissa, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    let mantissa = if mantissa.contains('.') {
        mantissa.to_string()
    } else {
        format!("{mantissa}.0")
    };
    format!("{mantissa}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

/// A string PyYAML writes without quotes; anything it would quote is refused.
fn plain(s: &str) -> Result<String, String> {
    const YAML11_WORDS: [&str; 11] = [
        "yes", "no", "true", "false", "on", "off", "y", "n", "null", "~", "",
    ];
    let word = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c))
        && s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '/')
        && !YAML11_WORDS.contains(&s.to_ascii_lowercase().as_str());
    if word {
        Ok(s.to_string())
    } else {
        Err(format!(
            "`{s}` would need quoting in srtctl's YAML, which mcsup does not write yet"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_as_python_writes_them() {
        for (f, want) in [
            (0.8, "0.8"),
            (2.0, "2.0"),
            (0.0001, "0.0001"),
            (0.00001, "1.0e-05"),
            (1.5e16, "1.5e+16"),
            (f64::INFINITY, ".inf"),
        ] {
            assert_eq!(python_float(f), want);
        }
    }

    #[test]
    fn words_pyyaml_would_retype_are_refused() {
        assert!(plain("UCX").is_ok() && plain("/logs/x.yaml").is_ok());
        for s in ["yes", "Off", "1", "a b", "", "x: y"] {
            assert!(plain(s).is_err(), "{s}");
        }
    }
}

/// `trtllm`: TRT-LLM, each endpoint one Slurm step over its nodes.
#[derive(Debug)]
pub struct Trtllm;

impl super::EngineKind for Trtllm {
    fn name(&self) -> &'static str {
        "trtllm"
    }

    fn flags_section(&self) -> &'static str {
        "trtllm_config"
    }

    /// Its per-mode settings are `backend.trtllm_config` (read by its settings), not flags.
    fn role_args(&self) -> super::RoleArgs {
        super::RoleArgs::Unread
    }

    fn recipe_keys(&self) -> &'static [&'static str] {
        RECIPE_KEYS
    }

    fn dynamo_module(&self) -> &'static str {
        "dynamo.trtllm"
    }

    fn steps_from_host(&self) -> bool {
        true
    }

    fn underivable(&self, recipe: &Recipe, has_layout: bool) -> Option<super::Underivable> {
        let srtctl = "srtctl starts each TRT-LLM endpoint as one MPI job over all of its nodes (one `srun --mpi=pmix` per endpoint, one rank per GPU)";
        if recipe.engine.is_some() {
            return Some(super::Underivable {
                key: "engine.type",
                srtctl,
                gap: "mcsup derives TRT-LLM endpoints from srt-slurm v1 recipes (backend.type: trtllm); it does not read 2.0's engine: trtllm yet",
                fix: "run this recipe with srtctl for now, write it as a v1 recipe (backend.type: trtllm with resources: worker counts), or list each node's processes under mcsup.workers.<role>",
            });
        }
        (!has_layout).then_some(super::Underivable {
            key: "resources",
            srtctl,
            gap: "mcsup derives TRT-LLM endpoints from srtctl's layout, which needs the worker counts under resources: (prefill_workers and decode_workers, or agg_workers)",
            fix: "give resources.prefill_workers/decode_workers (or agg_workers) with their nodes, as srtctl recipes do; or list each node's processes under mcsup.workers.<role>",
        })
    }

    /// srt-slurm v1's `backend:`; 2.0's `engine: trtllm` is not read yet.
    fn settings(
        &self,
        inputs: &super::EngineInputs<'_, '_>,
    ) -> Result<Option<std::sync::Arc<dyn super::Engine>>, PlanError> {
        if inputs.recipe.engine.is_some() {
            return Ok(None);
        }
        Ok(Some(std::sync::Arc::new(TrtllmSettings::from_recipe(
            inputs.recipe,
            inputs.frontend,
        )?)))
    }
}

impl super::Engine for TrtllmSettings {
    fn kind(&self) -> &'static dyn super::EngineKind {
        &Trtllm
    }

    /// `p` is the endpoint's leader: the whole endpoint is one step.
    fn launch(
        &self,
        c: &LaunchContext,
        p: &TopoProcess,
        _flags: Option<&crate::recipe::FlagMap>,
        _kv_events: Option<&Value>,
    ) -> WorkerLaunch {
        TrtllmSettings::launch(self, c, p)
    }

    fn step_per_endpoint(&self) -> bool {
        true
    }

    fn sequential_start(&self) -> u32 {
        self.sequential_node_start
    }

    fn mode_file(&self, log_dir: &str, mode: Role) -> Option<(String, String, String)> {
        let (path, contents) = self.engine_file(log_dir, mode);
        Some((
            path,
            contents,
            format!(
                "TRT-LLM engine settings of the {} endpoints (backend.trtllm_config.{}), as srtctl writes them: every rank reads it",
                mode.short(),
                mode.as_str()
            ),
        ))
    }

    fn orchestrator(
        &self,
        c: &LaunchContext,
        all: &[TopoProcess],
        head: &str,
    ) -> Result<Option<Orchestrator>, PlanError> {
        TrtllmSettings::orchestrator(self, c, all, head)
    }

    fn notes(&self, c: &LaunchContext, here: &[TopoProcess], out: &mut Vec<String>) {
        if here.iter().any(|p| p.is_leader()) {
            let rank = if self.trtllm_serve.is_some() {
                "`trtllm-llmapi-launch trtllm-serve`"
            } else {
                "`trtllm-llmapi-launch python3 -m dynamo.trtllm`"
            };
            out.push(match &c.step_container {
                Some(sc) => format!(
                    "the TRT-LLM endpoints started here run each rank as {rank} in {} (their step's --container-image); srtctl installs Dynamo into it first when dynamo.install is on, mcsup does not, so the image must have it",
                    sc.image
                ),
                None => format!(
                    "the TRT-LLM endpoints started here run each rank as {rank} without a container (no --step-container-image; `mcsup render` passes the recipe's): every node of the endpoint must have them where srun starts the ranks"
                ),
            });
        }
        if c.step_container.is_some() && self.trtllm_serve.is_none() {
            out.push(
                "etcd, NATS and the Dynamo frontend run on the host beside mcsup, not in the steps' container: the host needs them (mcsup.configs_dir for etcd and NATS, `python3 -m dynamo.frontend`)".into(),
            );
        }
    }
}
