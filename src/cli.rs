//! The command line: argument types (clap) and the glue from arguments to library calls.
//!
//! Two-stage resolution: clap parses what the user typed; [`node_inputs`] and [`load_plan`]
//! resolve it against the environment and the recipe. Printing happens here, never in the library.
// The doc comments below are clap's help text, printed as written: `<job>` there is a
// placeholder for the reader, not an HTML tag.
#![allow(rustdoc::invalid_html_tags)]

use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use crate::exit::ExitCode;
use crate::node::{self, MasterMode, NodeInputs};
use crate::plan::{self, Plan};
use crate::recipe::{self, RecipeError};
use crate::render;
use crate::supervisor::{self, LogFormat, RunOptions};

/// Per-node supervisor for Mooncake Store and SGLang/vLLM workers under Slurm.
///
/// Inside an srun step: `mcsup --role decode --recipe job.yaml`. `run` is the default command.
#[derive(Debug, Parser)]
#[command(
    name = "mcsup",
    version,
    args_conflicts_with_subcommands = true,
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Cmd>,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Each subcommand's arguments are built only when it is the one given (`defer`): `run`, the
/// command a job starts, does not pay for the others' (clap builds every argument of every
/// subcommand on each parse otherwise).
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Cmd {
    /// Run this node's plan: master (infra node), store, workers; supervise; tear down in order.
    Run(RunArgs),
    /// Print this node's resolved plan without running anything (dry-run).
    Plan(PlanArgs),
    /// Check this node (RDMA devices, GID index, memlock, DRAM budget, ports, tools) and say
    /// what is wrong and how to fix it. Exit 0 pass, 1 fail.
    Preflight(PreflightArgs),
    /// Print the status file written by a running (or finished) mcsup.
    Status(StatusArgs),
    /// Write the batch script of a recipe: srtctl's #SBATCH set, an early warning sized for the
    /// ordered teardown, one `mcsup run --role auto` step per node inside the recipe's container.
    /// Every node is planned first: a recipe that cannot run fails here.
    Render(RenderArgs),
    /// Render, then submit with sbatch; prints the job id and how to follow the job.
    Submit(SubmitArgs),
    /// Print the srt-slurm 2.0 form (schema: 2, engine, roles, services) of a v1 recipe,
    /// including the seed's `mooncake_kv_store.standalone`.
    Migrate {
        /// The v1 recipe.
        recipe: PathBuf,
    },
    /// Draw every process of every node of a job on one time axis, from the events files in the
    /// job's log directory: one self-contained HTML file (inline SVG).
    Timeline {
        /// The job's log directory (default: ./mcsup-logs/<job>).
        log_dir: Option<PathBuf>,
        /// Where to write the HTML.
        #[arg(
            short = 'o',
            long,
            value_name = "FILE",
            default_value = "timeline.html"
        )]
        output: PathBuf,
    },
    /// Tell how a job failed, from the events files in its log directory: which process
    /// failed first (node, process, how, the known failure line it printed and the lines before
    /// it), what followed because of it (nodes drained, processes stopped, later failures), and
    /// the fix.
    Why {
        /// The job's log directory (default: ./mcsup-logs/<job>).
        log_dir: Option<PathBuf>,
        /// Print it as JSON.
        #[arg(long)]
        json: bool,
    },
    /// One line per job under an output directory (as `mcsup submit` lays it out): job id,
    /// name, Slurm state, time to servable, and its outcome (the benchmark's result, or the
    /// first failure).
    Jobs {
        /// The output directory (default: `output_dir` of srtslurm.yaml, else ./outputs).
        output_dir: Option<PathBuf>,
        /// The cluster config (default: SRTSLURM_CONFIG, else srtslurm.yaml in the working
        /// directory or its two parents).
        #[arg(long, value_name = "FILE")]
        cluster_config: Option<PathBuf>,
    },
    /// Wait until each job ends, then exit with the outcome: 0 only when every job completed
    /// and its result stands; else the first failed job's mcsup exit code (1 when it ended
    /// without a final status: an empty queue is never a success); 124 at --timeout.
    Wait {
        /// Job ids (under the output directory) or job directories.
        #[arg(required = true)]
        jobs: Vec<String>,
        /// The output directory job ids are under (default: `output_dir` of srtslurm.yaml, else
        /// ./outputs).
        #[arg(long, value_name = "DIR")]
        output_dir: Option<PathBuf>,
        /// The cluster config (default: as `mcsup jobs` finds it).
        #[arg(long, value_name = "FILE")]
        cluster_config: Option<PathBuf>,
        /// Give up after this many seconds (exit code 124).
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<f64>,
        /// How often to look, in seconds.
        #[arg(long, value_name = "SECONDS", default_value = "5")]
        interval: f64,
    },
    /// Print shell completions.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

// What identifies the recipe, the roles and the node. (Not a doc comment: clap takes one as the
// description of every subcommand that flattens these arguments, over the subcommand's own.)
#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    /// Roles on this node: prefill, decode, agg/aggregated, or a comma list (co-located); `auto`
    /// (the default in a Slurm job, or with --nodelist): the roles srtctl's layout puts on this
    /// node, from its place in the job's node list (none on a dedicated infra or frontend node).
    #[arg(long, env = "MCSUP_ROLE", value_name = "ROLE[,ROLE]")]
    pub role: Option<String>,
    /// The srt-slurm style recipe (YAML).
    #[arg(long, env = "MCSUP_RECIPE", value_name = "FILE")]
    pub recipe: Option<PathBuf>,
    /// This node's name (default: SLURMD_NODENAME, else the host name).
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// The job's nodes in Slurm hostlist syntax (default: SLURM_JOB_NODELIST); the first is the
    /// infra node.
    #[arg(long, value_name = "HOSTLIST")]
    pub nodelist: Option<String>,
    /// Run the Mooncake master here: auto = only on the infra node.
    #[arg(long, value_enum, default_value_t = MasterMode::Auto)]
    pub master: MasterMode,
    /// The infra node's (master's) address, overriding name resolution.
    #[arg(long, value_name = "HOST")]
    pub master_addr: Option<String>,
    /// This node's address, overriding name resolution.
    #[arg(long, value_name = "IP")]
    pub node_ip: Option<String>,
    /// The log directory (status, events, every process's log), overriding the recipe's
    /// `mcsup.log_dir`.
    #[arg(long, env = "MCSUP_LOG_DIR", value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// Where etcd and nats-server are (srtctl's `/configs`), when the recipe's
    /// `mcsup.configs_dir` does not say (a batch script rendered without a container sets it to
    /// the srt-slurm checkout's `configs/`).
    #[arg(long, env = "MCSUP_CONFIGS_DIR", value_name = "DIR")]
    pub configs_dir: Option<PathBuf>,
    /// Fail when the recipe has a service mcsup does not run (a container, a build, a pool, a
    /// TRT-LLM donor...) instead of listing it in the plan; for `preflight`, warnings fail too.
    #[arg(long)]
    pub strict: bool,
    /// The container (pyxis `--container-image`) of the Slurm steps mcsup starts (TRT-LLM
    /// endpoints, the trtllm_serve orchestrator), when mcsup runs on the host: `mcsup render`
    /// passes the recipe's for a TRT-LLM job.
    #[arg(long, value_name = "IMAGE")]
    pub step_container_image: Option<String>,
    /// Their `--container-mounts` (`HOST:CONTAINER[,...]`).
    #[arg(long, value_name = "MOUNTS", requires = "step_container_image")]
    pub step_container_mounts: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Run a plan saved by `mcsup plan --json` instead of resolving a recipe.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["role", "recipe"])]
    pub plan_file: Option<PathBuf>,
    /// Format of mcsup's own log on stderr.
    #[arg(long, value_enum, default_value_t = LogFormatArg::Human)]
    pub log_format: LogFormatArg,
    /// Do not mirror children's output on stdout (the log files still get everything).
    #[arg(long)]
    pub no_console: bool,
    /// Start even if the preflight fails (its report is still logged).
    #[arg(long)]
    pub skip_preflight: bool,
    #[command(flatten)]
    pub tools: ToolTimeout,
}

#[derive(Debug, Clone, Args)]
pub struct PreflightArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// One JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Read /sys, /proc and /dev under DIR (a fixture or a captured node); skips the checks that
    /// only make sense on the live machine (port binds, executables).
    #[arg(long, value_name = "DIR")]
    pub sysroot: Option<PathBuf>,
    /// Compare several nodes' `preflight --json` reports (files, or `-` for stdin; concatenated
    /// documents are fine) for cross-node differences that break Mooncake.
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with_all = ["role", "recipe", "sysroot"])]
    pub aggregate: Vec<PathBuf>,
    #[command(flatten)]
    pub tools: ToolTimeout,
}

// The preflight's bound on outside tools, for `preflight` and `run`. (Not a doc comment: clap
// would take it as the description of both subcommands.)
#[derive(Debug, Clone, Args)]
pub struct ToolTimeout {
    /// Seconds an outside tool may take to answer in the preflight (`mooncake_master --help`,
    /// `scontrol show config`) before its check says it did not.
    #[arg(long, value_name = "SECS", default_value_t = crate::preflight::TOOL_TIMEOUT.as_secs_f64(), value_parser = tool_timeout)]
    pub tool_timeout: f64,
}

/// `--tool-timeout`: a positive number of seconds, at most an hour.
fn tool_timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 3600.0 => Ok(v),
        _ => Err(format!("`{s}` is not a number of seconds in (0, 3600]")),
    }
}

#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// One JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// Show values of variables whose names look secret (TOKEN, SECRET, PASSWORD, KEY, CREDENTIAL).
    #[arg(long)]
    pub show_secrets: bool,
    /// Read the node's /sys under DIR (a fixture or a captured node) for what the plan derives
    /// from the node itself (`mcsup.network.per_gpu_hca`); default: this machine's, when the
    /// plan is for this node.
    #[arg(long, value_name = "DIR")]
    pub sysroot: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct RenderArgs {
    /// Write the script to FILE (default: stdout); for a file of several jobs (a sweep, an
    /// override file) a directory: DIR/<job name>/recipe.yaml and sbatch_script.sh per job.
    #[arg(short = 'o', long = "output", value_name = "FILE|DIR")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub job: JobArgs,
}

#[derive(Debug, Clone, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub job: JobArgs,
    /// Do not ask Slurm (sbatch --help, scontrol) what it would refuse before submitting.
    #[arg(long)]
    pub no_cluster_check: bool,
    /// Extra sbatch arguments, after `--`.
    #[arg(last = true, value_name = "SBATCH_ARGS")]
    pub sbatch_args: Vec<String>,
}

// How a recipe becomes a job, for render and submit. (Not a doc comment: clap would take it as
// both subcommands' description.)
#[derive(Debug, Clone, Args)]
pub struct JobArgs {
    /// The recipe (srt-slurm v1 or 2.0).
    #[arg(
        short = 'f',
        long = "file",
        visible_alias = "recipe",
        value_name = "FILE"
    )]
    pub recipe: PathBuf,
    /// The job writes under DIR/<job id>/ (default: `output_dir` of srtslurm.yaml, else
    /// ./outputs).
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// The cluster config (default: SRTSLURM_CONFIG, else srtslurm.yaml in the working directory
    /// or its two parents, as srtctl finds it).
    #[arg(long, value_name = "FILE")]
    pub cluster_config: Option<PathBuf>,
    /// The mcsup binary the nodes run, on a file system they all see (default: this one).
    #[arg(long, value_name = "PATH")]
    pub mcsup: Option<PathBuf>,
    /// Run mcsup on the nodes themselves, not in the recipe's container (clusters without
    /// pyxis, local tests).
    #[arg(long)]
    pub no_container: bool,
    /// Each node's roles in node-list order, space-separated (`prefill decode,prefill`), for
    /// recipes that list their workers under mcsup.workers; default: each node derives its own.
    #[arg(long, value_name = "ROLES")]
    pub roles: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// The job's log directory, as `timeline DIR` takes it (the same as --log-dir DIR).
    #[arg(value_name = "LOG_DIR", conflicts_with = "log_dir")]
    pub dir: Option<PathBuf>,
    // The log directory: DIR, else --log-dir (TargetArgs), else from --recipe, else
    // ./mcsup-logs/<job>.
    #[command(flatten)]
    pub target: TargetArgs,
    /// Print the raw JSON status.
    #[arg(long)]
    pub json: bool,
    /// Every node of the job: all status files in the log directory (a shared one on clusters)
    /// as one table, each node's outcome, what it waits on, the start-up's critical path and the
    /// slowest process to get ready.
    #[arg(long)]
    pub job: bool,
    /// With --job: list every process and every node's outcome, however large the job (by
    /// default a job of more than 40 processes lists the ones that need a look, and one of more
    /// than 16 nodes gives nodes with the same outcome one line).
    #[arg(long, requires = "job")]
    pub all: bool,
    /// Refresh every SECS seconds (default 2) until every node's mcsup has finished or is gone: in
    /// place on a terminal, else a new report (after a blank line) each time it changes.
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "2")]
    pub watch: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormatArg {
    Human,
    Json,
}

/// An error that ends the command, with its exit code.
#[derive(Debug)]
pub struct CliError {
    pub code: i32,
    pub message: String,
}

impl CliError {
    fn usage(message: impl Into<String>) -> Self {
        CliError {
            code: ExitCode::Usage.code(),
            message: message.into(),
        }
    }
}

impl From<RecipeError> for CliError {
    fn from(e: RecipeError) -> Self {
        CliError::usage(e.to_string())
    }
}

/// Gather node inputs: flags first, then Slurm's variables.
pub fn node_inputs(t: &TargetArgs) -> NodeInputs {
    let mut i = NodeInputs::from_env();
    if t.node.is_some() {
        i.node = t.node.clone();
    }
    if t.nodelist.is_some() {
        i.nodelist = t.nodelist.clone();
    }
    i.master = t.master;
    i.master_addr = t.master_addr.clone();
    i.node_ip = t.node_ip.clone();
    i
}

/// `--step-container-image` and `--step-container-mounts` (which clap accepts only with it).
fn step_container(t: &TargetArgs) -> Result<Option<crate::engine::StepContainer>, CliError> {
    match (&t.step_container_image, &t.step_container_mounts) {
        // clap refuses the mounts without the image.
        (None, _) => Ok(None),
        (Some(image), mounts) if !image.trim().is_empty() => {
            Ok(Some(crate::engine::StepContainer {
                image: image.clone(),
                mounts: mounts.clone().unwrap_or_default(),
            }))
        }
        (Some(_), _) => Err(CliError::usage(
            crate::domain::Diagnostic::new(
                "--step-container-image",
                "is empty",
                "pass the image (or .sqsh file) the steps run in",
            )
            .to_string(),
        )),
    }
}

/// Resolve recipe + roles + node into a plan.
pub fn load_plan(t: &TargetArgs) -> Result<Plan, CliError> {
    load(t).map(|(_, plan)| plan)
}

/// Whether the plan is for the machine mcsup runs on: `--node` not given, or naming it.
fn node_is_here(t: &TargetArgs) -> bool {
    let Some(n) = &t.node else { return true };
    let here = NodeInputs::from_env();
    here.node.as_ref() == Some(n) || here.hostname == *n
}

/// What the plan derives from the node itself (`mcsup.network`), read from `sysroot`, or from
/// this machine when the plan is for it; otherwise the plan says where it will be derived.
fn derive_from_node(plan: &mut Plan, sysroot: Option<&Path>, here: bool) -> Result<(), CliError> {
    use crate::plan::PER_GPU_HCA;
    use crate::preflight::{hca_map, system::Sysroot};
    let on_gpus = plan
        .processes
        .iter()
        .any(|p| p.kind == crate::plan::ProcessKind::Worker && !p.gpus().is_empty());
    if !plan.network.per_gpu_hca || !on_gpus {
        return Ok(());
    }
    let root = match sysroot {
        Some(dir) => Sysroot::new(dir),
        None if here => Sysroot::new(Path::new("/")),
        None => {
            plan.notes.push(format!(
                "{PER_GPU_HCA}: each worker's HCAs are paired with its GPUs on {} when `mcsup run` starts there (from its /sys); `mcsup plan` on that node, or with --sysroot, shows them",
                plan.node.name
            ));
            return Ok(());
        }
    };
    let node = plan.node.name.clone();
    let failed = |why: String| {
        CliError {
        code: ExitCode::PreflightFailed.code(),
        message: format!(
            "{PER_GPU_HCA}: cannot pair the GPUs of {node} with HCAs: {why}\n  fix: run where the node's GPUs and HCAs are visible (/sys/bus/pci, /sys/class/infiniband), or set mcsup.network.per_gpu_hca: false"
        ),
    }
    };
    let table = hca_map::table(&root).map_err(failed)?;
    hca_map::apply(plan, &table).map_err(failed)
}

/// Read the recipe (once: it may be a pipe) and resolve it into this node's plan.
pub fn load(t: &TargetArgs) -> Result<(recipe::Recipe, Plan), CliError> {
    let recipe_path = t.recipe.as_deref().ok_or_else(|| {
        CliError::usage(
            crate::domain::Diagnostic::new(
                "--recipe",
                "no recipe given",
                "pass --recipe FILE (or set MCSUP_RECIPE)",
            )
            .to_string(),
        )
    })?;
    let inputs = node_inputs(t);
    // In a Slurm job without --role, each node finds its own roles in srtctl's layout.
    let role_text = match t.role.as_deref() {
        Some(r) => r,
        None if inputs.nodelist.is_some() => "auto",
        None => {
            return Err(CliError::usage(
                crate::domain::Diagnostic::new(
                    "--role",
                    "no role given",
                    "pass --role prefill|decode|agg, or --role auto with --nodelist (or set MCSUP_ROLE)",
                )
                .to_string(),
            ))
        }
    };
    if role_text.trim() != "auto" {
        // A typo in --role is reported before the recipe is read.
        plan::parse_roles(role_text).map_err(|e| CliError::usage(e.to_string()))?;
    }
    let mut recipe = recipe::load_file(recipe_path)?;
    if let Some(dir) = &t.log_dir {
        recipe.mcsup.get_or_insert_with(Default::default).log_dir = Some(dir.display().to_string());
    }
    if let Some(dir) = &t.configs_dir {
        let mc = recipe.mcsup.get_or_insert_with(Default::default);
        if mc.configs_dir.is_none() {
            mc.configs_dir = Some(dir.display().to_string());
        }
    }
    let addresses = recipe
        .mcsup
        .as_ref()
        .map(|m| m.node_addresses.clone())
        .unwrap_or_default();
    // Every node's address at once, bounded; a stop request (held during `run`) ends the wait.
    let lookup = |names: &[String]| {
        node::lookup_all(names, node::LOOKUP_BUDGET, &|| {
            crate::domain::stop_pending().is_some()
        })
    };
    let ctx = node::resolve_with(&inputs, &addresses, &lookup)
        .map_err(|e| CliError::usage(e.to_string()))?;
    let plan = plan::plan_for_role(
        &recipe,
        role_text,
        &ctx,
        plan::PlanOptions {
            strict: t.strict,
            step_container: step_container(t)?,
        },
    )
    .map_err(|e| CliError::usage(recipe.place(recipe_path, &e).to_string()))?;
    Ok((recipe, plan))
}

fn preflight_options(
    sysroot: Option<&Path>,
    scope: crate::preflight::Scope,
    tool_timeout: f64,
) -> crate::preflight::Options {
    const SLURM: [&str; 3] = [
        "SLURM_MEM_PER_NODE",
        "SLURM_MEM_PER_CPU",
        "SLURM_CPUS_ON_NODE",
    ];
    let vars: Vec<(String, String)> = std::env::vars().collect();
    crate::preflight::Options {
        sysroot: sysroot.map_or_else(|| PathBuf::from("/"), Path::to_path_buf),
        live: sysroot.is_none(),
        slurm_env: vars
            .iter()
            .filter(|(k, _)| SLURM.contains(&k.as_str()))
            .cloned()
            .collect(),
        path_var: std::env::var("PATH").ok(),
        in_slurm: std::env::var_os("SLURM_JOB_ID").is_some_and(|v| !v.is_empty()),
        inherited_env: vars
            .into_iter()
            .filter(|(k, _)| {
                k.starts_with("MC_")
                    || k == "NCCL_IB_GID_INDEX"
                    || k == "MOONCAKE_DEVICE"
                    || k == "MOONCAKE_PROTOCOL"
                    || crate::preflight::FABRIC_VARIABLES.contains(&k.as_str())
            })
            .collect(),
        scope,
        tool_timeout: std::time::Duration::from_secs_f64(tool_timeout),
    }
}

/// Largest input of `preflight --aggregate` (one file or stdin): a report is a few KiB per node.
const MAX_REPORTS_BYTES: u64 = 64 << 20;

fn aggregate(args: &PreflightArgs) -> Result<i32, CliError> {
    use std::io::Read as _;
    let mut reports = Vec::new();
    for f in &args.aggregate {
        // Bounded like recipes and plans: `/dev/zero` or an endless pipe must not eat memory.
        let bytes = if f.as_os_str() == "-" {
            let mut b = Vec::new();
            std::io::stdin()
                .take(MAX_REPORTS_BYTES + 1)
                .read_to_end(&mut b)
                .map_err(|e| CliError::usage(format!("-: cannot read: {e}")))?;
            if b.len() as u64 > MAX_REPORTS_BYTES {
                return Err(CliError::usage(format!("-: the reports are larger than {} MiB\n  fix: aggregate fewer reports at a time", MAX_REPORTS_BYTES >> 20)));
            }
            b
        } else {
            recipe::read_input_file(f, MAX_REPORTS_BYTES)
                .map_err(|e| {
                    CliError::usage(format!(
                        "{}: {e}\n  fix: pass the file `mcsup preflight --json` wrote",
                        f.display()
                    ))
                })?
                .bytes
        };
        let text = String::from_utf8(bytes).map_err(|_| {
            CliError::usage(format!(
                "{}: not UTF-8 text\n  fix: pass the file `mcsup preflight --json` wrote",
                f.display()
            ))
        })?;
        let mut docs = crate::preflight::aggregate::parse_reports(&text).map_err(|e| {
            CliError::usage(format!("{}: not a `mcsup preflight --json` report: {e}\n  fix: collect reports with `srun mcsup preflight --json ... > reports.json`", f.display()))
        })?;
        reports.append(&mut docs);
    }
    if reports.is_empty() {
        return Err(CliError::usage(
            "no reports to aggregate\n  fix: pass files written by `mcsup preflight --json`",
        ));
    }
    let report = crate::preflight::aggregate::aggregate(&reports);
    print_report(&report, args)
}

fn preflight(args: PreflightArgs) -> Result<i32, CliError> {
    if !args.aggregate.is_empty() {
        return aggregate(&args);
    }
    let mut plan = load_plan(&args.target)?;
    derive_from_node(
        &mut plan,
        args.sysroot.as_deref(),
        node_is_here(&args.target),
    )?;
    let report = crate::preflight::run(
        &plan,
        &preflight_options(
            args.sysroot.as_deref(),
            crate::preflight::Scope::Survey,
            args.tools.tool_timeout,
        ),
    );
    print_report(&report, &args)
}

/// Print a preflight report (table or JSON); exit 0 when it passed, 1 when not.
fn print_report(report: &crate::preflight::Report, args: &PreflightArgs) -> Result<i32, CliError> {
    let text = if args.json {
        report.to_json(args.target.strict) + "\n"
    } else {
        report.to_human(args.target.strict)
    };
    print(&text)?;
    Ok(if report.passed(args.target.strict) {
        ExitCode::Ok.code()
    } else {
        ExitCode::PreflightFailed.code()
    })
}

/// Read and check a plan file for `run --plan-file`: the same bounds and validation a recipe
/// gets (a regular file or a pipe of bounded size; valid env names, signals that can stop and
/// drain, a bounded worker count, names usable as file names), plus what only a plan file can
/// get wrong: files written outside its log directory, secrets replaced by `<redacted>`, and a
/// file someone else could have written (mcsup runs its commands, often as root).
/// A plan is a few KiB per process: even `MAX_WORKERS_PER_NODE` workers stay far below.
const MAX_PLAN_BYTES: u64 = 16 << 20;
/// Workers are bounded as in a recipe; services add a few more per node.
const MAX_PLAN_PROCESSES: usize = 2 * crate::plan::workers::MAX_WORKERS_PER_NODE as usize;

fn read_plan_file(path: &Path) -> Result<Plan, CliError> {
    let bytes = read_trusted_plan(path)?;
    // A key mcsup does not know is refused, not dropped: a hand-edited `restrat` would otherwise
    // run with the default it meant to change (round 4's N18).
    let mut unknown = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(&bytes);
    let plan: Plan = serde_ignored::deserialize(&mut de, |key| unknown.push(key.to_string()))
        .and_then(|p| de.end().map(|()| p))
        .map_err(|e| {
            CliError::usage(format!(
                "{}:{}:{}: not a plan: {e}\n  fix: create it with `mcsup plan --json ... > FILE`",
                path.display(),
                e.line(),
                e.column()
            ))
        })?;
    if !unknown.is_empty() {
        return Err(CliError::usage(format!(
            "{}: {}: not a key of a plan (this mcsup's)\n  fix: remove {}, or write the plan again with this mcsup's `mcsup plan --json ... > FILE`",
            path.display(),
            unknown.join(", "),
            if unknown.len() == 1 { "it" } else { "them" }
        )));
    }
    // A plan printed without --show-secrets would run its children with `<redacted>` values.
    // (Hand-edited ones too: anything that reaches a process, its preamble or a planned file.)
    let placeholder = |s: &str| s.contains(crate::secrets::REDACTED);
    let has_placeholder = plan.processes.iter().any(|p| {
        p.env.iter().any(|v| placeholder(&v.value))
            || p.argv.iter().any(|a| placeholder(a))
            || p.preamble.as_deref().is_some_and(placeholder)
    }) || plan.files.iter().any(|f| placeholder(&f.contents));
    if plan.redacted || has_placeholder {
        return Err(CliError::usage(format!(
            "{}: this plan has secret values replaced by `<redacted>`; running it would hand them to the processes\n  fix: write the plan with `mcsup plan --json --show-secrets ... > FILE` (and keep the file private)",
            path.display()
        )));
    }
    let at = path.display();
    let refuse = |key: &str, message: String, fix: &str| {
        CliError::usage(format!("{at}: {key}: {message}\n  fix: {fix}"))
    };
    check_plan_processes(&plan, &refuse)?;
    check_plan_durations(&plan, &refuse)?;
    check_plan_paths(&plan, &refuse)?;
    Ok(plan)
}

/// The plan file's bytes, if only its reader (or root) could have written it: whoever can write
/// the plan chooses what mcsup runs, as whoever runs mcsup.
fn read_trusted_plan(path: &Path) -> Result<Vec<u8>, CliError> {
    use std::os::unix::fs::MetadataExt as _;
    let at = path.display();
    let file = recipe::read_input_file(path, MAX_PLAN_BYTES).map_err(|e| {
        let fix = match e {
            recipe::InputFileError::Io(_) => "check the path given to --plan-file".to_string(),
            recipe::InputFileError::TooLarge { .. } => format!(
                "check that --plan-file names a plan written by `mcsup plan --json` (at most {} MiB)",
                MAX_PLAN_BYTES >> 20
            ),
            _ => "pass the file written by `mcsup plan --json --show-secrets ... > FILE` (a regular file or a pipe)".to_string(),
        };
        CliError::usage(format!("{at}: the plan {e}\n  fix: {fix}"))
    })?;
    // Whoever can write the plan chooses what mcsup runs, as whoever runs mcsup.
    let meta = &file.meta;
    let writers = match (meta.mode() & 0o020 != 0, meta.mode() & 0o002 != 0) {
        (true, true) => Some("its group and others"),
        (true, false) => Some("its group"),
        (false, true) => Some("others"),
        (false, false) => None,
    };
    if let Some(who) = writers {
        return Err(CliError::usage(format!(
            "{at}: the plan is writable by {who} (mode {:o}): whoever can change it chooses the commands mcsup runs\n  fix: chmod 600 {at}",
            meta.mode() & 0o7777
        )));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(CliError::usage(format!(
            "{at}: the plan belongs to uid {}, not to you (uid {me}) or root: its owner chooses the commands mcsup runs\n  fix: write your own copy with `mcsup plan --json --show-secrets ... > FILE` and chmod 600 it",
            meta.uid()
        )));
    }
    Ok(file.bytes)
}

/// Names that become file names, bounded counts, signals mcsup can use, valid env names.
fn check_plan_processes(
    plan: &Plan,
    refuse: &dyn Fn(&str, String, &str) -> CliError,
) -> Result<(), CliError> {
    // Names become file names in log_dir (`<node>.<process>.log`).
    let component = |n: &str| {
        !n.is_empty()
            && n != "."
            && n != ".."
            && !n.contains(['/', '\0'])
            && !n.chars().any(char::is_control)
    };
    if !component(&plan.node.name) {
        return Err(refuse(
            "node.name",
            format!(
                "`{}` cannot name files in the log directory",
                plan.node.name
            ),
            "use the node's host name (letters, digits, '-', '.')",
        ));
    }
    let workers = plan
        .processes
        .iter()
        .filter(|p| p.kind == crate::plan::ProcessKind::Worker)
        .count();
    if workers > crate::plan::workers::MAX_WORKERS_PER_NODE as usize
        || plan.processes.len() > MAX_PLAN_PROCESSES
    {
        return Err(refuse(
            "processes",
            format!(
                "{} processes ({workers} workers): mcsup runs at most {} workers and {MAX_PLAN_PROCESSES} processes on one node",
                plan.processes.len(),
                crate::plan::workers::MAX_WORKERS_PER_NODE
            ),
            "plan fewer workers (a recipe's `count` is bounded the same way)",
        ));
    }
    if let Some(why) = recipe::unusable_signal(plan.shutdown.drain_signal) {
        return Err(refuse(
            "shutdown.drain_signal",
            format!("{} cannot be used here: {why}", plan.shutdown.drain_signal),
            recipe::SIGNAL_FIX,
        ));
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, p) in plan.processes.iter().enumerate() {
        let key = format!("processes[{i}]");
        if !component(&p.name) || !names.insert(p.name.as_str()) {
            return Err(refuse(
                &format!("{key}.name"),
                format!("`{}` is empty, repeated, or cannot name a log file", p.name),
                "give each process a distinct name of letters, digits, '-', '_' or '.'",
            ));
        }
        if p.argv.first().is_none_or(|a| a.is_empty()) {
            return Err(refuse(
                &format!("{key}.argv"),
                format!("process `{}` has no program to run", p.name),
                "regenerate the plan with `mcsup plan --json --show-secrets`",
            ));
        }
        if let Some(why) = recipe::unusable_signal(p.stop.signal) {
            return Err(refuse(
                &format!("{key}.stop.signal"),
                format!(
                    "{} (process `{}`) cannot be used here: {why}",
                    p.stop.signal, p.name
                ),
                recipe::SIGNAL_FIX,
            ));
        }
        if let Some(v) = p.env.iter().find(|v| !recipe::valid_env_name(&v.name)) {
            return Err(refuse(
                &format!("{key}.env"),
                format!(
                    "`{}` (process `{}`) is not a valid environment variable name",
                    v.name, p.name
                ),
                "use letters, digits and underscores, not starting with a digit",
            ));
        }
    }
    Ok(())
}

/// Every duration of a hand-written plan within what the supervisor can keep: a probe interval
/// of 0 would probe ~50,000 times a second, a liveness period of a nanosecond likewise, and a
/// duration of years overflows the clock. A recipe's durations are bounded when it is read.
fn check_plan_durations(
    plan: &Plan,
    refuse: &dyn Fn(&str, String, &str) -> CliError,
) -> Result<(), CliError> {
    use std::time::Duration;
    const MS: Duration = Duration::from_millis(1);
    const DAY: Duration = Duration::from_secs(86_400);
    const YEAR: Duration = Duration::from_secs(31_536_000);
    let within = |key: String, d: Duration, min: Duration, max: Duration| {
        if d < min || d > max {
            Err(refuse(
                &key,
                format!("{} ms is outside {}..={} ms", d.as_millis(), min.as_millis(), max.as_millis()),
                "regenerate the plan with `mcsup plan --json --show-secrets` (or keep the value in that range)",
            ))
        } else {
            Ok(())
        }
    };
    within(
        "shutdown.deadline_ms".into(),
        plan.shutdown.deadline,
        Duration::ZERO,
        DAY,
    )?;
    within(
        "shutdown.drain_ms".into(),
        plan.shutdown.drain,
        Duration::ZERO,
        DAY,
    )?;
    for (i, p) in plan.processes.iter().enumerate() {
        let key = |k: &str| format!("processes[{i}].{k}");
        if let Some(r) = &p.readiness {
            within(key("readiness.interval_ms"), r.interval, MS, DAY)?;
            within(
                key("readiness.max_interval_ms"),
                r.max_interval,
                r.interval,
                DAY,
            )?;
            within(
                key("readiness.attempt_timeout_ms"),
                r.attempt_timeout,
                MS,
                DAY,
            )?;
            within(key("readiness.timeout_ms"), r.timeout, Duration::ZERO, YEAR)?;
            within(
                key("readiness.initial_delay_ms"),
                r.initial_delay,
                Duration::ZERO,
                YEAR,
            )?;
        }
        if let Some(l) = &p.liveness {
            within(key("liveness.period_ms"), l.period, 10 * MS, DAY)?;
            within(
                key("liveness.attempt_timeout_ms"),
                l.attempt_timeout,
                MS,
                DAY,
            )?;
        }
        let r = &p.restart;
        within(
            key("restart.backoff_initial_ms"),
            r.backoff_initial,
            Duration::ZERO,
            DAY,
        )?;
        within(
            key("restart.backoff_max_ms"),
            r.backoff_max,
            r.backoff_initial,
            DAY,
        )?;
        within(
            key("restart.reset_after_ms"),
            r.reset_after,
            Duration::ZERO,
            YEAR,
        )?;
        within(key("restart.window_ms"), r.window, Duration::ZERO, YEAR)?;
        within(
            key("restart.release_wait_ms"),
            r.release_wait,
            Duration::ZERO,
            DAY,
        )?;
        within(key("stop.grace_ms"), p.stop.grace, Duration::ZERO, DAY)?;
        if !(1.0..=100.0).contains(&r.backoff_factor) {
            return Err(refuse(
                &key("restart.backoff_factor"),
                format!("{} is outside 1..=100", r.backoff_factor),
                "use a factor from 1 (constant backoff) to 100",
            ));
        }
    }
    Ok(())
}

/// Lexically: nothing but plain names below log_dir (no `..`, no absolute detour).
fn check_plan_paths(
    plan: &Plan,
    refuse: &dyn Fn(&str, String, &str) -> CliError,
) -> Result<(), CliError> {
    // Round 4's N18: `log_dir: ""` ended in "error: : No such file or directory".
    if plan.log_dir.as_os_str().is_empty() {
        return Err(refuse(
            "log_dir",
            "is empty: the run's log directory must be named".to_string(),
            "give the directory the job's logs, events and status go to (an absolute path; `mcsup plan --json` writes one)",
        ));
    }
    let inside = |path: &std::path::Path| {
        path.strip_prefix(&plan.log_dir).is_ok_and(|rest| {
            rest.components().next().is_some()
                && rest
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)))
        })
    };
    let dirs = plan
        .dirs
        .iter()
        .enumerate()
        .map(|(i, d)| (format!("dirs[{i}]"), d));
    let files = plan
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| (format!("files[{i}].path"), &f.path));
    for (key, path) in dirs.chain(files) {
        if !inside(path) {
            return Err(refuse(
                &key,
                format!(
                    "{} is not inside the plan's log_dir ({}): a plan writes only there",
                    path.display(),
                    plan.log_dir.display()
                ),
                "regenerate the plan with `mcsup plan --json --show-secrets` (mcsup puts its files in log_dir)",
            ));
        }
    }
    // The scratch directory is removed after the run: only a name mcsup gives one is taken.
    if let Some(d) = &plan.scratch_dir {
        let named = d.is_absolute()
            && d.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("mcsup-") && n.len() > "mcsup-".len())
            && d.components()
                .skip(1)
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !named {
            return Err(refuse(
                "scratch_dir",
                format!(
                    "{} is not a scratch directory mcsup would name (an absolute <tmp>/mcsup-<job>-<node>): mcsup removes it after the run",
                    d.display()
                ),
                "regenerate the plan with `mcsup plan --json --show-secrets`",
            ));
        }
    }
    Ok(())
}

impl From<LogFormatArg> for LogFormat {
    fn from(f: LogFormatArg) -> LogFormat {
        match f {
            LogFormatArg::Human => LogFormat::Human,
            LogFormatArg::Json => LogFormat::Json,
        }
    }
}

impl Cli {
    /// How mcsup's own log is written, for the commands that log (`run`, the default); `None`
    /// for the others, whose output is their result. `main` initialises tracing with it, once.
    pub fn log_format(&self) -> Option<LogFormat> {
        match &self.command {
            None => Some(self.run.log_format.into()),
            Some(Cmd::Run(args)) => Some(args.log_format.into()),
            Some(_) => None,
        }
    }
}

fn print(text: &str) -> Result<(), CliError> {
    let text = crate::domain::signature::for_terminal(text);
    let mut out = std::io::stdout().lock();
    // A closed pipe (`mcsup plan | head`) is not an error worth a message.
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError {
            code: ExitCode::Usage.code(),
            message: format!("cannot write to stdout: {e}"),
        }),
    }
}

fn run(args: RunArgs) -> Result<i32, CliError> {
    // From here until the loop listens, a stop request waits (a preflight helper may be running;
    // see `supervisor::signals`).
    supervisor::hold_stop_signals();
    // A plan file carries everything the preflight needs (HiCache, headroom), so both paths
    // run it.
    let mut plan = match &args.plan_file {
        Some(p) => read_plan_file(p)?,
        None => load(&args.target)?.1,
    };
    let stopped_early = |during: &str, node: &str| {
        supervisor::stop_pending().map(|sig| {
            // The helpers it interrupted are gone (their groups killed); nothing else ran.
            tracing::warn!("{sig} during {during} on {node}: stopped before anything started");
            ExitCode::Ok.code()
        })
    };
    if let Some(code) = stopped_early("the plan", &plan.node.name) {
        return Ok(code);
    }
    // Whatever node the plan names, it runs here.
    derive_from_node(&mut plan, None, true)?;
    for w in &plan.warnings {
        tracing::warn!("{w}");
    }
    {
        // Only the verdicts: a warning or a failure is all `run` prints or acts on.
        let report = crate::preflight::run(
            &plan,
            &preflight_options(
                None,
                crate::preflight::Scope::Verdicts,
                args.tools.tool_timeout,
            ),
        );
        if let Some(code) = stopped_early("the preflight", &plan.node.name) {
            return Ok(code);
        }
        for c in report
            .checks
            .iter()
            .filter(|c| c.status >= crate::preflight::Status::Warn)
        {
            let fix = c
                .fix
                .as_deref()
                .map(|f| format!(" (fix: {f})"))
                .unwrap_or_default();
            if c.status == crate::preflight::Status::Fail {
                tracing::error!("preflight {} {}: {}{fix}", c.group, c.name, c.message);
            } else {
                tracing::warn!("preflight {} {}: {}{fix}", c.group, c.name, c.message);
            }
        }
        if !report.passed(false) {
            if args.skip_preflight {
                tracing::warn!("preflight failed; starting anyway (--skip-preflight)");
            } else {
                let failed: Vec<String> = report
                    .checks
                    .iter()
                    .filter(|c| c.status == crate::preflight::Status::Fail)
                    .map(|c| format!("{} {}: {}", c.group, c.name, c.message))
                    .collect();
                refused(
                    &plan,
                    &format!("preflight failed: {}", failed.join("; ")),
                    ExitCode::PreflightFailed.code(),
                );
                return Err(CliError {
                    code: ExitCode::PreflightFailed.code(),
                    message: format!("preflight failed on {}; nothing was started (see above; `mcsup preflight` shows the full report, --skip-preflight overrides)", plan.node.name),
                });
            }
        } else {
            tracing::info!("preflight passed ({} checks)", report.checks.len());
        }
    }
    let opts = RunOptions {
        console: !args.no_console,
    };
    let kept = plan.clone();
    let outcome = supervisor::run_blocking(plan, opts).map_err(|e| {
        refused(&kept, &e.to_string(), ExitCode::SetupFailed.code());
        CliError {
            code: ExitCode::SetupFailed.code(),
            message: e.to_string(),
        }
    })?;
    Ok(outcome.exit_code)
}

/// This node refused to start: leave its event and status (a failure to write them is said,
/// not added to the refusal's own error).
fn refused(plan: &Plan, why: &str, code: i32) {
    if let Err(e) = supervisor::record_refusal(plan, why, code) {
        tracing::warn!(
            "cannot record the refusal in {}: {e}",
            plan.log_dir.display()
        );
    }
}

/// Render every job of `job.recipe` (one for a plain recipe; a sweep's or an override file's
/// variants); the summary (what each node runs) goes to stderr.
fn render_for(job: &JobArgs) -> Result<Vec<crate::launch::Job>, CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::usage(format!("cannot read the working directory: {e}")))?;
    let mcsup = match &job.mcsup {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(|e| {
            CliError::usage(format!(
                "cannot find this mcsup's path ({e})\n  fix: pass --mcsup PATH"
            ))
        })?,
    };
    let req = crate::launch::RenderRequest {
        recipe: job.recipe.clone(),
        cluster_config: job.cluster_config.clone(),
        srtslurm_env: std::env::var("SRTSLURM_CONFIG").ok(),
        output_dir: job.output_dir.clone(),
        mcsup: if mcsup.is_absolute() {
            mcsup
        } else {
            cwd.join(mcsup)
        },
        container: !job.no_container,
        roles: job
            .roles
            .as_deref()
            .map(|r| r.split_whitespace().map(String::from).collect())
            .unwrap_or_default(),
        cwd,
        env: crate::launch::RenderEnv::from_env(),
    };
    let jobs = crate::launch::render_all(&req).map_err(|e| CliError::usage(e.to_string()))?;
    let mut summary = String::new();
    if let [one] = &jobs[..] {
        let r = &one.rendered;
        summary = format!(
            "{}: {} node(s), cluster config {}, outputs under {}/<job id>, {}\n",
            job.recipe.display(),
            r.allocation.nodes,
            r.cluster
                .as_ref()
                .map_or("none (srtctl's defaults)".into(), |p| p
                    .display()
                    .to_string()),
            r.output_base.display(),
            r.container
                .as_ref()
                .map_or("no container".into(), |c| format!("container {}", c.image)),
        );
        for (i, n) in r.nodes.iter().enumerate() {
            summary.push_str(&format!("  node {i}: {n}\n"));
        }
        summary.push_str(&format!(
            "  early warning: USR1 {} s before the time limit (drain + teardown deadline + margins)\n",
            r.early_warning.as_secs_f64().ceil()
        ));
        summary.push_str(&format!("  benchmark: {}\n", r.benchmark));
        if let Some(dir) = &r.configs_dir {
            summary.push_str(&format!(
                "  configs: {} (srtctl_root's checkout: no container mounts /configs)\n",
                dir.display()
            ));
        }
    } else {
        summary.push_str(&format!(
            "{}: {} jobs, every node of each planned\n",
            job.recipe.display(),
            jobs.len()
        ));
        for j in &jobs {
            summary.push_str(&format!(
                "  {} ({}): {} node(s), benchmark: {}\n",
                j.variant.job_name,
                j.variant.label(),
                j.rendered.allocation.nodes,
                j.rendered.benchmark
            ));
        }
    }
    crate::supervisor::stderr_write(summary.as_bytes());
    Ok(jobs)
}

fn render_job(a: RenderArgs) -> Result<i32, CliError> {
    let jobs = render_for(&a.job)?;
    let several = jobs.len() > 1;
    match (&a.output, several) {
        (None, false) => print(&jobs[0].rendered.script)?,
        (Some(path), false) => {
            let r = &jobs[0].rendered;
            // Replaced, never written through (a link planted there is replaced, not followed).
            crate::supervisor::write_atomic(path, r.script.as_bytes(), 0o755)
                .map_err(|e| CliError::usage(format!("cannot write the script: {e}")))?;
            crate::supervisor::stderr_write(
                format!(
                    "wrote {}: submit it with `mcsup submit` or with sbatch once {}/<job id>/logs exists (sbatch --hold, mkdir, scontrol release): Slurm does not create the directory of --output\n",
                    path.display(),
                    r.output_base.display()
                )
                .as_bytes(),
            );
        }
        (None, true) => {
            return Err(CliError::usage(format!(
                "{} holds {} job(s) (srtctl's sweep or override form): give `-o DIR` to write each job's recipe and batch script under DIR/<job name>/",
                a.job.recipe.display(),
                jobs.len()
            )))
        }
        (Some(dir), true) => {
            let mut out = String::new();
            for j in &jobs {
                let sub = dir.join(job_dir_name(&j.variant.job_name));
                std::fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))
                    .and_then(|()| crate::launch::submit::safe_base(dir))
                    .and_then(|()| crate::launch::submit::own_dir(&sub))
                    .map_err(CliError::usage)?;
                let write = |name: &str, text: &str, mode| {
                    crate::supervisor::write_atomic(&sub.join(name), text.as_bytes(), mode)
                        .map_err(|e| {
                            CliError::usage(format!("cannot write {}: {e}", sub.join(name).display()))
                        })
                };
                write("recipe.yaml", &j.text, 0o644)?;
                write("sbatch_script.sh", &j.rendered.script, 0o755)?;
                out.push_str(&format!(
                    "{}\t{}\t{} node(s)\t{}\n",
                    j.variant.job_name,
                    j.variant.label(),
                    j.rendered.allocation.nodes,
                    sub.display()
                ));
            }
            print(&out)?;
        }
    }
    Ok(ExitCode::Ok.code())
}

/// A job name as a directory name: a `/` would be a path.
fn job_dir_name(name: &str) -> String {
    let n: String = name
        .chars()
        .map(|c| if c == '/' || c.is_control() { '_' } else { c })
        .collect();
    match n.as_str() {
        "" | "." | ".." => format!("job{n}"),
        _ => n,
    }
}

fn submit_job(a: SubmitArgs) -> Result<i32, CliError> {
    let jobs = render_for(&a.job)?;
    if !a.no_cluster_check {
        use crate::launch::check;
        let facts = check::Facts::read();
        let problems: Vec<check::Problem> = jobs
            .iter()
            .flat_map(|j| check::problems(&j.rendered.allocation, &facts))
            .collect();
        if !problems.is_empty() {
            return Err(CliError::usage(check::message(
                &problems,
                jobs[0].rendered.cluster.as_deref(),
            )));
        }
    }
    let many = jobs.len() > 1;
    for (i, j) in jobs.iter().enumerate() {
        let r = &j.rendered;
        let s = crate::launch::submit::submit(r, &a.sbatch_args).map_err(|e| CliError {
            code: ExitCode::SetupFailed.code(),
            message: if many {
                format!(
                    "{}: {e} ({i} of {} jobs submitted before it)",
                    j.variant.job_name,
                    jobs.len()
                )
            } else {
                e
            },
        })?;
        if many {
            print(&format!(
                "submitted job {} {} ({}; {} nodes): {}\n",
                s.job_id,
                j.variant.job_name,
                j.variant.label(),
                r.allocation.nodes,
                s.dir.display()
            ))?;
        } else {
            print(&format!(
                "submitted job {} ({} nodes): {}\n{}",
                s.job_id,
                r.allocation.nodes,
                s.dir.display(),
                crate::launch::submit::next_steps(&s)
            ))?;
        }
    }
    Ok(ExitCode::Ok.code())
}

fn status(args: StatusArgs) -> Result<i32, CliError> {
    let (dir, node) = match (
        args.dir.as_ref().or(args.target.log_dir.as_ref()),
        &args.target.recipe,
    ) {
        (Some(d), _) => (d.clone(), args.target.node.clone()),
        (None, Some(_)) if args.target.role.is_some() => {
            let p = load_plan(&args.target)?;
            (p.log_dir, Some(p.node.name))
        }
        _ => (default_log_dir(), args.target.node.clone()),
    };
    let report = |now_ms: u64| -> Result<(String, bool), CliError> {
        if args.job {
            let (mut nodes, mut skipped) =
                supervisor::read_job(&dir).map_err(unreadable_log_dir)?;
            let finished = nodes
                .iter()
                .all(|(_, r)| r.status.exit_code.is_some() || !r.writer_alive);
            // The events say what failed first; a directory without them still has a status.
            let events = supervisor::read_job_events(&dir).ok().map(|(evs, s)| {
                skipped.extend(s);
                evs
            });
            for (node, read) in &mut nodes {
                if let Some((_, evs)) = events.iter().flatten().find(|(n, _)| n == node) {
                    read.finish_from_events(evs);
                }
            }
            tell_left_out(&skipped);
            let story = events.as_deref().map(crate::render::why::story);
            let text = if args.json {
                crate::render::job_status_json(&nodes, story.as_ref(), now_ms)
            } else {
                crate::render::job_status_human(&nodes, story.as_ref(), now_ms, args.all)
            };
            return Ok((text, finished));
        }
        let mut read =
            supervisor::read_status(&dir, node.as_deref()).map_err(unreadable_log_dir)?;
        if !read.writer_alive && read.status.exit_code.is_none() {
            if let Ok((evs, _)) = supervisor::read_job_events(&dir) {
                if let Some((_, evs)) = evs.iter().find(|(n, _)| *n == read.status.node) {
                    read.finish_from_events(evs);
                }
            }
        }
        let finished = read.status.exit_code.is_some() || !read.writer_alive;
        let text = if args.json {
            read.text
        } else {
            crate::render::status_human(&read.status, now_ms, read.writer_alive)
        };
        Ok((text, finished))
    };
    let Some(every) = args.watch else {
        print(&report(supervisor::wall_now_ms())?.0)?;
        return Ok(ExitCode::Ok.code());
    };
    if !(every.is_finite() && (0.1..=3600.0).contains(&every)) {
        return Err(CliError {
            code: ExitCode::Usage.code(),
            message: format!("--watch {every}: give a refresh interval from 0.1 to 3600 seconds"),
        });
    }
    watch(std::time::Duration::from_secs_f64(every), || {
        report(supervisor::wall_now_ms())
    })
}

/// The files of a job's log directory a view left out, on stderr (the view itself is on stdout).
/// Where `jobs`/`wait` find jobs: as `mcsup submit` put them.
fn jobs_base(
    output_dir: Option<&std::path::Path>,
    cluster_config: Option<&std::path::Path>,
) -> Result<PathBuf, CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::usage(format!("cannot read the working directory: {e}")))?;
    let cluster = match output_dir {
        Some(_) => crate::launch::Cluster::default(),
        None => crate::launch::find_cluster(
            cluster_config,
            std::env::var("SRTSLURM_CONFIG").ok().as_deref(),
            &cwd,
        )
        .map_err(|e| CliError::usage(e.to_string()))?,
    };
    Ok(crate::launch::output_base(output_dir, &cluster, &cwd))
}

fn wait_jobs(
    jobs: &[String],
    output_dir: Option<PathBuf>,
    cluster_config: Option<PathBuf>,
    timeout: Option<f64>,
    interval: f64,
) -> Result<i32, CliError> {
    let secs = |s: f64, what: &str| {
        std::time::Duration::try_from_secs_f64(s)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                CliError::usage(format!("--{what} {s}: give a number of seconds above 0"))
            })
    };
    let every = secs(interval, "interval")?;
    let timeout = timeout.map(|t| secs(t, "timeout")).transpose()?;
    let mut base = None;
    let mut targets = Vec::new();
    for j in jobs {
        let p = PathBuf::from(j);
        let dir = if p.is_dir() {
            p
        } else if !j.is_empty() && j.chars().all(|c| c.is_ascii_digit()) {
            if base.is_none() {
                base = Some(jobs_base(output_dir.as_deref(), cluster_config.as_deref())?);
            }
            base.as_ref().map(|b| b.join(j)).unwrap_or_default()
        } else {
            return Err(CliError::usage(format!(
                "`{j}` is neither a job id nor a job directory"
            )));
        };
        let id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
            return Err(CliError::usage(format!(
                "{}: a job directory is named by its job id (<output dir>/<job id>)",
                dir.display()
            )));
        }
        targets.push((id, dir));
    }
    let (done, timed_out) =
        match crate::jobs::wait(&targets, every, timeout, &crate::jobs::slurm_state) {
            Ok(j) => (j, false),
            Err(j) => (j, true),
        };
    print(&crate::jobs::table(&done))?;
    if timed_out {
        return Ok(124);
    }
    Ok(done
        .iter()
        .find_map(|j| match j.outcome {
            crate::jobs::Outcome::Failed(code, _) => Some(if code == 0 { 1 } else { code }),
            _ => None,
        })
        .unwrap_or(0))
}

fn tell_left_out(skipped: &[String]) {
    for s in skipped {
        let s = crate::domain::signature::for_terminal(s);
        supervisor::stderr_write(format!("mcsup: left out {s}\n").as_bytes());
    }
}

/// A log directory whose status or events files cannot be read (`status`, `timeline`): exit 1.
fn unreadable_log_dir(e: supervisor::SupervisorError) -> CliError {
    CliError {
        code: ExitCode::PreflightFailed.code(),
        message: e.to_string(),
    }
}

/// The job's log directory when none is named (and no recipe says): `./mcsup-logs/<job>`, the
/// job being `SLURM_JOB_ID`, else `local`.
fn default_log_dir() -> PathBuf {
    let job = std::env::var("SLURM_JOB_ID").unwrap_or_else(|_| "local".into());
    PathBuf::from("mcsup-logs").join(job)
}

/// `status --watch`: show `report()` every `every` until it says everything has finished (shown
/// once more), or stdout goes away. On a terminal each report replaces the last one (clear
/// screen, cursor home); elsewhere a report is printed when its text changed, after a blank line.
fn watch(
    every: std::time::Duration,
    mut report: impl FnMut() -> Result<(String, bool), CliError>,
) -> Result<i32, CliError> {
    use std::io::IsTerminal as _;
    let terminal = std::io::stdout().is_terminal();
    let mut last: Option<String> = None;
    loop {
        let (text, finished) = report()?;
        let text = crate::domain::signature::for_terminal(&text).into_owned();
        let out = if terminal {
            Some(format!("\x1b[H\x1b[2J{text}"))
        } else if last.as_deref() != Some(text.as_str()) {
            Some(if last.is_some() {
                format!("\n{text}")
            } else {
                text.clone()
            })
        } else {
            None
        };
        if let Some(out) = out {
            let mut stdout = std::io::stdout().lock();
            if stdout
                .write_all(out.as_bytes())
                .and_then(|_| stdout.flush())
                .is_err()
            {
                // The reader went away (`| head`, a closed terminal): nothing left to show.
                return Ok(ExitCode::Ok.code());
            }
        }
        if finished {
            return Ok(ExitCode::Ok.code());
        }
        last = Some(text);
        std::thread::sleep(every);
    }
}

/// Execute a parsed command line; returns the process exit code.
pub fn execute(cli: Cli) -> Result<i32, CliError> {
    match cli.command {
        None => run(cli.run),
        Some(Cmd::Run(a)) => run(a),
        Some(Cmd::Plan(a)) => {
            let mut plan = load_plan(&a.target)?;
            derive_from_node(&mut plan, a.sysroot.as_deref(), node_is_here(&a.target))?;
            let text = if a.json {
                render::plan_json(&plan, a.show_secrets) + "\n"
            } else {
                render::plan_human(&plan, a.show_secrets)
            };
            print(&text)?;
            Ok(ExitCode::Ok.code())
        }
        Some(Cmd::Preflight(a)) => preflight(a),
        Some(Cmd::Render(a)) => render_job(a),
        Some(Cmd::Submit(a)) => submit_job(a),
        Some(Cmd::Status(a)) => status(a),
        Some(Cmd::Migrate { recipe }) => {
            let text = recipe::read_text(&recipe)?;
            let m = crate::migrate::migrate(&recipe, &text).map_err(|e| match e {
                crate::migrate::MigrateError::Recipe(r) => CliError::from(r),
                other => CliError::usage(format!("{}: {other}", recipe.display())),
            })?;
            let mut out = format!(
                "# srt-slurm 2.0 form of {}, written by `mcsup migrate`\n",
                recipe.display()
            );
            for n in &m.notes {
                out.push_str(&format!("# note: {n}\n"));
            }
            out.push_str(&m.yaml);
            print(&out)?;
            Ok(ExitCode::Ok.code())
        }
        Some(Cmd::Timeline { log_dir, output }) => {
            let dir = log_dir.unwrap_or_else(default_log_dir);
            let (nodes, skipped) = supervisor::read_job_events(&dir).map_err(unreadable_log_dir)?;
            tell_left_out(&skipped);
            // The roles come from the status files; a node without a readable one is drawn
            // all the same, its processes ungrouped.
            let status: Vec<_> = nodes
                .iter()
                .filter_map(|(n, _)| supervisor::read_roles(&dir, n))
                .collect();
            let groups = crate::render::groups::Groups::from_status(&status);
            let html = crate::render::timeline_html(&nodes, &groups);
            // Private (it names every process of the job), and replaced, never written
            // through: a link planted at the name is replaced, not followed.
            crate::supervisor::write_atomic(&output, html.as_bytes(), 0o600).map_err(|e| {
                CliError {
                    code: ExitCode::Usage.code(),
                    message: format!("cannot write the timeline: {e}"),
                }
            })?;
            print(&format!(
                "{}: {} node(s) drawn from {}\n",
                output.display(),
                nodes.len(),
                dir.display()
            ))?;
            Ok(ExitCode::Ok.code())
        }
        Some(Cmd::Jobs {
            output_dir,
            cluster_config,
        }) => {
            let base = jobs_base(output_dir.as_deref(), cluster_config.as_deref())?;
            let jobs: Vec<crate::jobs::Job> = crate::jobs::list(&base)
                .map_err(CliError::usage)?
                .iter()
                .map(|(id, dir)| crate::jobs::describe(id, dir, crate::jobs::slurm_state(id)))
                .collect();
            if jobs.is_empty() {
                print(&format!("no job under {}\n", base.display()))?;
            } else {
                print(&crate::jobs::table(&jobs))?;
            }
            Ok(ExitCode::Ok.code())
        }
        Some(Cmd::Wait {
            jobs,
            output_dir,
            cluster_config,
            timeout,
            interval,
        }) => wait_jobs(&jobs, output_dir, cluster_config, timeout, interval),
        Some(Cmd::Why { log_dir, json }) => {
            let dir = log_dir.unwrap_or_else(default_log_dir);
            let (nodes, skipped) = supervisor::read_job_events(&dir).map_err(unreadable_log_dir)?;
            tell_left_out(&skipped);
            let story = crate::render::why::story(&nodes);
            // The log of the run that failed (rotated once per later restart).
            let log = story
                .first
                .as_ref()
                .map(|f| supervisor::log_tail(&dir, f.node, f.process, f.spawned_after, 5));
            let file = log.as_ref().map(|(p, _)| p.display().to_string());
            let text = if json {
                serde_json::to_string_pretty(&story.json(file.as_deref())).unwrap_or_default()
                    + "\n"
            } else {
                story.human(
                    file.as_deref().unwrap_or(""),
                    log.as_ref().map_or(&[][..], |(_, t)| t),
                )
            };
            print(&text)?;
            Ok(ExitCode::Ok.code())
        }
        Some(Cmd::Completions { shell }) => {
            let mut cmd = Cli::command();
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut cmd, "mcsup", &mut buf);
            print(&String::from_utf8_lossy(&buf))?;
            Ok(ExitCode::Ok.code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap checks its own definition only when a command is first parsed (a duplicate argument
    /// name panics then); check every subcommand here instead.
    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Each subcommand's help leads with its own description, also with its arguments deferred.
    #[test]
    fn each_subcommand_describes_itself() {
        for sub in Cli::command().get_subcommands() {
            let name = sub.get_name().to_string();
            let about = sub
                .get_about()
                .expect("every subcommand has a description")
                .to_string();
            let help = match Cli::try_parse_from(["mcsup", name.as_str(), "--help"]) {
                Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => e.to_string(),
                other => panic!("`mcsup {name} --help`: {other:?}"),
            };
            assert!(
                help.starts_with(&about),
                "`mcsup {name} --help` begins:\n{help}"
            );
        }
    }
}
