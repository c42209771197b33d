//! The preflight: checks this node before anything starts, and says what is wrong and how to fix it.
//!
//! Checks read the system only through [`system::Sysroot`] (a root directory: `/` live, or a
//! fixture tree) and a few live probes (port binds, executables) that the caller can switch off.
//! [`run`] returns a [`Report`] value; the caller decides what a failure means (the CLI maps it to
//! exit code 1, `run` refuses to start). Human and JSON output both come from the report.

pub mod aggregate;
mod fabric;
pub mod hca_map;
mod leftovers;
pub mod residue;
pub use fabric::VARIABLES as FABRIC_VARIABLES;
pub mod facts;
#[cfg(any(test, feature = "test-support"))]
pub mod fixture;
pub mod gpu;
pub mod memory;
pub mod mooncake_version;
mod names;
mod nofile;
pub mod rdma;
pub mod report;
pub mod slurm;
pub mod system;
pub mod tools;

pub use report::{Budget, BudgetLine, Check, Report, Status};

use crate::mooncake::size;
use crate::plan::{Plan, ProcessKind};

/// How much of the node the preflight reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every fact, also those no check of this plan can fail on: `mcsup preflight` prints them
    /// and the fleet view (`--aggregate`) compares them across nodes.
    Survey,
    /// Only what can turn into a warning or a failure for this plan: `mcsup run` acts on nothing
    /// else, and a node with no store, no HiCache and no RDMA then reads no `/proc` file and no
    /// wheel metadata before its first process starts. The verdicts are those of
    /// [`Scope::Survey`]; the skipped lines say what was not read.
    Verdicts,
}

/// Inputs that are not in the plan.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where `/sys`, `/proc` and `/dev` are read from.
    pub sysroot: std::path::PathBuf,
    /// Run checks that touch this machine directly (port binds, executables, `--help` of the
    /// installed master). Off when reading a captured node through `--sysroot`.
    pub live: bool,
    /// Slurm's memory variables (`SLURM_MEM_PER_NODE`, `SLURM_MEM_PER_CPU`, `SLURM_CPUS_ON_NODE`).
    pub slurm_env: Vec<(String, String)>,
    /// `PATH` used to find executables.
    pub path_var: Option<String>,
    /// Running inside a Slurm job (`SLURM_JOB_ID` set): `KillWait` is read with `scontrol`.
    pub in_slurm: bool,
    /// mcsup's inherited variables the RDMA checks consult (`NCCL_IB_GID_INDEX`, `MC_*`,
    /// `MOONCAKE_DEVICE`) when the recipe does not set them.
    pub inherited_env: Vec<(String, String)>,
    /// Every fact, or only those a verdict needs.
    pub scope: Scope,
    /// How long an outside tool may take to answer (`mooncake_master --help`, `scontrol show
    /// config`; a Python module probe gets twice as long) before the check says it did not.
    pub tool_timeout: std::time::Duration,
}

/// The default of [`Options::tool_timeout`].
pub const TOOL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What the store on this node will hold, from its resolved environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSizes {
    pub segment: u64,
    pub segment_source: String,
    pub local_buffer: u64,
    pub local_buffer_source: String,
    pub hugepages: bool,
}

/// The store's sizes as Mooncake's store service will read them (its defaults when unset).
pub fn store_sizes(plan: &Plan) -> Option<StoreSizes> {
    let store = plan
        .processes
        .iter()
        .find(|p| p.kind == ProcessKind::Store)?;
    let read = |name: &str, default: u64| -> (u64, String) {
        match store.env.iter().find(|v| v.name == name) {
            Some(v) => match size::parse_mooncake_size(&v.value) {
                Ok(n) => (n, format!("{name}={} ({})", v.value, v.source)),
                Err(_) => (default, format!("{name}={} (unparsable)", v.value)),
            },
            None => (default, format!("{name} unset: Mooncake default")),
        }
    };
    let (segment, segment_source) = read(
        "MOONCAKE_GLOBAL_SEGMENT_SIZE",
        crate::mooncake::DEFAULT_SEGMENT,
    );
    let (local_buffer, local_buffer_source) = read("MOONCAKE_LOCAL_BUFFER_SIZE", 1 << 30);
    let hugepages = store.env_value("MC_STORE_USE_HUGEPAGE").is_some_and(|v| {
        !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "" | "0" | "false" | "no" | "off"
        )
    });
    Some(StoreSizes {
        segment,
        segment_source,
        local_buffer,
        local_buffer_source,
        hugepages,
    })
}

/// The transfer protocol the node's Mooncake processes will use (store first, then workers).
pub fn protocol(plan: &Plan) -> String {
    let from = |kind: ProcessKind| {
        plan.processes
            .iter()
            .filter(|p| p.kind == kind)
            .find_map(|p| {
                p.env_value("MOONCAKE_PROTOCOL")
                    .map(|v| v.trim().to_ascii_lowercase())
            })
    };
    from(ProcessKind::Store)
        .or_else(|| from(ProcessKind::Worker))
        .unwrap_or_else(|| "tcp".into())
}

/// Run every check for this node.
pub fn run(plan: &Plan, opts: &Options) -> Report {
    let root = system::Sysroot::new(&opts.sysroot);
    let mut report = Report::default();
    let sizes = store_sizes(plan);
    let proto = protocol(plan);

    // RDMA first: it decides how many NICs the memlock check multiplies by.
    report.node = plan.node.name.clone();
    let survey = opts.scope == Scope::Survey;
    // The version decides which GID rule RDMA's checks predict, and whether TCP transfers
    // without the connection pool run the node out of ports.
    let tcp_clients = mooncake_version::tcp_without_pool(plan, &proto);
    let read_version = survey || proto == "rdma" || !tcp_clients.is_empty();
    let installed = if read_version {
        mooncake_version::detect(opts.path_var.as_deref())
    } else {
        None
    };
    let nics = if proto == "rdma" {
        let legacy = installed.as_ref().and_then(|i| {
            let rule =
                crate::mooncake::gid::LegacyGidRule::of(mooncake_version::triple(&i.version)?)?;
            Some((i.version.as_str(), rule))
        });
        let nics = rdma::check(
            plan,
            &root,
            &opts.inherited_env,
            opts.live,
            legacy,
            &mut report,
        );
        let hcas: Vec<gpu::HcaPlace> = mcsup_rdma::SysfsReader::new(root.path("/"))
            .scan()
            .map(|s| {
                s.devices
                    .iter()
                    .map(|d| gpu::hca_place(&root, &d.name, d.numa_node))
                    .collect()
            })
            .unwrap_or_default();
        gpu::check(&root, &hcas, &mut report);
        nics
    } else {
        report.push(Check::skip(
            "rdma",
            "protocol",
            format!("MOONCAKE_PROTOCOL is {proto}: RDMA checks skipped"),
        ));
        0
    };

    if read_version {
        mooncake_version::check_installed(installed.as_ref(), &proto, &mut report);
        mooncake_version::check_tcp_pool(&tcp_clients, installed.as_ref(), &mut report);
    } else {
        mooncake_version::skip_unread(&proto, &mut report);
    }
    let needs = memory::Needs {
        budget: survey || memory::has_budget(plan, sizes.as_ref()),
        limits: survey || (proto == "rdma" && sizes.is_some()),
    };
    let facts = memory::MemoryFacts::read_for(&root, &opts.slurm_env, needs);
    memory::check(plan, sizes.as_ref(), &facts, &mut report);
    memory::check_memlock(sizes.as_ref(), &proto, nics, &facts, &mut report);
    nofile::check(plan, &root, &mut report);

    fabric::check(plan, &root, &opts.inherited_env, opts.live, &mut report);
    residue::check(plan, &root, &mut report);
    leftovers::check(&root, &std::env::temp_dir(), &mut report);
    tools::check_ephemeral_ports(plan, &root, &mut report);
    slurm::check_stop_budgets(plan, &mut report);
    if opts.live {
        tools::check_ports(plan, &mut report);
        let (path, wait) = (opts.path_var.as_deref(), opts.tool_timeout);
        names::check(plan, wait, &mut report);
        tools::check_cwds(plan, &mut report);
        tools::check_executables(plan, path, wait, &mut report);
        tools::check_benchmark_scripts(plan, &mut report);
        tools::check_master_flags(plan, path, wait, &mut report);
        let kill_wait = slurm::read_kill_wait(opts.in_slurm, path, wait);
        slurm::check(plan, &kill_wait, &mut report);
    }
    report
}
