//! The run's set-up, before anything starts: stale Slurm steps cancelled, the log directory
//! claimed and the plan's files written, the writer, console and watchers started, the signal
//! listeners in place.

use std::collections::HashMap;
use std::time::Instant;

use regex::bytes::Regex;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use super::{control, watchers, Children, Msg, Report, Runtime};
use crate::plan::{Plan, ProbeSpec};
use crate::supervisor::machine::Machine;
use crate::supervisor::status::{self, Clock, EventsWriter};
use crate::supervisor::{logs, spawn, steps, watch, RunOptions, SupervisorError};

/// The least length at which the list of log readers is pruned of finished ones.
pub(super) const MIN_READERS_PRUNE: usize = 64;

/// A runtime ready to start the plan: with the scratch directory (held until the run ends),
/// the SIGCHLD listener and the loop's receiver.
pub(super) async fn runtime(
    plan: Plan,
    opts: RunOptions,
) -> Result<
    (
        Runtime,
        Option<logs::ScratchDir>,
        tokio::signal::unix::Signal,
        UnboundedReceiver<Msg>,
    ),
    SupervisorError,
> {
    let clock = Clock::new();
    let machine = Machine::new(&plan, Instant::now())?;
    match spawn::raise_open_files() {
        Ok(Some((from, to))) => tracing::info!(
            "open files: mcsup's own limit raised from {from} to {to} (its processes keep {from})"
        ),
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "could not raise the open-files limit"),
    }
    // Before the reaper runs (this waits for its own children) and before anything starts.
    for said in stale_steps(&plan) {
        tracing::warn!("{said}");
    }
    let matchers = compile_matchers(&plan)?;
    // The failure catalogue's searcher, built now rather than at the first spawn (whose time it
    // would delay).
    watch::stores::warm_finders();
    let drain = plan.shutdown.drain_signal.0;
    let node = plan.node.name.clone();
    let (tx, rx) = unbounded_channel::<Msg>();
    let (writer, scratch) = prepare_run_dir(&plan, &tx)?;
    let events = EventsWriter::new(writer.clone(), &node);
    // This thread spawns, reaps and probes: it should not wait for a busy child's slice to end.
    if let Err(e) = spawn::prefer_short_slice() {
        tracing::debug!(error = %e, "cannot ask for a short scheduler slice (the default stays)");
    }
    if let Err(e) = spawn::become_subreaper() {
        tracing::warn!(error = %e, "cannot become a child subreaper: orphaned grandchildren will escape to PID 1");
    }
    // Listen before the first spawn so no exit can be missed.
    let sigchld = signal(SignalKind::child())
        .map_err(|e| SupervisorError::Setup(format!("cannot listen for SIGCHLD: {e}")))?;
    let console = logs::Console::start(opts.console)
        .map_err(|e| SupervisorError::Setup(format!("cannot start the console thread: {e}")))?;
    // Every handler is in place now: the children's dispositions are worked out from these.
    spawn::Dispositions::refresh();
    let unit_roles = plan
        .processes
        .iter()
        .filter(|p| !p.roles.is_empty())
        .map(|p| (p.name.clone(), super::report::roles_of(&p.roles)))
        .collect();
    let watchers = watchers::Watchers::new(&plan).await;
    let heartbeat_due = Instant::now() + plan.periods.heartbeat;
    let mut rt = Runtime {
        machine,
        plan,
        drain,
        clock,
        events,
        writer,
        tx,
        console,
        children: Children {
            matchers,
            readers_prune_at: MIN_READERS_PRUNE,
            ..Children::default()
        },
        report: Report {
            version: None,
            due: None,
            heartbeat_due,
            here: crate::runfiles::where_am_i(),
            unit_roles,
            losses: Default::default(),
            stall_said: None,
        },
        watchers,
        file_size_reported: false,
        probing: HashMap::new(),
        sigkilled: Vec::new(),
        teardown_started: None,
        control: control::ControlState::default(),
    };
    rt.start_control()?;
    Ok((rt, scratch, sigchld, rx))
}

/// The Slurm job the steps belong to: the live job's (a plan file can come from anywhere), else
/// the plan's.
pub(super) fn job_of(plan: &Plan) -> Option<String> {
    std::env::var("SLURM_JOB_ID")
        .ok()
        .filter(|j| !j.is_empty())
        .or_else(|| plan.node.job_id.clone())
}

/// Cancel what an earlier mcsup of this node left of the plan's Slurm steps (`steps`).
fn stale_steps(plan: &Plan) -> Vec<String> {
    let names: Vec<String> = plan
        .processes
        .iter()
        .filter_map(|p| Some(p.slurm_step.as_ref()?.name.clone()))
        .collect();
    match job_of(plan) {
        Some(job) if !names.is_empty() => steps::cancel_stale(&job, &names),
        _ => Vec::new(),
    }
}

/// Make the run's directories and files, before anything starts: the log directory claimed
/// (and locked), the scratch directory, the plan's files, the events file rotated; then the
/// writer thread that owns them from here on.
fn prepare_run_dir(
    plan: &Plan,
    tx: &UnboundedSender<Msg>,
) -> Result<(logs::RunWriter, Option<logs::ScratchDir>), SupervisorError> {
    let log_dir = plan.log_dir.clone();
    let node = plan.node.name.clone();
    // Held until `run` returns: one mcsup per log directory and node (see `logs`).
    let log_dir_lock = logs::claim_log_dir(plan)?;
    std::fs::create_dir_all(&log_dir).map_err(|e| SupervisorError::io(&log_dir, e))?;
    let scratch = plan
        .scratch_dir
        .as_deref()
        .map(logs::ScratchDir::claim)
        .transpose()?;
    for f in &plan.files {
        if let Some(parent) = f.path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| SupervisorError::io(parent, e))?;
        }
        status::write_private_atomic(&f.path, f.contents.as_bytes())?;
    }
    for d in &plan.dirs {
        std::fs::create_dir_all(d).map_err(|e| SupervisorError::io(d, e))?;
    }
    let ev_path = crate::runfiles::events_path(&log_dir, &node);
    logs::rotate(&ev_path, logs::KEEP_ROTATED).map_err(|e| SupervisorError::io(&ev_path, e))?;
    let ev_file = status::open_events(&ev_path).map_err(|e| SupervisorError::io(&ev_path, e))?;
    let news_tx = tx.clone();
    let writer = logs::RunWriter::start(
        log_dir_lock,
        ev_file,
        logs::RunFiles {
            events: ev_path,
            status: crate::runfiles::status_path(&log_dir, &node),
            metrics: crate::runfiles::metrics_path(&log_dir, &node),
        },
        Box::new(move |news| {
            let _ = news_tx.send(Msg::Writer(news));
        }),
    )
    .map_err(|e| SupervisorError::Setup(format!("cannot start the log writer thread: {e}")))?;
    Ok((writer, scratch))
}

fn compile_matchers(plan: &Plan) -> Result<Vec<Vec<(usize, Regex)>>, SupervisorError> {
    plan.processes
        .iter()
        .map(|p| {
            let Some(r) = &p.readiness else { return Ok(Vec::new()) };
            r.probes
                .iter()
                .enumerate()
                .filter_map(|(i, probe)| match probe {
                    ProbeSpec::LogLine { pattern } => Some(Regex::new(pattern).map(|re| (i, re)).map_err(|e| {
                        SupervisorError::Setup(format!(
                            "process `{}`: log-line probe pattern {pattern:?} is not a valid regex: {e}",
                            p.name
                        ))
                    })),
                    _ => None,
                })
                .collect()
        })
        .collect()
}
