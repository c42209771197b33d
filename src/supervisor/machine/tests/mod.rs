//! State-machine tests: event sequences in, actions out. No processes, no clock. Helpers here,
//! the tests by topic in the files below.

use super::*;
use crate::plan::{
    DependencySpec, LivenessSpec, NodeSummary, ReadinessSpec, RestartSpec, ShutdownSpec,
    SignalName, StopSpec,
};
use std::path::PathBuf;

pub(super) fn d(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

pub(crate) fn proc(name: &str, kind: ProcessKind) -> ProcessSpec {
    ProcessSpec {
        name: name.into(),
        kind,
        phase: crate::plan::Phase::default_for(kind),
        service: None,
        placement: None,
        listens: Vec::new(),
        roles: vec![],
        argv: vec!["/bin/true".into()],
        preamble: None,
        env: vec![],
        cwd: None,
        depends_on: vec![],
        readiness: None,
        liveness: None,
        restart: RestartSpec {
            policy: RestartPolicy::Never,
            success_codes: vec![0],
            backoff_initial: d(100),
            backoff_factor: 2.0,
            backoff_max: d(1000),
            reset_after: d(10_000),
            max_restarts: 3,
            window: d(60_000),
            release_wait: d(5_000),
            unit: None,
        },
        stop: StopSpec {
            signal: SignalName::SIGTERM,
            grace: d(1000),
            budget: None,
            inflight: None,
        },
        critical: true,
        fatal_log_patterns: Vec::new(),
        slurm_step: None,
        terminal: None,
    }
}

pub(super) fn dep(p: &mut ProcessSpec, target: &str, condition: DependencyCondition) {
    p.depends_on.push(DependencySpec {
        target: target.into(),
        condition,
    });
}

pub(super) fn restarting(mut p: ProcessSpec, policy: RestartPolicy) -> ProcessSpec {
    p.restart.policy = policy;
    p
}

pub(super) fn tcp_ready(mut p: ProcessSpec, timeout: u64) -> ProcessSpec {
    p.readiness = Some(ReadinessSpec {
        probes: vec![ProbeSpec::Tcp {
            host: "127.0.0.1".into(),
            port: 1,
        }],
        initial_delay: d(0),
        interval: d(10),
        max_interval: d(40),
        attempt_timeout: d(100),
        timeout: d(timeout),
    });
    p
}

/// A TCP liveness probe every second (100 ms per attempt) that restarts after `threshold` failures.
pub(super) fn tcp_liveness(threshold: u32) -> LivenessSpec {
    LivenessSpec {
        probe: ProbeSpec::Tcp {
            host: "127.0.0.1".into(),
            port: 1,
        },
        period: d(1000),
        attempt_timeout: d(100),
        failure_threshold: threshold,
    }
}

pub(crate) fn plan(processes: Vec<ProcessSpec>) -> Plan {
    Plan {
        node: NodeSummary {
            name: "n1".into(),
            ip: "127.0.0.1".into(),
            node_id: 0,
            infra_node: "n1".into(),
            infra_ip: "127.0.0.1".into(),
            runs_master: true,
            job_id: None,
            mode: "local".into(),
        },
        roles: vec![],
        roles_from: None,
        gates: vec![],
        processes,
        services: vec![],
        endpoint: None,
        benchmark: None,
        recipe_schema: String::new(),
        memory: Default::default(),
        redacted: false,
        network: Default::default(),
        notes: Vec::new(),
        files: vec![],
        dirs: vec![],
        scratch_dir: None,
        shutdown: ShutdownSpec {
            deadline: d(25_000),
            drain_signal: SignalName::SIGUSR1,
            exit_when_workers_done: true,
            holds_ranks_of: Vec::new(),
            // No wait for in-flight requests unless a test asks for one.
            drain: d(0),
        },
        log_dir: PathBuf::from("/nonexistent"),
        ignored_sections: vec![],
        warnings: vec![],
        control: None,
        periods: Default::default(),
        canary: Default::default(),
    }
}

/// The usual chain: master <- store (healthy) <- worker (healthy).
pub(super) fn chain() -> Plan {
    let master = proc("master", ProcessKind::Master);
    let mut store = proc("store", ProcessKind::Store);
    store.stop.signal = SignalName::SIGINT;
    dep(&mut store, "master", DependencyCondition::Healthy);
    let mut worker = proc("worker", ProcessKind::Worker);
    dep(&mut worker, "store", DependencyCondition::Healthy);
    plan(vec![master, store, worker])
}

pub(super) struct H {
    m: Machine,
    t0: Instant,
    now: Instant,
}

impl H {
    pub(super) fn new(p: Plan) -> H {
        let t0 = Instant::now();
        H {
            m: Machine::new(&p, t0).expect("valid plan"),
            t0,
            now: t0,
        }
    }
    pub(super) fn ev(&mut self, e: Event) -> Vec<Action> {
        self.m.handle(e, self.now)
    }
    pub(super) fn at(&mut self, ms: u64) -> Vec<Action> {
        self.at_time(d(ms))
    }
    /// A tick at `since` after t0 (for sub-millisecond schedules).
    pub(super) fn at_time(&mut self, since: Duration) -> Vec<Action> {
        self.now = self.t0 + since;
        self.ev(Event::Tick)
    }
    /// Start, answering each Spawn with pid 100 + index.
    pub(super) fn start_all(&mut self) -> Vec<Action> {
        let mut all = Vec::new();
        let mut queue = self.ev(Event::Start);
        while !queue.is_empty() {
            let acts = std::mem::take(&mut queue);
            for a in &acts {
                if let Action::Spawn { proc, .. } = a {
                    queue.extend(self.ev(Event::Spawned {
                        proc: *proc,
                        pid: pid(*proc),
                    }));
                }
            }
            all.extend(acts);
        }
        all
    }
    pub(super) fn state(&self, i: usize) -> UnitState {
        self.m.procs[i].state.name()
    }
    /// Leader exit + group empty.
    pub(super) fn gone(&mut self, pid: Pid, status: ExitStatus) -> Vec<Action> {
        let mut a = self.ev(Event::Exited { pid, status });
        a.extend(self.ev(Event::GroupEmpty { pgid: pid }));
        a
    }
}

/// A worker's in-flight gauge (its address is never dialled here).
pub(super) fn gauge() -> crate::engine::stop::MetricSum {
    crate::engine::stop::MetricSum::of_worker(
        &["python3".into(), "-m".into(), "dynamo.mocker".into()],
        1,
    )
    .unwrap()
}

/// The attempts of the in-flight reads among `a`.
pub(super) fn reads(a: &[Action]) -> Vec<u64> {
    a.iter()
        .filter_map(|a| match a {
            Action::ReadInflight { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect()
}

pub(super) fn detail(a: &[Action], unit: &str, kind: RecordKind) -> String {
    a.iter()
        .find_map(|a| match a {
            Action::Record(r) if r.unit == unit && r.kind == kind => r.detail.clone(),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {kind} of {unit} in {a:?}"))
}

pub(super) fn pid(i: usize) -> Pid {
    100 + i as Pid
}

pub(super) fn spawns(a: &[Action]) -> Vec<usize> {
    a.iter()
        .filter_map(|a| {
            if let Action::Spawn { proc, .. } = a {
                Some(*proc)
            } else {
                None
            }
        })
        .collect()
}

pub(super) fn signals(a: &[Action]) -> Vec<(Pid, Signal)> {
    a.iter()
        .filter_map(|a| {
            if let Action::Signal { pgid, signal } = a {
                Some((*pgid, *signal))
            } else {
                None
            }
        })
        .collect()
}

pub(super) fn records(a: &[Action]) -> Vec<(String, RecordKind)> {
    a.iter()
        .filter_map(|a| {
            if let Action::Record(r) = a {
                Some((r.unit.clone(), r.kind))
            } else {
                None
            }
        })
        .collect()
}

pub(super) fn has(a: &[Action], unit: &str, kind: RecordKind) -> bool {
    records(a).iter().any(|(u, k)| u == unit && *k == kind)
}

pub(super) fn probes(a: &[Action]) -> Vec<u64> {
    a.iter()
        .filter_map(|a| {
            if let Action::Probe { attempt, .. } = a {
                Some(*attempt)
            } else {
                None
            }
        })
        .collect()
}

mod fuzz;
mod order;
mod probing;
mod restart;
mod start;
mod teardown;
mod terminal;
mod unit;
