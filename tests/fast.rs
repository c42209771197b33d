//! The fast tests, as one binary (one link for all of them): parsing, planning, rendering, the
//! supervisor with real processes (mcsup-testchild), preflight fixtures, the docs and the code
//! shape. Each file of `tests/` named below is one module; `scripts/quick-test.sh` runs this
//! binary. The end-to-end binaries are `e2e` (real Mooncake, etcd/NATS, Dynamo) and `slurm`.

mod common;
#[path = "common/node_plan.rs"]
mod node_plan;

mod bad_recipes;
mod bad_recipes_v2;
mod diagnosis;
mod docs;
mod docs_plan_format;
mod gid_select;
mod hardening_cotenant;
mod hardening_frozen;
mod hardening_inputs;
mod hardening_logdir;
mod hardening_readers;
mod hardening_signals;
mod job_order;
mod job_view_scale;
mod metrics;
mod migrate;
mod module_graph;
mod mooncake_configs;
mod mooncake_plan;
mod plan_fatal_markers;
mod plan_services;
mod plan_snapshots;
mod plan_stop_budgets;
mod portable_release;
mod preflight;
mod render_sbatch;
mod secrets_cli;
mod size_table;
mod srt_slurm_2_catalogue;
mod srtctl_benchmark;
mod srtctl_sweeps;
mod srtctl_workers;
mod status_job;
mod supervisor_cycles;
mod supervisor_inprocess;
mod supervisor_scenarios;
mod timeline;
