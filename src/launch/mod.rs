//! From a recipe to a Slurm job: `mcsup render` writes the batch script ([`script`]) with
//! srtctl's `#SBATCH` set ([`sbatch`]) under the cluster's `srtslurm.yaml` ([`cluster`]);
//! `mcsup submit` hands it to `sbatch`. Before anything is written, every node of the job is
//! planned as it will plan itself (`--role auto` on its place in the node list), so a recipe that
//! cannot run fails here, on the login node, not an hour later in the queue.

pub mod check;
pub mod cluster;
pub mod sbatch;
pub mod script;
pub mod submit;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::domain::Diagnostic;
use crate::node::{self, NodeInputs};
use crate::plan::{self, PlanOptions};
use crate::recipe::{self, Recipe, RecipeError};

pub use cluster::Cluster;
pub use sbatch::{Allocation, Directive, RenderEnv};
pub use script::Container;

/// The time the batch shell needs, after Slurm's warning, to pass the drain on to every step.
const FORWARD_MARGIN: Duration = Duration::from_secs(10);

/// What `mcsup render` was asked for.
#[derive(Debug, Clone)]
pub struct RenderRequest {
    pub recipe: PathBuf,
    /// `--cluster-config`; else `SRTSLURM_CONFIG`, else `srtslurm.yaml` in cwd or above.
    pub cluster_config: Option<PathBuf>,
    pub srtslurm_env: Option<String>,
    /// `--output-dir`; else the cluster's `output_dir`, else `./outputs`.
    pub output_dir: Option<PathBuf>,
    /// The mcsup binary the compute nodes run (mounted into the container).
    pub mcsup: PathBuf,
    /// `false` with `--no-container`: the steps run on the nodes' own file system.
    pub container: bool,
    /// `--roles`: each node's roles in node-list order; empty: `auto` on every node.
    pub roles: Vec<String>,
    pub cwd: PathBuf,
    pub env: RenderEnv,
}

/// A rendered job.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub script: String,
    pub allocation: Allocation,
    pub output_base: PathBuf,
    pub cluster: Option<PathBuf>,
    /// Per node (in node-list order): the roles it will run and how they were found.
    pub nodes: Vec<String>,
    pub early_warning: Duration,
    pub container: Option<Container>,
    /// What the job is for, in words: the benchmark and where its scripts come from.
    pub benchmark: String,
    /// Where the nodes find etcd and nats-server when mcsup chose it (no container: the
    /// srt-slurm checkout's `configs/`).
    pub configs_dir: Option<PathBuf>,
}

/// Why a job could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{0}")]
    Recipe(#[from] RecipeError),
    #[error("{0}")]
    At(Diagnostic),
}

impl From<Diagnostic> for LaunchError {
    fn from(d: Diagnostic) -> Self {
        LaunchError::At(d)
    }
}

/// One job of a file and its batch script.
#[derive(Debug, Clone)]
pub struct Job {
    pub variant: recipe::variants::Variant,
    /// The job's recipe as the script carries it.
    pub text: String,
    pub rendered: Rendered,
}

/// The jobs of `req.recipe` as srtctl's `apply` makes them (one for a plain recipe; a sweep's or
/// an override file's variants, or those `FILE:SELECTOR` picks), each rendered: every variant is
/// planned on every node before any is returned.
pub fn render_all(req: &RenderRequest) -> Result<Vec<Job>, LaunchError> {
    use recipe::variants::{expand, to_text, Form};
    let (file, selector) = recipe::variants::split_selector(&req.recipe);
    let text = recipe::read_text(&file)?;
    let doc: Option<serde_yaml::Value> = serde_yaml::from_str(&text).ok();
    let form = doc.as_ref().map_or(Form::Single, Form::of);
    let req = RenderRequest {
        recipe: file.clone(),
        ..req.clone()
    };
    if form == Form::Single && selector.is_none() {
        let rendered = render_text(&req, &text)?;
        let recipe = doc.unwrap_or_default();
        let variant = expand(&recipe, None)
            .map_err(|e| recipe::variant_error(&file, e))?
            .remove(0);
        return Ok(vec![Job {
            variant,
            text,
            rendered,
        }]);
    }
    let doc = doc.unwrap_or_default();
    let variants =
        expand(&doc, selector.as_deref()).map_err(|e| recipe::variant_error(&file, e))?;
    if variants.is_empty() {
        return Err(LaunchError::At(Diagnostic {
            file: Some(file.clone()),
            key_path: "sweep".into(),
            position: None,
            message: "the sweep gives no job (a parameter's list is empty)".into(),
            fix: Some("give every sweep parameter one value or more".into()),
        }));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut jobs = Vec::new();
    for variant in variants {
        if !seen.insert(variant.job_name.clone()) {
            return Err(LaunchError::At(Diagnostic {
                file: Some(file.clone()),
                key_path: variant.selector.clone().unwrap_or_else(|| "name".into()),
                position: None,
                message: format!("two variants are named `{}`: their jobs and output directories would be taken for one", variant.job_name),
                fix: Some("give each variant its own `name`".into()),
            }));
        }
        let text = to_text(&variant.recipe);
        let rendered = render_text(&req, &text).map_err(|e| in_variant(&variant, e))?;
        jobs.push(Job {
            variant,
            text,
            rendered,
        });
    }
    Ok(jobs)
}

/// The srt-slurm checkout's `configs/` (`srtctl_root` of the cluster config), for a job with no
/// container and a recipe that names no `mcsup.configs_dir`.
fn configs_from_checkout(recipe: &Recipe, cluster: &Cluster, container: bool) -> Option<PathBuf> {
    let given = recipe.mcsup.as_ref().and_then(|m| m.configs_dir.as_ref());
    if container || given.is_some() {
        return None;
    }
    let dir = PathBuf::from(expand_vars(cluster.config.srtctl_root.as_deref()?)).join("configs");
    dir.is_dir().then_some(dir)
}

/// Where jobs write (`<base>/<job id>/`): `--output-dir`, else the cluster's `output_dir`, else
/// `./outputs`, absolute.
pub fn output_base(output_dir: Option<&Path>, cluster: &Cluster, cwd: &Path) -> PathBuf {
    absolute(
        cwd,
        &output_dir.map(Path::to_path_buf).unwrap_or_else(|| {
            cluster.config.output_dir.as_deref().map_or_else(
                || PathBuf::from("outputs"),
                |d| PathBuf::from(expand_vars(d)),
            )
        }),
    )
}

/// The cluster config found as srtctl finds it (`--cluster-config`, `SRTSLURM_CONFIG`, the
/// working directory or its two parents), or srtctl's defaults.
pub fn find_cluster(
    cluster_config: Option<&Path>,
    srtslurm_env: Option<&str>,
    cwd: &Path,
) -> Result<Cluster, LaunchError> {
    Ok(match cluster::find(cluster_config, srtslurm_env, cwd)? {
        Some(p) => cluster::load(&p)?,
        None => Cluster::default(),
    })
}

/// An error of one variant, said with the variant.
fn in_variant(v: &recipe::variants::Variant, e: LaunchError) -> LaunchError {
    let what = format!("variant {} ({})", v.job_name, v.label());
    match e {
        LaunchError::Recipe(RecipeError::Invalid(mut d)) => {
            d.message = format!("{what}: {}", d.message);
            LaunchError::Recipe(RecipeError::Invalid(d))
        }
        LaunchError::At(mut d) => {
            d.message = format!("{what}: {}", d.message);
            LaunchError::At(d)
        }
        other => other,
    }
}

/// Render the batch script of `req.recipe` (one job).
pub fn render(req: &RenderRequest) -> Result<Rendered, LaunchError> {
    let text = recipe::read_text(&req.recipe)?;
    render_text(req, &text)
}

/// Render the batch script of the recipe `text` (read from `req.recipe`).
fn render_text(req: &RenderRequest, text: &str) -> Result<Rendered, LaunchError> {
    let text = text.to_string();
    let mut recipe = recipe::parse_str(&req.recipe, &text)?;
    let cluster = find_cluster(
        req.cluster_config.as_deref(),
        req.srtslurm_env.as_deref(),
        &req.cwd,
    )?;
    let output_base = output_base(req.output_dir.as_deref(), &cluster, &req.cwd);
    plain_path("--output-dir", &output_base)?;
    plain_path("--mcsup", &req.mcsup)?;
    // Without a container nothing mounts srtctl's `/configs`: the checkout's own, when the
    // cluster config names one and the recipe does not say.
    let configs_dir = configs_from_checkout(&recipe, &cluster, req.container);
    if let Some(dir) = &configs_dir {
        recipe
            .mcsup
            .get_or_insert_with(Default::default)
            .configs_dir = Some(dir.display().to_string());
    }
    let recipe = recipe;
    let in_recipe = |e: crate::domain::PlanError| LaunchError::At(recipe.place(&req.recipe, &e));
    let allocation =
        sbatch::allocation(&recipe, &cluster.config, &req.env, &output_base).map_err(in_recipe)?;
    let (nodes, deadline) = plan_every_node(&recipe, allocation.nodes, &req.roles, &req.recipe)?;
    let early_warning = deadline + crate::slurm::KILL_MARGIN + FORWARD_MARGIN;
    let container = if req.container {
        Some(container(
            &recipe,
            &cluster,
            &req.env,
            &req.cwd,
            &req.recipe,
        )?)
    } else {
        None
    };
    let benchmark = benchmark_line(&recipe, &cluster, container.as_ref(), &req.recipe)?;
    let srun_options = sbatch::srun_options(&recipe).map_err(in_recipe)?;
    let script = script::Script {
        recipe_path: &absolute(&req.cwd, &req.recipe),
        recipe_text: &text,
        allocation: &allocation,
        early_warning_s: early_warning.as_secs_f64().ceil() as u64,
        output_base: &output_base,
        mcsup: &req.mcsup,
        container: container.as_ref(),
        host_mcsup: crate::engine::of_recipe(&recipe)
            .map_err(in_recipe)?
            .steps_from_host(),
        srun_options: &srun_options,
        roles: &req.roles,
        configs_dir: configs_dir.as_deref(),
    }
    .text();
    Ok(Rendered {
        script,
        configs_dir,
        allocation,
        output_base,
        cluster: cluster.path,
        nodes,
        early_warning,
        container,
        benchmark,
    })
}

/// The job's benchmark in words; an error when its scripts (srtctl's, from the checkout the
/// cluster config names) are not there to mount.
fn benchmark_line(
    recipe: &Recipe,
    cluster: &Cluster,
    container: Option<&Container>,
    path: &Path,
) -> Result<String, LaunchError> {
    use crate::engine::benchmark::{self as bench, SCRIPTS_IN_CHECKOUT, SCRIPTS_MOUNT};
    let in_recipe = |e: crate::domain::PlanError| LaunchError::At(recipe.place(path, &e));
    let b = bench::BenchmarkSettings::from_recipe(recipe).map_err(in_recipe)?;
    if b.kind == bench::MANUAL {
        return Ok(
            "manual: the job serves until it is stopped (scancel, or its time limit)".into(),
        );
    }
    let k = bench::kind(&b.kind).map_err(in_recipe)?;
    let Some(script) = k.script() else {
        return Ok(format!(
            "{} once the job is servable; the job ends with its exit status",
            b.kind
        ));
    };
    let Some(c) = container else {
        return Ok(format!(
            "{} runs {SCRIPTS_MOUNT}/{script}: without a container, each client node must have srtctl's scripts there (the preflight checks)",
            b.kind
        ));
    };
    if let Some((host, _)) = c.mounts.iter().find(|(_, ct)| ct == SCRIPTS_MOUNT) {
        return Ok(format!(
            "{} once the job is servable, srtctl's {SCRIPTS_MOUNT}/{script} from {host}; the job ends with its exit status",
            b.kind
        ));
    }
    let why = match (&cluster.config.srtctl_root, &cluster.path) {
        (Some(root), _) => format!(
            "srtctl_root ({root}) has no {SCRIPTS_IN_CHECKOUT} and src/srtctl/runtime_scripts"
        ),
        (None, Some(p)) => format!("{} names no srtctl_root", p.display()),
        (None, None) => "no srtslurm.yaml names srtctl_root".into(),
    };
    Err(LaunchError::At(
        Diagnostic::new(
            "benchmark.type",
            format!(
                "`{}` runs srtctl's {script}, which comes from an srt-slurm checkout: {why}",
                b.kind
            ),
            "set srtctl_root in srtslurm.yaml to your srt-slurm checkout (srtctl is not on PyPI), or set benchmark.type: manual".to_string(),
        )
        .in_file(path, recipe.positions.find("benchmark.type")),
    ))
}

/// Plan each node of an `n`-node job as it will plan itself, on stand-in names `node0..`: the
/// roles each gets (in words) and the longest drain plus teardown deadline among them.
fn plan_every_node(
    recipe: &Recipe,
    n: usize,
    roles: &[String],
    path: &Path,
) -> Result<(Vec<String>, Duration), LaunchError> {
    if !roles.is_empty() && roles.len() != n {
        return Err(Diagnostic::new(
            "--roles",
            format!("names {} node(s); the recipe's layout has {n}", roles.len()),
            format!("give {n} entries, one per node in node-list order (`prefill decode,prefill ...`), or leave --roles out"),
        )
        .into());
    }
    let names: Vec<String> = (0..n).map(|i| format!("node{i}")).collect();
    let nodelist = names.join(",");
    let addresses = recipe
        .mcsup
        .as_ref()
        .map(|m| m.node_addresses.clone())
        .unwrap_or_default();
    // Stand-in addresses: the plan needs one per node, the script never sees them.
    let resolver = |name: &str| {
        let i: u8 = name.strip_prefix("node")?.parse().ok()?;
        Some(std::net::IpAddr::from([10, 255, i / 250, i % 250 + 1]))
    };
    let mut out = Vec::new();
    let mut deadline = Duration::ZERO;
    for (i, name) in names.iter().enumerate() {
        let inputs = NodeInputs {
            node: Some(name.clone()),
            nodelist: Some(nodelist.clone()),
            job_id: Some("render".into()),
            hostname: name.clone(),
            cwd: PathBuf::from("/"),
            ..NodeInputs::default()
        };
        let role = roles.get(i).map_or("auto", String::as_str);
        let node_err = |e: Diagnostic| {
            let mut d = e;
            d.message = format!("node {i} of {n} (--role {role}): {}", d.message);
            LaunchError::At(d)
        };
        let ctx = node::resolve(&inputs, &addresses, &resolver).map_err(|e| {
            node_err(Diagnostic::new(
                "",
                e.to_string(),
                "check mcsup.node_addresses",
            ))
        })?;
        let plan = plan::plan_for_role(recipe, role, &ctx, PlanOptions::default())
            .map_err(|e| node_err(recipe.place(path, &e)))?;
        deadline = deadline.max(plan.shutdown.drain + plan.shutdown.deadline);
        let names: Vec<&str> = plan.roles.iter().map(|r| r.as_str()).collect();
        let what = if names.is_empty() {
            "no workers".to_string()
        } else {
            names.join(",")
        };
        out.push(match plan.roles_from {
            Some(why) => format!("{what}: {why}"),
            None => format!("{what} (--roles)"),
        });
    }
    Ok((out, deadline))
}

/// The recipe's container and srtctl's mounts (`RuntimeContext.from_config`, core/runtime.py
/// @c88ef731): the model at `/model` (not for `hf:` models), the cluster's `default_mounts`, the
/// recipe's `extra_mount`; plus srt-slurm's `configs/` at `/configs` when the cluster names its
/// checkout (`srtctl_root`), where mcsup finds etcd and nats-server as srtctl's jobs do.
fn container(
    recipe: &Recipe,
    cluster: &Cluster,
    env: &RenderEnv,
    cwd: &Path,
    path: &Path,
) -> Result<Container, LaunchError> {
    let at = |key: &str| recipe.positions.find(key);
    let in_recipe = |key: &str, msg: String, fix: String| {
        LaunchError::At(Diagnostic::new(key, msg, fix).in_file(path, at(key)))
    };
    let cluster_file = cluster
        .path
        .as_ref()
        .map_or("no srtslurm.yaml found".to_string(), |p| {
            p.display().to_string()
        });
    let (model, image) = aliases(recipe, &cluster.config);
    let Some(image) = image else {
        return Err(in_recipe(
            "model.container",
            "the recipe names no container image".into(),
            "set model.container (an image, a .sqsh file or an alias in srtslurm.yaml), or render with --no-container".into(),
        ));
    };
    if image.starts_with('/') || image.starts_with("./") {
        let file = absolute(cwd, Path::new(&image));
        if !file.is_file() {
            return Err(in_recipe(
                "model.container",
                format!("`{image}` is a path (an alias would not start with / or ./), and {} is not a file here", file.display()),
                format!("add the alias to `containers:` in the cluster config ({cluster_file}), or point model.container at the .sqsh file"),
            ));
        }
    }
    let mut mounts = Vec::new();
    if !model.starts_with("hf:") {
        let dir = absolute(cwd, Path::new(&model));
        if !dir.is_dir() {
            let aliases: Vec<&str> = cluster
                .config
                .model_paths
                .keys()
                .map(String::as_str)
                .collect();
            let given = recipe
                .raw_get(&["model", "path"])
                .and_then(|v| v.as_str())
                .unwrap_or("model");
            return Err(in_recipe(
                "model.path",
                format!(
                    "`{given}` is not an alias in the cluster config ({cluster_file}; model_paths: {}) and {} is not a directory here",
                    if aliases.is_empty() { "none".to_string() } else { aliases.join(", ") },
                    dir.display()
                ),
                "add the alias to model_paths in srtslurm.yaml, give the model's directory, or use an hf: id".into(),
            ));
        }
        mounts.push((dir.display().to_string(), "/model".to_string()));
    }
    if let Some(root) = &cluster.config.srtctl_root {
        let root = absolute(cwd, Path::new(&expand_vars(root)));
        let configs = root.join("configs");
        if configs.is_dir() {
            mounts.push((configs.display().to_string(), "/configs".to_string()));
        }
        // srtctl's own scripts, where its steps find them (the benchmark's client).
        if let Some((scripts, runtime)) = crate::engine::benchmark::scripts_in(&root) {
            use crate::engine::benchmark::{RUNTIME_MOUNT, SCRIPTS_MOUNT};
            mounts.push((runtime.display().to_string(), RUNTIME_MOUNT.to_string()));
            mounts.push((scripts.display().to_string(), SCRIPTS_MOUNT.to_string()));
        }
    }
    for (h, c) in cluster::pairs(&cluster.config.default_mounts) {
        mounts.push((
            absolute(cwd, Path::new(&expand_vars(&h)))
                .display()
                .to_string(),
            c,
        ));
    }
    push_extra_mounts(recipe, cwd, path, &mut mounts)?;
    // srtctl's lm-eval workspace, from the submitting shell's environment.
    if let Some(ws) = &env.infmax_workspace {
        mounts.push((ws.clone(), "/infmax-workspace".into()));
    }
    if recipe.raw_get(&["container_mounts"]).is_some() {
        return Err(in_recipe(
            "container_mounts",
            "mcsup render does not expand srtctl's path templates (`{log_dir}`, ...) in container_mounts".into(),
            "list the mounts under extra_mount as \"/host/path:/container/path\"".into(),
        ));
    }
    for (h, c) in &mounts {
        plain_path("a container mount", Path::new(h))?;
        plain_path("a container mount", Path::new(c))?;
    }
    Ok(Container {
        image,
        mounts: by_host_path(mounts),
    })
}

/// srtctl keeps its mounts in a dict keyed by the host path: a host path given twice is mounted
/// once, at the last container path given, in the first one's place.
fn by_host_path(mounts: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (h, c) in mounts {
        match out.iter_mut().find(|(x, _)| *x == h) {
            Some(m) => m.1 = c,
            None => out.push((h, c)),
        }
    }
    out
}

/// The recipe's `extra_mount`, `host:container` each.
fn push_extra_mounts(
    recipe: &Recipe,
    cwd: &Path,
    path: &Path,
    mounts: &mut Vec<(String, String)>,
) -> Result<(), LaunchError> {
    let in_recipe = |key: &str, msg: String, fix: String| {
        LaunchError::At(Diagnostic::new(key, msg, fix).in_file(path, recipe.positions.find(key)))
    };
    match recipe.raw_get(&["extra_mount"]) {
        None => {}
        Some(serde_yaml::Value::Sequence(items)) => {
            for item in items {
                let spec = item.as_str().unwrap_or_default();
                let Some((h, c)) = spec.split_once(':') else {
                    return Err(in_recipe(
                        "extra_mount",
                        format!("{item:?} is not `host:container`"),
                        "write each mount as \"/host/path:/container/path\"".into(),
                    ));
                };
                let host = absolute(cwd, Path::new(&expand_home(&expand_vars(h))));
                mounts.push((host.display().to_string(), c.to_string()));
            }
        }
        Some(v) => {
            return Err(in_recipe(
                "extra_mount",
                format!("{v:?} is not a list"),
                "write extra_mount: [\"/host:/container\"]".into(),
            ))
        }
    }
    Ok(())
}

/// `model.path` and `model.container` after srtctl's alias resolution
/// (`resolve_config_with_defaults`: an exact key of `model_paths` / `containers`), then `$VARS`
/// expanded as srtctl expands them when it uses them. `model.path` defaults to `model`.
pub fn aliases(recipe: &Recipe, cluster: &cluster::ClusterConfig) -> (String, Option<String>) {
    let raw = |k: &str| match recipe.raw_get(&["model", k]) {
        Some(serde_yaml::Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    let model = raw("path").unwrap_or_else(|| "model".into());
    let model = cluster.model_paths.get(&model).cloned().unwrap_or(model);
    let image = raw("container").map(|c| cluster.containers.get(&c).cloned().unwrap_or(c));
    (expand_vars(&model), image.map(|i| expand_vars(&i)))
}

/// A path that goes into `#SBATCH` lines and pyxis' comma- and colon-separated mount lists as
/// is: no separators, quotes, `$`, whitespace or control characters.
fn plain_path(what: &str, p: &Path) -> Result<(), Diagnostic> {
    let s = p.display().to_string();
    match s
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || ",:\"'$`\\".contains(*c))
    {
        None => Ok(()),
        Some(c) => Err(Diagnostic::new(
            what,
            format!("{s} contains {c:?}, which a batch script or a pyxis mount list would split or expand"),
            "use a path without whitespace, quotes, `$`, `,` or `:`",
        )),
    }
}

/// `p` against `cwd`, lexically (srtctl's `Path.resolve()` without following links).
fn absolute(cwd: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// `$VAR` and `${VAR}` from the environment, as Python's `os.path.expandvars` (unknown ones stay).
fn expand_vars(s: &str) -> String {
    let re = regex::Regex::new(r"\$(\w+|\{[^}]*\})").expect("a valid pattern");
    re.replace_all(s, |c: &regex::Captures| {
        let name = c[1].trim_start_matches('{').trim_end_matches('}');
        std::env::var(name).unwrap_or_else(|_| c[0].to_string())
    })
    .into_owned()
}

/// A leading `~` as the home directory (`Path.expanduser`).
fn expand_home(s: &str) -> String {
    match (s.strip_prefix('~'), std::env::var("HOME")) {
        (Some(rest), Ok(home)) if rest.is_empty() || rest.starts_with('/') => {
            format!("{home}{rest}")
        }
        _ => s.to_string(),
    }
}
