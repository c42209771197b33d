//! The loop's end of the job's control connection (`supervisor::control`): what this node
//! tells the coordinator (a rank down, the node failing or leaving) and what it is told (stop,
//! start or give up a rank; another node failed). On the coordinator's node, also its records
//! and `worker_restarts.json`.

use std::collections::{BTreeMap, VecDeque};
use std::time::SystemTime;

use super::{Msg, Runtime};
use crate::supervisor::control::coordinator::{Note, RestartRecord, Settled};
use crate::supervisor::control::net::{self, Incoming, Outgoing};
use crate::supervisor::control::wire::{Body, UnitInfo};
use crate::supervisor::machine::{Event, ExitStatus, RecordKind, ShutdownReason};

/// srtctl's name for the restarts' record, in the log directory.
pub const WORKER_RESTARTS: &str = "worker_restarts.json";

/// The control connection's state on this node.
#[derive(Default)]
pub(super) struct ControlState {
    link: Option<net::Link>,
    /// Joined the coordinator (restarts across nodes can be decided).
    up: bool,
    /// Why there is none, once that is known.
    down_why: Option<String>,
    /// Each worker's current generation, as the coordinator last said.
    generations: BTreeMap<String, u64>,
    /// This node said it is leaving or failing.
    said_bye: bool,
    /// The coordinator's restart records (its node only), for `worker_restarts.json`.
    restarts: Vec<Restart>,
    /// Workers handed back without a restart (its node only), for `worker_restarts.json`.
    settled: Vec<Settled>,
    /// The teardown tier this node last said it still runs (`Body::Tier`).
    tier_said: Option<u8>,
    /// This node's stores that wait for their place to register with the master.
    places: Places,
}

/// This node's stores that wait for the coordinator's `may-register` (`ProbeSpec::StorePlace`).
#[derive(Default)]
struct Places {
    /// The word came (or this node cannot wait for it).
    given: bool,
    /// The gate's probe attempt, held until the word comes.
    held: Option<u64>,
    /// The stores not yet ready (nor failed): the place is the job's until they are.
    registering: std::collections::BTreeSet<String>,
    /// `registered` was said.
    freed: bool,
}

/// The stores that wait for the gate of a [`ProbeSpec::StorePlace`], by name.
fn place_waiters(plan: &crate::plan::Plan) -> std::collections::BTreeSet<String> {
    let gates: Vec<&str> = plan
        .gates
        .iter()
        .filter(|g| {
            g.readiness
                .probes
                .iter()
                .any(|p| matches!(p, crate::plan::ProbeSpec::StorePlace { .. }))
        })
        .map(|g| g.name.as_str())
        .collect();
    plan.processes
        .iter()
        .filter(|p| {
            p.depends_on
                .iter()
                .any(|d| gates.contains(&d.target.as_str()))
        })
        .map(|p| p.name.clone())
        .collect()
}

/// The result of a held place probe.
fn place_passed(attempt: u64) -> Event {
    Event::ProbeDone {
        attempt,
        ok: true,
        detail: "the coordinator gave this node's stores their place".into(),
    }
}

/// One restart as `worker_restarts.json` tells it.
struct Restart {
    record: RestartRecord,
    exited_at: SystemTime,
    relaunched_at: Option<SystemTime>,
    ready_at: Option<SystemTime>,
}

/// The units this node holds ranks of, for its hello.
fn units(plan: &crate::plan::Plan) -> Vec<UnitInfo> {
    let mut seen = BTreeMap::new();
    for p in &plan.processes {
        let Some(u) = &p.restart.unit else { continue };
        let r = &p.restart;
        seen.entry(u.worker.clone()).or_insert_with(|| UnitInfo {
            worker: u.worker.clone(),
            nodes: u.nodes.clone(),
            policy: r.policy,
            success_codes: r.success_codes.clone(),
            max_restarts: r.max_restarts,
            backoff_initial_ms: r.backoff_initial.as_millis() as u64,
            backoff_factor: r.backoff_factor,
            backoff_max_ms: r.backoff_max.as_millis() as u64,
            stop_ms: p.stop.grace.as_millis() as u64,
        });
    }
    seen.into_values().collect()
}

impl Runtime {
    /// Start this node's side of the control connection, when the plan has one.
    pub(super) fn start_control(&mut self) -> Result<(), crate::supervisor::SupervisorError> {
        let Some(spec) = self.plan.control.clone() else {
            return Ok(());
        };
        let job = super::setup::job_of(&self.plan).unwrap_or_else(|| "local".into());
        let tx = self.tx.clone();
        let deliver: net::Deliver = Box::new(move |i| {
            let _ = tx.send(Msg::Control(i));
        });
        let node = self.plan.node.name.clone();
        self.control.places.registering = place_waiters(&self.plan);
        let hello = crate::supervisor::control::wire::Hello {
            units: units(&self.plan),
            terminal: self.plan.processes.iter().any(|p| p.terminal.is_some()),
            stores: self.control.places.registering.len() as u32,
        };
        match net::start(&spec, &node, &job, hello, net::REACH_WITHIN, deliver) {
            Ok(link) => self.control.link = Some(link),
            Err(e) => {
                return Err(crate::supervisor::SupervisorError::Setup(format!(
                    "the job's control connection on {node} (the coordinator): {e}"
                )))
            }
        }
        Ok(())
    }

    /// This node's end of the control connection, for its status file.
    pub(super) fn control_status(&self) -> Option<crate::runfiles::ControlStatus> {
        self.plan.control.as_ref()?;
        let joined = self.control.up;
        Some(crate::runfiles::ControlStatus {
            joined,
            why: (!joined).then(|| {
                self.control
                    .down_why
                    .clone()
                    .unwrap_or_else(|| "not joined yet".into())
            }),
        })
    }

    /// The processes that are ranks of `worker` here.
    fn ranks_of(&self, worker: &str) -> Vec<usize> {
        self.plan
            .processes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.restart.unit.as_ref().is_some_and(|u| u.worker == worker))
            .map(|(i, _)| i)
            .collect()
    }

    pub(super) fn on_control(&mut self, i: Incoming) {
        if matches!(
            i,
            Incoming::Joined | Incoming::Unavailable(_) | Incoming::Lost(_)
        ) {
            // The status file says whether this node has joined: written again.
            self.status_changed();
        }
        match i {
            Incoming::Joined => {
                self.control.up = true;
                // From now on a teardown here waits for the job's word past tier 0.
                self.feed(Event::JobTier {
                    floor: Some(0),
                    waiting: Vec::new(),
                });
                match self.control.down_why.take() {
                    Some(_) => tracing::warn!("joined the job's control connection, late"),
                    None => tracing::info!("joined the job's control connection"),
                }
            }
            Incoming::Unavailable(why) => {
                self.feed(Event::JobTier {
                    floor: None,
                    waiting: Vec::new(),
                });
                tracing::error!("{why}: until it joins, a worker over several nodes is given up at its first failure here, and another node's failure reaches this node only through the batch script");
                self.place_given(format!(
                    "{why}: this node's stores register with the master without the job's limit"
                ));
                self.control.down_why = Some(why);
            }
            Incoming::Lost(why) => {
                self.control.up = false;
                // The order across nodes ends with the link: this node's own order goes on.
                self.feed(Event::JobTier {
                    floor: None,
                    waiting: Vec::new(),
                });
                self.control.down_why = Some(why.clone());
                if !self.control.said_bye {
                    self.drain_for(why);
                }
            }
            Incoming::Refused { peer, why } => {
                self.note(
                    "mcsup",
                    RecordKind::ControlRefused,
                    format!("from {peer}: {why}"),
                );
            }
            Incoming::Decided(note) => self.decided(note),
            Incoming::Said(body) => self.told(body),
        }
    }

    /// What the coordinator decided, on its node: its events and `worker_restarts.json`.
    fn decided(&mut self, note: Note) {
        match note {
            Note::Event { unit, kind, detail } => self.note(&unit, kind, detail),
            Note::Restart(record) => {
                self.control.restarts.push(Restart {
                    record,
                    exited_at: SystemTime::now(),
                    relaunched_at: None,
                    ready_at: None,
                });
                self.write_restarts();
            }
            Note::Settled(settled) => {
                self.control.settled.push(settled);
                self.write_restarts();
            }
            Note::Relaunched { worker } => {
                if let Some(r) = self.last_restart(&worker, "scheduled") {
                    r.record.outcome = "relaunched";
                    r.relaunched_at = Some(SystemTime::now());
                    self.write_restarts();
                }
            }
            Note::ReadyAgain { worker } => {
                if let Some(r) = self.last_restart(&worker, "relaunched") {
                    r.record.outcome = "ready";
                    r.ready_at = Some(SystemTime::now());
                    self.write_restarts();
                }
            }
        }
    }

    /// What the coordinator said.
    fn told(&mut self, body: Body) {
        match body {
            Body::Stop { worker, generation } => {
                self.control.generations.insert(worker.clone(), generation);
                for proc in self.ranks_of(&worker) {
                    self.feed(Event::RankStop { proc });
                }
            }
            Body::Start { worker, generation } => {
                for proc in self.ranks_of(&worker) {
                    self.feed(Event::RankStart { proc, generation });
                }
            }
            Body::GiveUp { worker, reason } => {
                for proc in self.ranks_of(&worker) {
                    self.feed(Event::RankGiveUp {
                        proc,
                        reason: format!("{worker} given up: {reason}"),
                    });
                }
            }
            Body::NodeFailed { node, reason } => {
                self.drain_for(format!("node {node} failed: {reason}"))
            }
            Body::MayStop { tier, waiting } => self.feed(Event::JobTier {
                floor: Some(tier),
                waiting,
            }),
            Body::MayRegister {
                registering,
                waiting,
            } => self.place_given(format!(
                "the coordinator gave this node's stores their place to register with the master: {registering} of the job's stores registering, {waiting} waiting"
            )),
            Body::JobStop { node, signal } => self.job_stop(node, &signal),
            Body::JobDone { detail, .. } => {
                // The detail names each node whose part ended (`n1: ... ended (exit code 0)`).
                let said = format!("{detail}: the job is done, this node drains");
                self.note("mcsup", RecordKind::JobDone, said.clone());
                self.feed(Event::JobDone { detail: said });
            }
            _ => {}
        }
    }

    /// A `ProbeSpec::StorePlace` attempt: passed once the word came, else held until it does.
    pub(super) fn place_probe(&mut self, attempt: u64) -> Vec<Event> {
        if self.control.places.given {
            return vec![place_passed(attempt)];
        }
        self.control.places.held = Some(attempt);
        Vec::new()
    }

    /// This node's stores may register (`why`): said once, and the held attempt passes.
    fn place_given(&mut self, why: String) {
        let p = &mut self.control.places;
        if p.given || p.registering.is_empty() {
            return;
        }
        p.given = true;
        let held = p.held.take();
        self.note("mcsup", RecordKind::StoreSlot, why);
        if let Some(attempt) = held {
            self.feed(place_passed(attempt));
        }
    }

    /// A record of this node: a store that had its place and is now ready or failed no longer
    /// needs it; once none does, the coordinator hears it (`registered`).
    pub(super) fn place_used(&mut self, unit: &str, kind: RecordKind) {
        if !matches!(kind, RecordKind::Ready | RecordKind::Failed)
            || !self.control.places.registering.remove(unit)
        {
            return;
        }
        if self.control.places.registering.is_empty() {
            self.free_places();
        }
    }

    /// Say `registered` once (the stores are in, or the node stops): the places are free.
    fn free_places(&mut self) {
        let p = &mut self.control.places;
        if p.freed || (p.registering.is_empty() && !p.given) {
            return;
        }
        if let (Some(link), true) = (&self.control.link, self.control.up) {
            link.send(Outgoing::Say(Body::Registered));
            p.freed = true;
        }
    }

    /// The coordinator's node was asked to stop: this node stops as if asked (a drain when it is
    /// the drain signal), unless it is stopping already.
    fn job_stop(&mut self, node: String, signal: &str) {
        use std::str::FromStr;
        let Ok(sig) = nix::sys::signal::Signal::from_str(signal) else {
            return;
        };
        if matches!(
            self.machine.phase(),
            crate::supervisor::machine::Phase::Stopping | crate::supervisor::machine::Phase::Done
        ) {
            return;
        }
        self.note(
            "mcsup",
            RecordKind::JobStop,
            format!("{node} (the coordinator's node) received {signal}: this node stops too, in the job's order"),
        );
        self.feed(Event::JobStop { node, signal: sig });
    }

    /// Another node failed, or the coordinator is gone (`detail`): said, and this node drains.
    fn drain_for(&mut self, detail: String) {
        let said = format!("{detail}: this node drains");
        self.note("mcsup", RecordKind::PeerFailed, said);
        self.feed(Event::PeerFailed { detail });
    }

    /// `worker`'s generation, as the coordinator last said (0 before its first restart).
    fn generation(&self, worker: &str) -> u64 {
        self.control.generations.get(worker).copied().unwrap_or(0)
    }

    /// The worker's last restart record, if its outcome is `outcome`.
    fn last_restart(&mut self, worker: &str, outcome: &str) -> Option<&mut Restart> {
        self.control
            .restarts
            .iter_mut()
            .rev()
            .find(|r| r.record.worker == worker)
            .filter(|r| r.record.outcome == outcome)
    }

    /// A process became ready: when it is the leader rank of a worker that was started again,
    /// the coordinator hears it (srtctl records when a relaunched worker is ready).
    pub(super) fn rank_ready(&mut self, proc: usize) {
        let me = &self.plan.node.name;
        let Some(unit) = self
            .plan
            .processes
            .get(proc)
            .and_then(|p| p.restart.unit.as_ref())
            .filter(|u| u.nodes.first() == Some(me))
        else {
            return;
        };
        let generation = self
            .control
            .generations
            .get(&unit.worker)
            .copied()
            .unwrap_or(0);
        if let (Some(link), true) = (&self.control.link, generation > 0) {
            link.send(Outgoing::Say(Body::Ready {
                worker: unit.worker.clone(),
                generation,
            }));
        }
    }

    /// This node's part of the job is done: the coordinator is told, and answers `JobDone` once
    /// every node's is. Without a connection the node ends alone.
    pub(super) fn part_done(&mut self, detail: String, queue: &mut VecDeque<Event>) {
        match (&self.control.link, self.control.up) {
            (Some(link), true) => link.send(Outgoing::Say(Body::Finished { detail })),
            _ => queue.push_back(Event::JobDone {
                detail: format!(
                    "{detail}; without the job's control connection ({}) this node ends alone",
                    self.control.down_why.as_deref().unwrap_or("not joined yet")
                ),
            }),
        }
    }

    /// A rank is down here: the coordinator is told; without a connection, the worker cannot
    /// restart as one unit and the rank fails.
    pub(super) fn rank_down(
        &mut self,
        proc: usize,
        exit: Option<ExitStatus>,
        queue: &mut VecDeque<Event>,
    ) {
        let Some(unit) = self.plan.processes[proc].restart.unit.clone() else {
            return;
        };
        match (&self.control.link, self.control.up) {
            (Some(link), true) => link.send(Outgoing::Say(Body::Down {
                generation: self.generation(&unit.worker),
                worker: unit.worker,
                code: exit.map(ExitStatus::code),
                exit: exit.map(|e| e.to_string()),
                process: Some(self.plan.processes[proc].name.clone()),
            })),
            _ => queue.push_back(Event::RankGiveUp {
                proc,
                reason: format!(
                    "{} cannot restart as one unit without the job's control connection ({})",
                    unit.worker,
                    self.control.down_why.as_deref().unwrap_or("not joined yet")
                ),
            }),
        }
    }

    /// Once the teardown starts: the coordinator hears why (a failure drains every node).
    pub(super) fn say_bye(&mut self) {
        if self.control.said_bye {
            return;
        }
        self.control.said_bye = true;
        self.free_places();
        let Some(link) = &self.control.link else {
            return;
        };
        match self.machine.reason() {
            Some(
                r @ (ShutdownReason::CriticalFailure { .. } | ShutdownReason::EndpointFailed(_)),
            ) => link.send(Outgoing::Say(Body::Failing {
                reason: r.to_string(),
            })),
            r => {
                if let Some(ShutdownReason::Signal(sig)) = r {
                    link.send(Outgoing::Say(Body::Asked {
                        signal: sig.as_str().to_string(),
                    }));
                }
                link.send(Outgoing::Say(Body::Leaving))
            }
        }
    }

    /// In the teardown: the coordinator hears the lowest teardown tier still running here, each
    /// time it changes (the job-wide order: `Body::MayStop`).
    pub(super) fn report_tier(&mut self) {
        let pending = self
            .machine
            .pending_tier()
            .unwrap_or(crate::supervisor::control::wire::TIER_NONE);
        if self.control.tier_said == Some(pending) {
            return;
        }
        if let (Some(link), true) = (&self.control.link, self.control.up) {
            link.send(Outgoing::Say(Body::Tier { pending }));
            self.control.tier_said = Some(pending);
        }
    }

    /// Wait (at most a second) until what this node said is written to the coordinator.
    pub(super) async fn flush_control(&mut self) {
        self.say_bye();
        if let Some(link) = &self.control.link {
            link.flush(std::time::Duration::from_secs(1)).await;
        }
    }

    /// `worker_restarts.json` in srtctl's shape (`core/supervisor.py`'s `summary()`), from the
    /// coordinator's decisions so far.
    fn write_restarts(&mut self) {
        let mut endpoints = serde_json::Map::new();
        let mut events = Vec::new();
        let mut total = 0u64;
        let iso = |t: SystemTime| humantime::format_rfc3339_seconds(t).to_string();
        let all = &self.control.restarts;
        for (i, x) in all.iter().enumerate() {
            let r = &x.record;
            let (mode, index) = split_worker(&r.worker);
            let label = format!("{mode}_{index}");
            let exhausted = r.outcome == "exhausted";
            let restarts = if exhausted { r.attempt - 1 } else { r.attempt };
            endpoints.insert(
                label,
                endpoint(r.policy, restarts, r.max_restarts, exhausted),
            );
            let ready_seconds = x
                .ready_at
                .zip(x.relaunched_at)
                .and_then(|(ready, launched)| ready.duration_since(launched).ok())
                .map(|d| (d.as_secs_f64() * 10.0).round() / 10.0);
            events.push(serde_json::json!({
                "worker": format!("{mode}_{index}_{}", r.node),
                "mode": mode,
                "index": index,
                "node": r.node,
                "attempt": r.attempt,
                "exit_code": r.exit_code,
                "exited_at": iso(x.exited_at),
                "outcome": r.outcome,
                "backoff_seconds": r.backoff.as_secs_f64(),
                "relaunched_at": x.relaunched_at.map(iso),
                "ready_at": x.ready_at.map(iso),
                "ready_seconds": ready_seconds,
                "crash_log": crash_log(&self.plan.log_dir, all, i),
                "engine": 0,
            }));
        }
        for x in &self.control.settled {
            let (mode, index) = split_worker(&x.worker);
            endpoints.insert(
                format!("{mode}_{index}"),
                endpoint(
                    x.policy,
                    x.restarts,
                    x.max_restarts,
                    x.restarts >= x.max_restarts,
                ),
            );
        }
        for v in endpoints.values() {
            total += v["restarts"].as_u64().unwrap_or(0);
        }
        let doc = serde_json::json!({
            "total_restarts": total,
            "endpoints": endpoints,
            "events": events,
        });
        let text = serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n";
        let path = self.plan.log_dir.join(WORKER_RESTARTS);
        self.writer.replace(path, text.into_bytes());
    }
}

/// One worker of `worker_restarts.json`'s `endpoints` (srtctl's `summary()`).
fn endpoint(
    policy: crate::plan::RestartPolicy,
    restarts: u32,
    max_restarts: u32,
    exhausted: bool,
) -> serde_json::Value {
    serde_json::json!({
        "policy": policy.to_string(),
        "restarts": restarts,
        "max_restarts": max_restarts,
        "exhausted": exhausted,
    })
}

/// The log of the life that ended in restart `all[i]`, as srtctl's `crash_log` names it: once
/// every rank was started again, the rank's previous log (its node keeps it as `.log.1`, shifted
/// to `.log.2` by the next restart ..., gone past [`logs::KEEP_ROTATED`]); given up, its log as
/// it is. None before the relaunch (srtctl sets it then), or when the node did not name its
/// process.
fn crash_log(log_dir: &std::path::Path, all: &[Restart], i: usize) -> Option<String> {
    use crate::supervisor::logs;
    let x = &all[i];
    let process = x.record.process.as_deref()?;
    logs::check_name("node", &x.record.node).ok()?;
    logs::check_name("process", process).ok()?;
    let log = logs::log_path(log_dir, &x.record.node, process);
    if x.record.outcome == "exhausted" {
        return Some(log.display().to_string());
    }
    x.relaunched_at?;
    // Every relaunch of the worker since (this one included) rotated every rank's log once.
    let shifted = all[i..]
        .iter()
        .filter(|y| y.record.worker == x.record.worker && y.relaunched_at.is_some())
        .count();
    (shifted <= logs::KEEP_ROTATED as usize)
        .then(|| logs::rotated_path(&log, shifted).display().to_string())
}

/// `decode[0]` as (`decode`, 0).
fn split_worker(worker: &str) -> (String, u64) {
    match worker.split_once('[') {
        Some((mode, rest)) => (
            mode.to_string(),
            rest.trim_end_matches(']').parse().unwrap_or(0),
        ),
        None => (worker.to_string(), 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::RestartPolicy;
    use std::path::Path;
    use std::time::Duration;

    fn restart(worker: &str, node: &str, outcome: &'static str, relaunched: bool) -> Restart {
        Restart {
            record: RestartRecord {
                worker: worker.into(),
                node: node.into(),
                process: Some("sglang-decode-0".into()),
                attempt: 1,
                exit_code: Some(137),
                outcome,
                backoff: Duration::ZERO,
                policy: RestartPolicy::Always,
                max_restarts: 9,
            },
            exited_at: SystemTime::UNIX_EPOCH,
            relaunched_at: relaunched.then_some(SystemTime::UNIX_EPOCH),
            ready_at: None,
        }
    }

    #[test]
    fn crash_log_follows_the_rotation_of_the_ranks_logs() {
        let dir = Path::new("/logs");
        let log = |node: &str, n: &str| format!("/logs/{node}.sglang-decode-0.log{n}");
        // decode[0] restarted twice (from n3, then n2), then given up; decode[1] once, in
        // between, rotates nothing of decode[0]'s.
        let all = vec![
            restart("decode[0]", "n3", "ready", true),
            restart("decode[1]", "n3", "ready", true),
            restart("decode[0]", "n2", "relaunched", true),
            restart("decode[0]", "n3", "exhausted", false),
        ];
        let got: Vec<Option<String>> = (0..all.len()).map(|i| crash_log(dir, &all, i)).collect();
        assert_eq!(
            got,
            [
                Some(log("n3", ".2")),
                Some(log("n3", ".1")),
                Some(log("n2", ".1")),
                Some(log("n3", "")),
            ]
        );
        // Not relaunched yet: none (srtctl names it at the relaunch).
        assert_eq!(
            crash_log(dir, &[restart("decode[0]", "n3", "scheduled", false)], 0),
            None
        );
        // Rotated out of the kept logs, or a process name that is no file name: none.
        let many: Vec<Restart> = (0..=logs_kept())
            .map(|_| restart("decode[0]", "n3", "ready", true))
            .collect();
        assert_eq!(crash_log(dir, &many, 0), None);
        assert_eq!(
            crash_log(dir, &many, 1),
            Some(log("n3", &format!(".{}", logs_kept())))
        );
        let mut odd = restart("decode[0]", "n3", "exhausted", false);
        odd.record.process = Some("../../etc/passwd".into());
        assert_eq!(crash_log(dir, &[odd], 0), None);
    }

    fn logs_kept() -> usize {
        crate::supervisor::logs::KEEP_ROTATED as usize
    }
}
