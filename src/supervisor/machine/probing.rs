//! Readiness and liveness: which probes are due, what their results mean, and when a wait
//! has timed out (for processes and for gates).

use std::time::{Duration, Instant};

use crate::plan::{LivenessSpec, ProbeSpec, ReadinessSpec};

use super::*;

/// For this long from the start of a child's readiness wait, a failed TCP, HTTP or file probe is
/// retried at the spec's interval without backing off, so a service is seen within about one
/// interval of getting ready (the planner's default is 1 ms) during the first seconds, when
/// instantly-ready services and chains of them become ready; then the interval doubles up to its
/// maximum. Such an attempt costs microseconds (a loopback connect, a stat).
pub const FAST_WINDOW: Duration = Duration::from_secs(2);
/// Before that, the first retries of such a probe come sooner: from this interval, growing by
/// [`RAMP_FACTOR`] per failure up to the spec's interval. A child that gets ready within its first
/// milliseconds (an instantly-listening service, the next link of a chain) is then seen within
/// about a quarter of the time it took (+0.1 ms), not up to a whole interval later; a slower one
/// costs a few extra attempts (12 instead of 6 in the first 5 ms with the default 1 ms interval).
pub const RAMP_FIRST: Duration = Duration::from_micros(100);
/// Growth of the ramp's interval per failed attempt (see [`RAMP_FIRST`]).
pub const RAMP_FACTOR: f64 = 1.25;
/// An exec probe forks a process per attempt, and a gate probes another node: neither is
/// retried more often than this, and both back off from the first failure.
pub const SLOW_PROBE_MIN_INTERVAL: Duration = Duration::from_millis(10);

/// What a probe attempt answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    Pass,
    /// Not yet: retried (readiness) or counted (liveness).
    Fail,
    /// Retrying cannot help (`Event::ProbeFailed`).
    Final,
}

impl Answer {
    pub(super) fn of(ok: bool) -> Self {
        if ok {
            Answer::Pass
        } else {
            Answer::Fail
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct ProbeRun {
    pub(super) spec: ProbeSpec,
    pub(super) passed: bool,
    /// What the passing attempt said, if anything (a store's registered segment): the `ready`
    /// event carries it.
    pub(super) said: Option<String>,
    pub(super) in_flight: Option<u64>,
    pub(super) next_at: Instant,
    pub(super) interval: Duration,
    /// The spec's interval: the ramp ([`RAMP_FIRST`]) grows up to it before backing off.
    pub(super) base: Duration,
    /// Until then, failures do not back off ([`FAST_WINDOW`]).
    pub(super) fast_until: Option<Instant>,
}

/// A wait longer than this is reported ("still waiting for ..."), then again after twice the
/// gap, up to [`PROGRESS_MAX_GAP`]: a calm cadence, not a line per probe attempt.
pub const PROGRESS_FIRST: Duration = Duration::from_secs(5);
pub const PROGRESS_MAX_GAP: Duration = Duration::from_secs(60);

/// A readiness wait in progress (process or gate).
#[derive(Debug, Clone)]
pub(super) struct Readiness {
    pub(super) started: Instant,
    pub(super) timeout: Duration,
    /// When to say next that the wait goes on, and the gap after that.
    pub(super) next_report: Instant,
    pub(super) report_gap: Duration,
    pub(super) deadline: Instant,
    pub(super) max_interval: Duration,
    pub(super) attempt_timeout: Duration,
    pub(super) probes: Vec<ProbeRun>,
}

/// Where a readiness wait probes: a child of this node, or a gate (another node, or an external
/// endpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waiter {
    Child,
    Gate,
}

impl Readiness {
    pub(super) fn new(spec: &ReadinessSpec, now: Instant, waiter: Waiter) -> Self {
        let first = now + spec.initial_delay;
        Readiness {
            started: now,
            timeout: spec.timeout,
            next_report: now + PROGRESS_FIRST,
            report_gap: PROGRESS_FIRST,
            deadline: now + spec.timeout,
            max_interval: spec.max_interval.max(spec.interval),
            attempt_timeout: spec.attempt_timeout,
            probes: spec
                .probes
                .iter()
                .map(|p| {
                    let cheap = waiter == Waiter::Child
                        && matches!(
                            p,
                            ProbeSpec::Tcp { .. } | ProbeSpec::Http { .. } | ProbeSpec::File { .. }
                        );
                    let base = if cheap {
                        spec.interval
                    } else {
                        spec.interval.max(SLOW_PROBE_MIN_INTERVAL)
                    };
                    ProbeRun {
                        spec: p.clone(),
                        passed: false,
                        said: None,
                        in_flight: None,
                        next_at: first,
                        interval: if cheap { base.min(RAMP_FIRST) } else { base },
                        base,
                        fast_until: cheap.then_some(first + FAST_WINDOW),
                    }
                })
                .collect(),
        }
    }

    pub(super) fn all_passed(&self) -> bool {
        self.probes.iter().all(|p| p.passed)
    }

    /// What the passing attempts said (for the `ready` event), if any.
    pub(super) fn said(&self) -> Option<String> {
        let said: Vec<&str> = self
            .probes
            .iter()
            .filter_map(|p| p.said.as_deref())
            .collect();
        (!said.is_empty()).then(|| said.join("; "))
    }

    /// Probes that are due (log-line probes are never polled: output lines are events).
    pub(super) fn emit_due(
        &mut self,
        unit: UnitRef,
        now: Instant,
        next_attempt: &mut u64,
        out: &mut Vec<Action>,
    ) {
        for p in &mut self.probes {
            if p.passed || p.in_flight.is_some() || matches!(p.spec, ProbeSpec::LogLine { .. }) {
                continue;
            }
            if p.next_at <= now {
                *next_attempt += 1;
                p.in_flight = Some(*next_attempt);
                out.push(Action::Probe {
                    attempt: *next_attempt,
                    unit,
                    probe: p.spec.clone(),
                    timeout: self.attempt_timeout,
                });
            }
        }
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let probes = self
            .probes
            .iter()
            .filter(|p| {
                !p.passed && p.in_flight.is_none() && !matches!(p.spec, ProbeSpec::LogLine { .. })
            })
            .map(|p| p.next_at);
        probes.chain([self.deadline, self.next_report]).min()
    }

    /// When the next progress report is due: what is still awaited and for how long
    /// (`http GET ... -> 200 — 45 s of 600 s (last: connection refused)`).
    pub(super) fn progress_due(&mut self, now: Instant, last: Option<&str>) -> Option<String> {
        if now < self.next_report {
            return None;
        }
        self.report_gap = (self.report_gap * 2).min(PROGRESS_MAX_GAP);
        self.next_report = now + self.report_gap;
        let pending: Vec<String> = self
            .probes
            .iter()
            .filter(|p| !p.passed)
            .map(|p| p.spec.to_string())
            .collect();
        Some(format!(
            "{} — {} s of {} s{}",
            pending.join(" and "),
            now.duration_since(self.started).as_secs(),
            self.timeout.as_secs(),
            last.map(|d| format!(" (last: {d})")).unwrap_or_default()
        ))
    }

    /// Returns true if the attempt belonged to this wait. A passing attempt's non-empty detail
    /// is kept for the `ready` event.
    pub(super) fn on_result(&mut self, attempt: u64, ok: bool, detail: &str, now: Instant) -> bool {
        let max = self.max_interval;
        for p in &mut self.probes {
            if p.in_flight == Some(attempt) {
                p.in_flight = None;
                if ok {
                    p.passed = true;
                    p.said = (!detail.is_empty()).then(|| detail.to_string());
                } else {
                    p.next_at = now + p.interval;
                    if p.interval < p.base {
                        p.interval = p.interval.mul_f64(RAMP_FACTOR).min(p.base);
                    } else if p.fast_until.is_none_or(|until| now >= until) {
                        p.interval = (p.interval * 2).min(max);
                    }
                }
                return true;
            }
        }
        false
    }
}

#[derive(Debug, Clone)]
pub(super) struct Liveness {
    pub(super) spec: LivenessSpec,
    pub(super) in_flight: Option<u64>,
    pub(super) next_at: Instant,
    pub(super) failures: u32,
}

impl Machine {
    pub(super) fn new_liveness(p: &Proc, now: Instant) -> Option<Liveness> {
        p.spec.liveness.as_ref().and_then(|l| {
            // A log-line probe only makes sense for readiness (a line is printed once).
            if matches!(l.probe, ProbeSpec::LogLine { .. }) {
                return None;
            }
            Some(Liveness {
                spec: l.clone(),
                in_flight: None,
                next_at: now + l.period,
                failures: 0,
            })
        })
    }

    #[allow(clippy::collapsible_match)]
    pub(super) fn on_probe(
        &mut self,
        attempt: u64,
        answer: Answer,
        detail: String,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let ok = answer == Answer::Pass;
        for g in &mut self.gates {
            if let GateState::Probing(r) = &mut g.state {
                if r.on_result(attempt, ok, &detail, now) {
                    if answer == Answer::Final {
                        // The deadline is now: the next settle fails the gate with this.
                        r.deadline = now;
                    }
                    if !ok {
                        g.probe_failures += 1;
                        if complain(&mut g.detail, detail) {
                            self.version += 1;
                        }
                    }
                    return;
                }
            }
        }
        for i in 0..self.procs.len() {
            let p = &mut self.procs[i];
            match &mut p.state {
                ProcState::Starting { readiness, .. } => {
                    if readiness.on_result(attempt, ok, &detail, now) {
                        if answer == Answer::Final {
                            let then = AfterStop::Fail {
                                code: ExitCode::ReadinessFailed.code(),
                                reason: format!("readiness failed: {detail}"),
                            };
                            self.begin_stop(i, then, now, out);
                            return;
                        }
                        if !ok {
                            p.probe_failures += 1;
                            if complain(&mut p.detail, format!("not ready yet: {detail}")) {
                                self.version += 1;
                            }
                        }
                        return;
                    }
                }
                ProcState::Ready {
                    pid,
                    liveness: Some(l),
                } if l.in_flight == Some(attempt) => {
                    let pid = *pid;
                    l.in_flight = None;
                    l.next_at = now + l.spec.period;
                    if ok {
                        l.failures = 0;
                        return;
                    }
                    l.failures += 1;
                    p.probe_failures += 1;
                    if answer == Answer::Fail && l.failures < l.spec.failure_threshold.max(1) {
                        return;
                    }
                    let d = format!("{} consecutive failures, last: {detail}", l.failures);
                    push_failure(
                        i,
                        rec(&p.spec.name, RecordKind::LivenessFailed)
                            .pid(pid)
                            .detail(d),
                        out,
                    );
                    self.stalled(i, now, out);
                    return;
                }
                _ => {}
            }
        }
    }

    /// A fatal log line of process `proc`: a liveness failure of the incarnation that printed it
    /// (while it starts or serves), stopped and then restarted or failed by its policy.
    pub(super) fn on_fatal_line(
        &mut self,
        proc: usize,
        generation: u64,
        detail: String,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let Some(p) = self.procs.get_mut(proc) else {
            return;
        };
        if p.generation != generation
            || !matches!(
                p.state,
                ProcState::Starting { .. } | ProcState::Ready { .. }
            )
            || matches!(self.phase, Phase::Stopping | Phase::Done)
        {
            return;
        }
        let pid = p.state.live_pid();
        p.probe_failures += 1;
        let mut r = rec(&p.spec.name, RecordKind::LivenessFailed).detail(detail);
        r.pid = pid;
        push_failure(proc, r, out);
        self.stalled(proc, now, out);
    }

    pub(super) fn settle_gates(&mut self, now: Instant, out: &mut Vec<Action>) {
        for gi in 0..self.gates.len() {
            let g = &mut self.gates[gi];
            let GateState::Probing(r) = &mut g.state else {
                continue;
            };
            if r.all_passed() {
                out.push(Action::Record(rec(&g.spec.name, RecordKind::Ready)));
                g.state = GateState::Ready;
                g.since = now;
                g.first_ready.get_or_insert(now);
                self.version += 1;
            } else if now >= r.deadline {
                let d = format!(
                    "readiness timed out after {} ms{}",
                    ms(g.spec.readiness.timeout),
                    g.detail
                        .as_ref()
                        .map(|d| format!(" (last: {d})"))
                        .unwrap_or_default()
                );
                out.push(Action::Record(
                    rec(&g.spec.name, RecordKind::Failed).detail(d.clone()),
                ));
                g.detail = Some(d);
                g.state = GateState::Failed;
                g.since = now;
                self.version += 1;
            } else {
                r.emit_due(UnitRef::Gate(gi), now, &mut self.next_attempt, out);
                if let Some(d) = r.progress_due(now, g.detail.as_deref()) {
                    out.push(Action::Record(
                        rec(&g.spec.name, RecordKind::StillWaiting).detail(d),
                    ));
                }
            }
        }
    }
}

/// A failed probe's complaint into a unit's detail; whether it is news for the status file (the
/// first failure, or a different error). A repeated one is not: it waits for the next progress
/// record, so a probe retried every millisecond does not rewrite the file each time.
fn complain(slot: &mut Option<String>, detail: String) -> bool {
    if slot.as_deref() == Some(detail.as_str()) {
        return false;
    }
    *slot = Some(detail);
    true
}
