//! The loop as reaper and spawner: each process spawned with its output's reader (log file,
//! console, readiness matchers and the watchers' hooks), every exit reaped and routed, process
//! groups watched until empty, and signals sent (to a Slurm step through `scancel`).
//!
//! A spawn returns once the child is forked; how its exec went arrives later (`Msg::Exec`, read
//! off the loop from the handshake pipe), so an exec that hangs on a file system holds only that
//! child: the machine sees `Forked` at once (a group a stop can reach), then `Spawned` or
//! `SpawnFailed`. An exit reaped before its exec's outcome is held and routed after it.

use std::time::Duration;

use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};

use super::setup::{job_of, MIN_READERS_PRUNE};
use super::{Msg, Runtime};
use crate::domain::signature::SHOWN_CHARS;
use crate::supervisor::logs::{self, PumpConfig};
use crate::supervisor::machine::{Event, ExitStatus, Pid};
use crate::supervisor::{signals, spawn, steps, watch};

/// The most a helper command (a Slurm step's `scancel`) may take before it is killed.
const HELPER_BOUND: Duration = Duration::from_secs(10);

/// A child forked whose exec has not said how it went: what it is for, and its exit when it was
/// reaped first.
pub(super) struct Execing {
    of: ExecOf,
    exit: Option<ExitStatus>,
}

/// A process's output reader, started once its exec is done.
type Reader = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// What a child whose exec is pending is for.
pub(super) enum ExecOf {
    Proc {
        proc: usize,
        generation: u64,
        argv0: String,
        reader: Option<Reader>,
    },
    Probe {
        attempt: u64,
        argv0: String,
    },
    /// `scancel` for `what`: a signal to a Slurm step's group `pgid`.
    Helper {
        what: String,
        pgid: Pid,
        signal: Signal,
    },
}

/// No scancel for `what` (it could not be started, or its exec failed): the signal goes to the
/// step's srun, which SIGKILLs the tasks (no grace).
fn without_scancel(what: &str, pgid: Pid, signal: Signal, err: &std::io::Error) {
    tracing::warn!(error = %err, "cannot run scancel for {what}: signalling srun");
    let _ = spawn::signal_group(pgid, Some(signal));
}

/// An exec probe's attempt whose program could not be started (at the spawn or at its exec).
pub(super) fn exec_probe_failed(attempt: u64, argv0: &str, err: &std::io::Error) -> Event {
    Event::ProbeDone {
        attempt,
        ok: false,
        detail: format!("exec {argv0}: {err}"),
    }
}

impl Runtime {
    pub(super) fn spawn(&mut self, proc: usize, generation: u64) -> Event {
        let spec = &self.plan.processes[proc];
        let path = logs::log_path(&self.plan.log_dir, &self.plan.node.name, &spec.name);
        let tx = self.tx.clone();
        let report: logs::LossReport = std::sync::Arc::new(move |loss| {
            let _ = tx.send(Msg::LogLoss(loss));
        });
        // Opened by the writer thread: a stalled log directory does not hold the spawn back.
        let file = self.writer.open_log(path, &spec.name, report);
        let argv0 = spawn::effective_argv(spec)
            .into_iter()
            .next()
            .unwrap_or_default();
        let spawned = match spawn::spawn_process(spec, self.drain) {
            Ok(s) => s,
            Err(e) => {
                return Event::SpawnFailed {
                    proc,
                    error: spawn::failure_text(&argv0, &e),
                };
            }
        };
        let pid = spawned.pid;
        signals::register_group(pid);
        self.children.leaders.insert(pid);
        match &spec.slurm_step {
            Some(step) => self.children.steps.insert(pid, step.name.clone()),
            None => self.children.steps.remove(&pid),
        };
        let name = spec.name.clone();
        let hooks = self.hooks(proc, generation);
        let reader = match tokio::net::unix::pipe::Receiver::from_owned_fd(spawned.output) {
            Ok(rx) => {
                let tx = self.tx.clone();
                let cfg = PumpConfig {
                    prefix: format!("{name} | "),
                    console: self.console.handle(),
                    matchers: self.children.matchers[proc].clone(),
                    on_match: Box::new(move |probe| {
                        let _ = tx.send(Msg::LogMatched {
                            proc,
                            generation,
                            probe,
                        });
                    }),
                    tap: hooks.tap,
                    watch: hooks.watch,
                    console_filter: hooks.console,
                    fatal: self.fatal_watch(proc, generation),
                };
                Some(Box::pin(logs::pump(rx, file, cfg)) as Reader)
            }
            // The pipe is dropped: the child gets EPIPE/SIGPIPE on output; it is still supervised.
            Err(e) => {
                tracing::warn!(process = %name, error = %e, "cannot read the output pipe");
                None
            }
        };
        self.await_exec(
            pid,
            spawned.exec,
            ExecOf::Proc {
                proc,
                generation,
                argv0,
                reader,
            },
        );
        Event::Forked { proc, pid }
    }

    /// Start reading a process's output: once its exec is done, so that the machine knows it
    /// has spawned before any line of it (a ready or fatal line) arrives.
    fn start_reader(&mut self, reader: Reader) {
        let c = &mut self.children;
        c.readers.push(tokio::spawn(reader));
        if c.readers.len() >= c.readers_prune_at {
            c.readers.retain(|h| !h.is_finished());
            c.readers_prune_at = (2 * c.readers.len()).max(MIN_READERS_PRUNE);
        }
    }

    /// Read child `pid`'s exec handshake off the loop; the outcome comes back as `Msg::Exec`.
    pub(super) fn await_exec(&mut self, pid: Pid, exec: spawn::Exec, of: ExecOf) {
        self.children
            .execing
            .insert(pid, Execing { of, exit: None });
        let tx = self.tx.clone();
        match tokio::net::unix::pipe::Receiver::from_owned_fd(exec.0) {
            Ok(mut rx) => {
                tokio::spawn(async move {
                    use tokio::io::AsyncReadExt;
                    let mut bytes = Vec::with_capacity(4);
                    let error = match rx.read_to_end(&mut bytes).await {
                        Ok(_) => spawn::Exec::outcome(&bytes),
                        Err(e) => Some(e),
                    };
                    let _ = tx.send(Msg::Exec { pid, error });
                });
            }
            // Cannot be watched: taken as exec'd (a failure then shows as its exit, 127).
            Err(e) => {
                tracing::warn!(pid, error = %e, "cannot read the exec handshake");
                let _ = tx.send(Msg::Exec { pid, error: None });
            }
        }
    }

    /// Child `pid`'s exec went as `error` says: tell whoever waits for it, then route its exit
    /// if that came first.
    pub(super) fn exec_done(&mut self, pid: Pid, error: Option<std::io::Error>) {
        let Some(e) = self.children.execing.remove(&pid) else {
            return;
        };
        let mut evs = Vec::new();
        match (e.of, error) {
            (
                ExecOf::Proc {
                    proc,
                    generation,
                    reader,
                    ..
                },
                None,
            ) => {
                if let Some(reader) = reader {
                    self.start_reader(reader);
                }
                evs.push(Event::Spawned { proc, pid });
                evs.extend(self.watch(watch::Input::Spawned { proc, generation }));
            }
            (ExecOf::Proc { proc, argv0, .. }, Some(err)) => evs.push(Event::SpawnFailed {
                proc,
                error: spawn::failure_text(&argv0, &err),
            }),
            (ExecOf::Probe { attempt, argv0 }, Some(err)) => {
                if self.children.exec_probes.remove(&pid).is_some() {
                    signals::unregister_group(pid);
                    evs.push(exec_probe_failed(attempt, &argv0, &err));
                }
            }
            (ExecOf::Helper { what, pgid, signal }, Some(err)) => {
                if self.children.helpers.remove(&pid).is_some() {
                    signals::unregister_group(pid);
                    without_scancel(&what, pgid, signal, &err);
                }
            }
            (ExecOf::Probe { .. } | ExecOf::Helper { .. }, None) => {}
        }
        self.feed_all(evs);
        if let Some(status) = e.exit {
            if let Some(ev) = self.route_exit(pid, status) {
                self.feed(ev);
            }
            self.check_groups();
        }
    }

    /// The fatal log patterns of process `proc`'s incarnation `generation`, as a watch that
    /// tells the machine of the first line matching one.
    fn fatal_watch(&self, proc: usize, generation: u64) -> Option<logs::FatalWatch> {
        let spec = &self.plan.processes[proc];
        let tx = self.tx.clone();
        let on_match = Box::new(move |pattern: &str, line: &[u8]| {
            let line = crate::domain::signature::shown_line(line, SHOWN_CHARS);
            let _ = tx.send(Msg::FatalLine {
                proc,
                generation,
                detail: format!("a fatal log line (pattern `{pattern}` of health_check.extra_fatal_log_patterns): {line}"),
            });
        });
        match logs::FatalWatch::new(&spec.fatal_log_patterns, on_match) {
            Ok(w) => w,
            Err(e) => {
                // The planner checked them; a plan file written by hand may not have been.
                tracing::warn!(process = %spec.name, error = %e, "its fatal log patterns do not compile: not watched");
                None
            }
        }
    }

    /// `killpg(pgid, signal)`; for a Slurm step's srun, the signal goes to the step's tasks on
    /// every node instead (`steps`): SIGCONT is left to Slurm, SIGKILL cancels the step and
    /// kills srun too.
    pub(super) fn signal(&mut self, pgid: Pid, signal: Signal) {
        let step = self.children.steps.get(&pgid).cloned();
        let job = job_of(&self.plan);
        let (Some(name), Some(job)) = (step, job) else {
            if let Err(e) = spawn::signal_group(pgid, Some(signal)) {
                tracing::warn!(pgid, signal = signal.as_str(), error = %e, "kill failed");
            }
            return;
        };
        if signal == Signal::SIGCONT {
            return;
        }
        let what = format!("{} of Slurm step {name} (job {job})", signal.as_str());
        match spawn::spawn_probe(&steps::scancel_argv(&job, &name, signal), self.drain) {
            Ok((pid, exec)) => {
                tracing::info!(pid, "{what}: scancel");
                self.children
                    .helpers
                    .insert(pid, format!("scancel: {what}"));
                let of = ExecOf::Helper { what, pgid, signal };
                self.await_exec(pid, exec, of);
                signals::register_group(pid);
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(HELPER_BOUND).await;
                    let _ = tx.send(Msg::HelperTimeout { pid });
                });
            }
            Err(e) => without_scancel(&what, pgid, signal, &e),
        }
        if signal == Signal::SIGKILL {
            let _ = spawn::signal_group(pgid, Some(Signal::SIGKILL));
        }
    }

    /// A helper command overran [`HELPER_BOUND`]: killed.
    pub(super) fn helper_timeout(&mut self, pid: Pid) {
        if let Some(what) = self.children.helpers.remove(&pid) {
            tracing::warn!(
                pid,
                "{what} did not finish within {}: killed",
                crate::domain::show_secs(HELPER_BOUND)
            );
            let _ = spawn::signal_group(pid, Some(Signal::SIGKILL));
            signals::unregister_group(pid);
        }
    }

    /// An exec probe's attempt ran out of time: killed, and the attempt failed.
    pub(super) fn exec_timeout(&mut self, attempt: u64, pid: Pid) {
        if self.children.exec_probes.get(&pid) == Some(&attempt) {
            self.children.exec_probes.remove(&pid);
            // Still our unreaped child: its pid (= pgid) cannot have been reused.
            let _ = spawn::signal_group(pid, Some(Signal::SIGKILL));
            signals::unregister_group(pid);
            self.feed(Event::ProbeDone {
                attempt,
                ok: false,
                detail: "exec probe timed out".into(),
            });
        }
    }

    /// Reap every exited child (several exits coalesce into one SIGCHLD) and route each status.
    pub(super) fn reap(&mut self) {
        let mut evs = Vec::new();
        loop {
            let (pid, status) =
                match waitpid(nix::unistd::Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::Exited(pid, code)) => (pid.as_raw(), ExitStatus::Code(code)),
                    Ok(WaitStatus::Signaled(pid, sig, _)) => {
                        (pid.as_raw(), ExitStatus::Signal(sig as i32))
                    }
                    Ok(WaitStatus::StillAlive) => break,
                    Ok(_) => continue,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => break, // ECHILD: no children at all
                };
            if let Some(e) = self.children.execing.get_mut(&pid) {
                // Its exec's outcome first (`exec_done` routes it).
                e.exit = Some(status);
                continue;
            }
            evs.extend(self.route_exit(pid, status));
        }
        for ev in evs {
            self.feed(ev);
        }
        self.check_groups();
    }

    /// Where the exit of child `pid` goes: a helper's is logged, an exec probe's ends its
    /// attempt, a leader's goes to the machine, an orphan's nowhere.
    fn route_exit(&mut self, pid: Pid, status: ExitStatus) -> Option<Event> {
        let c = &mut self.children;
        if let Some(what) = c.helpers.remove(&pid) {
            signals::unregister_group(pid);
            match status {
                ExitStatus::Code(0) => tracing::debug!(pid, "{what}: done"),
                ExitStatus::Code(steps::NO_SUCH_STEP) => {
                    tracing::debug!(pid, "{what}: the step is gone already")
                }
                _ => tracing::warn!(pid, %status, "{what} failed"),
            }
        } else if let Some(attempt) = c.exec_probes.remove(&pid) {
            signals::unregister_group(pid);
            let ok = status == ExitStatus::Code(0);
            let detail = if ok {
                String::new()
            } else {
                format!("exec probe: {status}")
            };
            return Some(Event::ProbeDone {
                attempt,
                ok,
                detail,
            });
        } else if c.leaders.remove(&pid) {
            // Watch the group even if the machine does not: the backstop's table must drop
            // the pgid once the group is gone (its number may be reused after that).
            c.watched.insert(pid);
            // A death by a stop signal is held back by the machine (SIGNAL_DEATH_SETTLE).
            return Some(Event::Exited { pid, status });
        } else {
            tracing::debug!(pid, %status, "reaped an orphaned descendant");
        }
        None
    }

    pub(super) fn check_groups(&mut self) {
        let c = &self.children;
        let gone: Vec<Pid> = c
            .watched
            .iter()
            .copied()
            .filter(|&g| !c.leaders.contains(&g) && !spawn::signal_group(g, None).unwrap_or(false))
            .collect();
        for g in gone {
            self.children.watched.remove(&g);
            signals::unregister_group(g);
            self.feed(Event::GroupEmpty { pgid: g });
        }
    }
}
