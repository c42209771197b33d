//! The loop as probe executor: one attempt of a TCP, HTTP, file or exec probe, off the loop,
//! its result sent back as `Msg::Probe` (an exec probe's exit is reaped like any child's). The
//! probes a watcher owns (the servable probe, a store's registration and `/health`) go to the
//! watchers; log-line probes are matched by the output readers, never polled.

use std::time::Duration;

use super::children::{exec_probe_failed, ExecOf};
use super::{Msg, Runtime};
use crate::plan::ProbeSpec;
use crate::supervisor::machine::{Event, UnitRef};
use crate::supervisor::{probes, signals, spawn, watch};

impl Runtime {
    /// Start attempt `attempt` of `probe` on `unit`; the events to feed at once (an attempt
    /// that cannot start, or a watcher's answer).
    pub(super) fn probe(
        &mut self,
        attempt: u64,
        unit: UnitRef,
        probe: ProbeSpec,
        timeout: Duration,
    ) -> Vec<Event> {
        if watch::owns(&probe) {
            let proc = match unit {
                UnitRef::Proc(i) => Some(i),
                UnitRef::Gate(_) => None,
            };
            return self.watch(watch::Input::Probe {
                attempt,
                proc,
                probe: &probe,
                timeout,
            });
        }
        let tx = self.tx.clone();
        let send = move |result| {
            let _ = tx.send(Msg::Probe { attempt, result });
        };
        match probe {
            ProbeSpec::Tcp { host, port } => {
                tokio::spawn(async move { send(probes::tcp(host, port, timeout).await) });
            }
            ProbeSpec::Http {
                host,
                port,
                path,
                status,
                body_contains,
            } => {
                tokio::spawn(async move {
                    send(probes::http(host, port, path, status, body_contains, timeout).await)
                });
            }
            ProbeSpec::File { path } => {
                tokio::spawn(async move { send(probes::file(path, timeout).await) });
            }
            ProbeSpec::Exec { argv } => match spawn::spawn_probe(&argv, self.drain) {
                Ok((pid, exec)) => {
                    signals::register_group(pid);
                    self.children.exec_probes.insert(pid, attempt);
                    let argv0 = argv.first().cloned().unwrap_or_default();
                    self.await_exec(pid, exec, ExecOf::Probe { attempt, argv0 });
                    let tx = self.tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(timeout).await;
                        let _ = tx.send(Msg::ExecTimeout { attempt, pid });
                    });
                }
                Err(e) => {
                    let argv0 = argv.first().map(String::as_str).unwrap_or("");
                    return vec![exec_probe_failed(attempt, argv0, &e)];
                }
            },
            ProbeSpec::StorePlace { .. } => return self.place_probe(attempt),
            // Matched by the log reader, never polled; the others are the watchers'.
            ProbeSpec::LogLine { .. }
            | ProbeSpec::Servable(_)
            | ProbeSpec::MooncakeSegment(_)
            | ProbeSpec::MooncakeHealth { .. }
            | ProbeSpec::EngineAlive(_) => {}
        }
        Vec::new()
    }
}
