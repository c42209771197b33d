//! The job's first failure, from every node's events: which process failed first (node,
//! process, how, the known failure line it printed and the lines before it), and what followed
//! because of it (nodes drained, processes stopped, later failures). `mcsup why` tells it in
//! about ten lines; `mcsup status --job` and `mcsup timeline` lead with its headline. Pure: the
//! caller reads the files.

use std::collections::HashMap;

use crate::runfiles::{DiagnosisRecord, EventKind, EventRecord};

/// The signature id of a traceback's exception line (`crate::engine::signatures`).
const EXCEPTION: &str = "python-exception";
/// How long after a failure a diagnosis of the same process still belongs to it (its last
/// output is read after its exit is seen).
const LATE_DIAGNOSIS_MS: u64 = 5_000;

/// How a process failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure<'a> {
    pub node: &'a str,
    pub process: &'a str,
    pub ts_ms: u64,
    /// The event that says it (`exited`, `liveness-failed`, `failed`).
    pub event: EventKind,
    pub exit_code: Option<i32>,
    pub signal: Option<&'a str>,
    /// `exited with code 1`, `liveness failed: …`, `failed: readiness timed out …`.
    pub how: String,
    /// The known failure line it printed (not a bare exception), if any.
    pub diagnosis: Option<&'a DiagnosisRecord>,
    /// The last exception line it printed before it failed, if any.
    pub exception: Option<&'a DiagnosisRecord>,
    /// Whether it was ready again later (a restart that worked).
    pub recovered: bool,
    /// Its spawns after the failure: its log of the failing run is `<node>.<process>.log.<n>`
    /// (each restart rotates it), or the current one when 0.
    pub spawned_after: usize,
    /// Its stacks, dumped when it stopped answering: the file and the top frames.
    pub stacks: Option<&'a str>,
}

impl Failure<'_> {
    /// Whether `other` is the same failure (explained or not).
    fn same(&self, other: &Failure) -> bool {
        (self.node, self.process, self.ts_ms, self.event)
            == (other.node, other.process, other.ts_ms, other.event)
    }

    /// The cause in one clause, from what it printed, else from how it ended.
    pub fn cause(&self) -> String {
        if self.event == EventKind::Refused {
            return "this node's mcsup started nothing: its preflight failed, or it could not set up".into();
        }
        if let Some(d) = self.diagnosis {
            return format!("{}: {}", d.signature, d.what);
        }
        if let Some(e) = self.exception {
            return format!("it raised {}", e.line);
        }
        match self.signal {
            Some("SIGKILL") => "killed by SIGKILL from outside mcsup: the kernel's OOM killer (see `dmesg` or `journalctl -k` on the node), Slurm, or an administrator".into(),
            Some("SIGSEGV") => "a segmentation fault (a crash in native code: the engine, a CUDA or NCCL library)".into(),
            Some("SIGABRT") => "it aborted (a failed assertion or an uncaught C++ exception in native code)".into(),
            Some("SIGBUS") => "a bus error (often /dev/shm too small for the engine's shared memory)".into(),
            _ => self.how.clone(),
        }
    }

    /// What to do.
    pub fn fix(&self) -> String {
        if self.event == EventKind::Refused {
            return format!(
                "`mcsup preflight` on {} shows every check with its fix; the job's output (sweep_<job id>.log) has mcsup's own lines",
                self.node
            );
        }
        match (self.diagnosis, self.exception) {
            (Some(d), _) => d.fix.clone(),
            (None, Some(_)) => "read the exception and the frames before it in the process's log file".into(),
            (None, None) => "read the end of the process's log file; `mcsup status --job` shows the rest of the job".into(),
        }
    }

    /// The lines around the failure that the events keep: the known line (or the exception
    /// line) and the lines printed before it.
    pub fn lines(&self) -> Vec<String> {
        let Some(d) = self.diagnosis.or(self.exception) else {
            return Vec::new();
        };
        let mut out = d.context.clone();
        out.push(d.line.clone());
        out
    }
}

/// What a node did after the job's first failure.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeAfter<'a> {
    pub node: &'a str,
    /// Its mcsup was asked to shut down after the first failure: when, and why.
    pub shutdown: Option<(u64, &'a str)>,
    /// Processes it stopped after the first failure.
    pub stopped: usize,
    /// Its own failures after the first one (consequences, not causes).
    pub failed_after: Vec<Failure<'a>>,
}

/// The story of a job's failures.
#[derive(Debug, Clone, PartialEq)]
pub struct Story<'a> {
    /// The earliest event of the job (its first mcsup's start).
    pub start_ms: u64,
    pub first: Option<Failure<'a>>,
    /// Every node but the first failure's own first, then the others, in the files' order.
    pub nodes: Vec<NodeAfter<'a>>,
}

/// One node's failures, in order: exits nobody asked for (before its teardown), liveness
/// failures, a benchmark whose result is invalid, and other `failed` events (a readiness
/// timeout, a spawn that failed). A `failed`
/// that follows an exit of the same run is the same failure, not another.
fn failures_of<'a>(node: &'a str, evs: &'a [EventRecord]) -> Vec<Failure<'a>> {
    let mut out: Vec<Failure<'a>> = Vec::new();
    let mut stopping: HashMap<&str, bool> = HashMap::new();
    let mut counted: HashMap<&str, bool> = HashMap::new();
    let mut teardown = false;
    for e in evs {
        let p = e.process.as_str();
        let how = match e.event {
            EventKind::Spawned => {
                stopping.insert(p, false);
                counted.insert(p, false);
                None
            }
            EventKind::Stopping | EventKind::Killing | EventKind::Draining => {
                stopping.insert(p, true);
                None
            }
            EventKind::ShutdownRequested => {
                teardown = true;
                None
            }
            EventKind::Exited
                if p != "mcsup"
                    && !teardown
                    && !stopping.get(p).copied().unwrap_or(false)
                    && (e.exit_code != Some(0) || e.signal.is_some()) =>
            {
                Some(match (&e.signal, e.exit_code) {
                    (Some(s), _) => format!("killed by {s}, unasked"),
                    (None, Some(c)) => format!("exited with code {c}, unasked"),
                    (None, None) => "exited, unasked".to_string(),
                })
            }
            EventKind::LivenessFailed if !teardown => Some(format!(
                "its liveness failed: {}",
                e.detail.as_deref().unwrap_or("")
            )),
            // It exited 0, but measured nothing: the job fails with benchmark-invalid.
            EventKind::BenchmarkInvalid => Some(format!(
                "exited 0, but its result is invalid (benchmark-invalid): {}",
                e.detail.as_deref().unwrap_or("")
            )),
            EventKind::Refused => Some(format!(
                "refused to start: {}",
                e.detail.as_deref().unwrap_or("")
            )),
            EventKind::Failed if p != "mcsup" && !counted.get(p).copied().unwrap_or(false) => {
                Some(format!("failed: {}", e.detail.as_deref().unwrap_or("")))
            }
            _ => None,
        };
        if let Some(how) = how {
            counted.insert(p, true);
            out.push(Failure {
                node,
                process: p,
                ts_ms: e.ts_ms,
                event: e.event,
                exit_code: e.exit_code,
                signal: e.signal.as_deref(),
                how,
                diagnosis: None,
                exception: None,
                recovered: false,
                spawned_after: 0,
                stacks: None,
            });
        }
    }
    out
}

/// One process's events on a node, in time order, with its spawns' and readies' times: what
/// [`explain`] needs, found by binary search (a node of 20,000 failing processes, or one process
/// restarted thousands of times, is explained in n log n, not n²).
#[derive(Default)]
struct ProcEvents<'a> {
    evs: Vec<&'a EventRecord>,
    spawns: Vec<u64>,
    readies: Vec<u64>,
}

/// A node's events by process.
fn by_process(evs: &[EventRecord]) -> HashMap<&str, ProcEvents<'_>> {
    let mut m: HashMap<&str, ProcEvents> = HashMap::new();
    for e in evs {
        m.entry(e.process.as_str()).or_default().evs.push(e);
    }
    for p in m.values_mut() {
        // Stable: events of one millisecond keep their file order.
        p.evs.sort_by_key(|e| e.ts_ms);
        let times = |k: EventKind| {
            p.evs
                .iter()
                .filter(|e| e.event == k)
                .map(|e| e.ts_ms)
                .collect()
        };
        p.spawns = times(EventKind::Spawned);
        p.readies = times(EventKind::Ready);
    }
    m
}

/// Fill in what `f`'s process printed in the run that failed, and whether it came back.
fn explain<'a>(f: &mut Failure<'a>, index: &HashMap<&str, ProcEvents<'a>>) {
    let Some(p) = index.get(f.process) else {
        return;
    };
    // Spawns at or before the failure, and after it.
    let before = p.spawns.partition_point(|t| *t <= f.ts_ms);
    let spawned = before.checked_sub(1).map_or(0, |i| p.spawns[i]);
    let respawned = p.spawns.get(before).copied().unwrap_or(u64::MAX);
    let until = respawned.min(f.ts_ms.saturating_add(LATE_DIAGNOSIS_MS));
    let from = p.evs.partition_point(|e| e.ts_ms < spawned);
    let to = p.evs.partition_point(|e| e.ts_ms <= until);
    for e in &p.evs[from..to.max(from)] {
        if e.event == EventKind::StackDump && e.ts_ms >= f.ts_ms && f.stacks.is_none() {
            f.stacks = e.detail.as_deref();
        }
        if let Some(d) = &e.diagnosis {
            if d.signature == EXCEPTION {
                f.exception = Some(d);
            } else if f
                .diagnosis
                .is_none_or(|x| x.points_elsewhere && !d.points_elsewhere)
            {
                // The first that names a cause; one that only points at another line, when
                // there is nothing else.
                f.diagnosis = Some(d);
            }
        }
    }
    f.recovered = p.readies.last().is_some_and(|t| *t > f.ts_ms);
    f.spawned_after = p.spawns.len() - before;
}

/// What node `k` (its events `evs`) did from `at` on: its shutdown (when, why), the processes
/// it stopped, its failures other than `first` (from `all`, every failure of the job).
type After<'a> = (Option<(u64, &'a str)>, usize, Vec<Failure<'a>>);

fn after<'a>(
    failures: &[&Failure<'a>],
    first: Option<&Failure<'a>>,
    evs: &'a [EventRecord],
    at: u64,
) -> After<'a> {
    let mut failed_after: Vec<Failure<'a>> = failures
        .iter()
        .filter(|f| f.ts_ms >= at && !first.is_some_and(|x| x.same(f)))
        .map(|f| (*f).clone())
        .collect();
    if !failed_after.is_empty() {
        let index = by_process(evs);
        for f in &mut failed_after {
            explain(f, &index);
        }
    }
    let stopped = evs
        .iter()
        .filter(|e| e.ts_ms >= at && e.event == EventKind::Stopping)
        .count();
    let shutdown = evs
        .iter()
        .find(|e| e.ts_ms >= at && e.event == EventKind::ShutdownRequested)
        .map(|e| (e.ts_ms, e.detail.as_deref().unwrap_or("")));
    (shutdown, stopped, failed_after)
}

/// The story of the job in `nodes` (each node's events, in file order).
pub fn story(nodes: &[(String, Vec<EventRecord>)]) -> Story<'_> {
    let start_ms = nodes
        .iter()
        .flat_map(|(_, evs)| evs.iter().map(|e| e.ts_ms))
        .min()
        .unwrap_or(0);
    let mut all: Vec<(usize, Failure<'_>)> = nodes
        .iter()
        .enumerate()
        .flat_map(|(k, (n, evs))| failures_of(n, evs).into_iter().map(move |f| (k, f)))
        .collect();
    // The earliest; on a tie, the first in node and file order (the sort is stable).
    all.sort_by_key(|(_, f)| f.ts_ms);
    let mut first = all.first().map(|(k, f)| (*k, f.clone()));
    if let Some((k, f)) = &mut first {
        explain(f, &by_process(&nodes[*k].1));
    }
    // What followed a failure its process recovered from (restarted, ready again) did not
    // follow because of it.
    let at = first
        .as_ref()
        .filter(|(_, f)| !f.recovered)
        .map_or(u64::MAX, |(_, f)| f.ts_ms);
    let order: Vec<usize> = first
        .iter()
        .map(|(k, _)| *k)
        .chain((0..nodes.len()).filter(|k| first.as_ref().is_none_or(|(j, _)| j != k)))
        .collect();
    // Each node's failures, in time order: one pass, not one per node.
    let mut by_node: Vec<Vec<&Failure>> = vec![Vec::new(); nodes.len()];
    for (k, f) in &all {
        by_node[*k].push(f);
    }
    let nodes_after = order
        .into_iter()
        .map(|k| {
            let (node, evs) = &nodes[k];
            let (shutdown, stopped, failed_after) =
                after(&by_node[k], first.as_ref().map(|(_, f)| f), evs, at);
            NodeAfter {
                node,
                shutdown,
                stopped,
                failed_after,
            }
        })
        .collect();
    Story {
        start_ms,
        first: first.map(|(_, f)| f),
        nodes: nodes_after,
    }
}

fn secs(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

impl Story<'_> {
    /// One line: `first failure: n3/decode-0 at +14.2 s: exited with code 1, unasked; cuda-oom:
    /// the GPU ran out of memory`, or `None` when nothing failed.
    pub fn headline(&self) -> Option<String> {
        let f = self.first.as_ref()?;
        // Without a known line or a signal the cause is how it ended: said once.
        let cause = f.cause();
        let cause = if cause == f.how {
            String::new()
        } else {
            format!("; {cause}")
        };
        Some(format!(
            "first failure: {}/{} at +{}: {}{}{}",
            f.node,
            f.process,
            secs(f.ts_ms.saturating_sub(self.start_ms)),
            f.how,
            cause,
            if f.recovered {
                " (it was restarted and ready again)"
            } else {
                ""
            }
        ))
    }

    /// The nodes the first failure's consequences reached: stopped after it (drained), not
    /// failed; the first failure's own node is not among them.
    pub fn drained(&self) -> impl Iterator<Item = &NodeAfter<'_>> {
        let own = self.first.as_ref().map(|f| f.node);
        self.nodes
            .iter()
            .filter(move |n| Some(n.node) != own && n.shutdown.is_some())
    }

    /// What followed the first failure, in one line.
    fn then(&self) -> String {
        let Some(f) = &self.first else {
            return String::new();
        };
        let mut parts = Vec::new();
        if let Some(own) = self.nodes.iter().find(|n| n.node == f.node) {
            if let Some((t, why)) = own.shutdown {
                parts.push(format!(
                    "{} tore down at +{} ({why})",
                    f.node,
                    secs(t.saturating_sub(f.ts_ms))
                ));
            }
        }
        let drained: Vec<&NodeAfter> = self.drained().collect();
        if !drained.is_empty() {
            let names: Vec<&str> = drained.iter().map(|n| n.node).collect();
            let (t, why) = drained
                .iter()
                .filter_map(|n| n.shutdown)
                .min_by_key(|(t, _)| *t)
                .unwrap_or((f.ts_ms, ""));
            parts.push(format!(
                "{} drained because of it (from +{}: {why})",
                crate::node::compress_nodelist(&names),
                secs(t.saturating_sub(f.ts_ms))
            ));
        }
        let stopped: usize = self.nodes.iter().map(|n| n.stopped).sum();
        parts.push(format!("{stopped} process(es) stopped"));
        let later: Vec<String> = self
            .nodes
            .iter()
            .flat_map(|n| n.failed_after.iter())
            .map(|x| format!("{}/{} ({})", x.node, x.process, x.cause()))
            .collect();
        parts.push(match later.len() {
            0 => "nothing else failed".into(),
            n if n <= 3 => format!("then failed: {}", later.join(", ")),
            n => format!("then {n} more failed, first {}", later[..3].join(", ")),
        });
        parts.join("; ")
    }

    /// `mcsup why`: the story in about ten lines. `log_tail` is the end of the failing
    /// process's log file, shown when no known line was kept.
    pub fn human(&self, log_file: &str, log_tail: &[String]) -> String {
        let Some(f) = &self.first else {
            return "no process failed: every exit was asked for or successful\n".into();
        };
        let mut out = format!("{}\n", self.headline().unwrap_or_default());
        out.push_str(&format!("cause: {}\n", f.cause()));
        let lines = f.lines();
        let (shown, mark) = if lines.is_empty() {
            (log_tail.to_vec(), false)
        } else {
            (lines, true)
        };
        let n = shown.len();
        for (i, l) in shown.iter().enumerate() {
            let m = if mark && i + 1 == n { ">" } else { "|" };
            out.push_str(&format!("  {m} {l}\n"));
        }
        if let Some(s) = f.stacks {
            out.push_str(&format!("stacks: {s}\n"));
        }
        out.push_str(&format!("then: {}\n", self.then()));
        out.push_str(&format!("fix: {}\n", f.fix()));
        if f.event != EventKind::Refused {
            out.push_str(&format!("log: {log_file}\n"));
        }
        out
    }

    /// `mcsup why --json`.
    pub fn json(&self, log_file: Option<&str>) -> serde_json::Value {
        let failure = |f: &Failure| {
            serde_json::json!({
                "node": f.node,
                "process": f.process,
                "at_s": f.ts_ms.saturating_sub(self.start_ms) as f64 / 1000.0,
                "ts_ms": f.ts_ms,
                "event": f.event,
                "exit_code": f.exit_code,
                "signal": f.signal,
                "how": f.how,
                "cause": f.cause(),
                "diagnosis": f.diagnosis,
                "exception": f.exception,
                "lines": f.lines(),
                "fix": f.fix(),
                "recovered": f.recovered,
                "stacks": f.stacks,
            })
        };
        serde_json::json!({
            "first_failure": self.first.as_ref().map(|f| {
                let mut v = failure(f);
                v["log_file"] = serde_json::json!(log_file);
                v
            }),
            "headline": self.headline(),
            "nodes": self.nodes.iter().map(|n| serde_json::json!({
                "node": n.node,
                "outcome": self.outcome(n).as_str(),
                "shutdown": n.shutdown.map(|(t, why)| serde_json::json!({
                    "after_first_failure_s": self.first.as_ref().map(|f| t.saturating_sub(f.ts_ms) as f64 / 1000.0),
                    "reason": why,
                })),
                "stopped": n.stopped,
                "failed_after": n.failed_after.iter().map(failure).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }

    /// What the first failure was to each node, by name.
    pub fn outcomes(&self) -> HashMap<&str, Outcome> {
        self.nodes
            .iter()
            .map(|n| (n.node, self.outcome(n)))
            .collect()
    }

    /// What the first failure was to node `n`.
    pub fn outcome(&self, n: &NodeAfter) -> Outcome {
        match &self.first {
            Some(f) if f.node == n.node && f.recovered => Outcome::Recovered,
            Some(f) if f.node == n.node => Outcome::Failed,
            Some(_) if !n.failed_after.is_empty() => Outcome::FailedAfter,
            Some(_) if n.shutdown.is_some() => Outcome::Drained,
            _ => Outcome::Ok,
        }
    }
}

/// What the job's first failure was to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It failed there.
    Failed,
    /// It failed there, and its process was restarted and ready again.
    Recovered,
    /// The node was stopped after it, because of it.
    Drained,
    /// The node failed too, later.
    FailedAfter,
    /// Nothing.
    Ok,
}

impl Outcome {
    /// The name in `--json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Failed => "failed",
            Outcome::Recovered => "recovered",
            Outcome::Drained => "drained",
            Outcome::FailedAfter => "failed after",
            Outcome::Ok => "ok",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(node: &str, t: u64, p: &str, kind: &str) -> EventRecord {
        EventRecord {
            ts_ms: 1_000_000 + t,
            t_ms: t as f64,
            node: node.into(),
            process: p.into(),
            event: kind.into(),
            pid: None,
            exit_code: None,
            signal: None,
            detail: None,
            diagnosis: None,
        }
    }

    fn diag(node: &str, t: u64, p: &str, sig: &str, line: &str) -> EventRecord {
        let mut e = ev(node, t, p, "diagnosis");
        e.diagnosis = Some(DiagnosisRecord {
            signature: sig.into(),
            catalogue: 2,
            line: line.into(),
            context: vec!["  File \"x.py\", line 1".into()],
            what: "the GPU ran out of memory".into(),
            fix: "lower the memory share".into(),
            source: "s".into(),
            points_elsewhere: sig == "sglang-scheduler-exception",
        });
        e
    }

    fn exited(node: &str, t: u64, p: &str, code: i32) -> EventRecord {
        let mut e = ev(node, t, p, "exited");
        e.exit_code = Some(code);
        e
    }

    fn shutdown(node: &str, t: u64, why: &str) -> EventRecord {
        let mut e = ev(node, t, "mcsup", "shutdown-requested");
        e.detail = Some(why.into());
        e
    }

    /// n3's decode worker dies of CUDA OOM; n1 and n2 are drained by the batch script and
    /// their workers exit with errors while being stopped or after.
    fn job() -> Vec<(String, Vec<EventRecord>)> {
        let n1 = vec![
            ev("n1", 0, "frontend", "spawned"),
            ev("n1", 900, "frontend", "ready"),
            shutdown("n1", 5_600, "received SIGUSR1"),
            ev("n1", 5_601, "frontend", "stopping"),
            exited("n1", 5_700, "frontend", 143),
            ev("n1", 5_700, "frontend", "stopped"),
        ];
        let n2 = vec![
            ev("n2", 100, "prefill", "spawned"),
            ev("n2", 1_000, "prefill", "ready"),
            // A consequence: it lost its peer before the drain reached it.
            exited("n2", 5_300, "prefill", 1),
            shutdown("n2", 5_650, "received SIGUSR1"),
        ];
        let mut n3 = vec![
            ev("n3", 50, "decode", "spawned"),
            ev("n3", 1_200, "decode", "ready"),
            diag(
                "n3",
                5_000,
                "decode",
                "cuda-oom",
                "torch.OutOfMemoryError: CUDA out of memory.",
            ),
            exited("n3", 5_010, "decode", 1),
        ];
        let mut failed = ev("n3", 5_010, "decode", "failed");
        failed.detail = Some("exit code 1 (restart policy: never)".into());
        n3.push(failed);
        n3.push(diag(
            "n3",
            5_020,
            "decode",
            "python-exception",
            "torch.OutOfMemoryError: CUDA out of memory.",
        ));
        n3.push(shutdown(
            "n3",
            5_010,
            "critical `decode` failed (exit code 1)",
        ));
        vec![("n1".into(), n1), ("n2".into(), n2), ("n3".into(), n3)]
    }

    #[test]
    fn the_first_failure_is_the_earliest_and_the_rest_followed_it() {
        let nodes = job();
        let s = story(&nodes);
        let f = s.first.as_ref().unwrap();
        assert_eq!((f.node, f.process, f.exit_code), ("n3", "decode", Some(1)));
        assert_eq!(f.diagnosis.unwrap().signature, "cuda-oom");
        assert_eq!(f.exception.unwrap().signature, "python-exception");
        assert_eq!(
            s.headline().unwrap(),
            "first failure: n3/decode at +5.0 s: exited with code 1, unasked; cuda-oom: the GPU ran out of memory"
        );
        // The failing node first, then the others.
        let order: Vec<(&str, &str)> = s
            .nodes
            .iter()
            .map(|n| (n.node, s.outcome(n).as_str()))
            .collect();
        assert_eq!(
            order,
            [("n3", "failed"), ("n1", "drained"), ("n2", "failed after")]
        );
        // n1's frontend exited 143 while it was being stopped: no failure.
        assert!(s.nodes[1].failed_after.is_empty());
        assert_eq!(s.nodes[1].stopped, 1);
        let drained: Vec<&str> = s.drained().map(|n| n.node).collect();
        assert_eq!(drained, ["n1", "n2"]);
    }

    #[test]
    fn why_tells_it_in_about_ten_lines_and_as_json() {
        let nodes = job();
        let s = story(&nodes);
        let text = s.human("/logs/n3.decode.log", &[]);
        assert!(text.lines().count() <= 10, "{text}");
        assert!(
            text.starts_with("first failure: n3/decode at +5.0 s"),
            "{text}"
        );
        assert!(text.contains("\n  | "), "{text}");
        assert!(
            text.contains("\n  > torch.OutOfMemoryError: CUDA out of memory.\n"),
            "{text}"
        );
        assert!(
            text.contains("n3 tore down at +0.0 s (critical `decode` failed (exit code 1)); n[1-2] drained because of it (from +0.6 s: received SIGUSR1); 1 process(es) stopped; then failed: n2/prefill (exited with code 1, unasked)"),
            "{text}"
        );
        assert!(
            text.contains("fix: lower the memory share\nlog: /logs/n3.decode.log\n"),
            "{text}"
        );
        let j = s.json(Some("/logs/n3.decode.log"));
        assert_eq!(j["first_failure"]["node"], "n3");
        assert_eq!(j["first_failure"]["diagnosis"]["signature"], "cuda-oom");
        assert_eq!(j["nodes"][1]["outcome"], "drained");
    }

    /// What the job is for failed: a benchmark that exits 3, or one that exits 0 with an invalid
    /// result, is the job's first failure, named with how.
    #[test]
    fn a_failing_or_invalid_benchmark_is_the_first_failure() {
        let mut invalid = ev("n1", 9_000, "benchmark", "benchmark-invalid");
        invalid.detail = Some("generated tokens: 0 in results_concurrency_4.json".into());
        let nodes = vec![(
            "n1".to_string(),
            vec![
                ev("n1", 0, "worker", "spawned"),
                ev("n1", 4_000, "benchmark", "spawned"),
                exited("n1", 9_000, "benchmark", 0),
                ev("n1", 9_000, "benchmark", "completed"),
                invalid,
                shutdown(
                    "n1",
                    9_001,
                    "`benchmark` ended (exit code 9): the job is done",
                ),
            ],
        )];
        let s = story(&nodes);
        let text = s.human("/logs/n1.benchmark.log", &[]);
        assert!(
            text.starts_with("first failure: n1/benchmark at +9.0 s: exited 0, but its result is invalid (benchmark-invalid): generated tokens: 0 in results_concurrency_4.json"),
            "{text}"
        );
        let nodes = vec![(
            "n1".to_string(),
            vec![
                ev("n1", 4_000, "benchmark", "spawned"),
                exited("n1", 9_000, "benchmark", 3),
                ev("n1", 9_000, "benchmark", "failed"),
                shutdown(
                    "n1",
                    9_001,
                    "`benchmark` ended (exit code 3): the job is done",
                ),
            ],
        )];
        let text = story(&nodes).human("/logs/n1.benchmark.log", &[]);
        assert!(
            text.starts_with("first failure: n1/benchmark at +5.0 s: exited with code 3, unasked"),
            "{text}"
        );
    }

    #[test]
    fn without_a_known_line_the_cause_comes_from_how_it_ended() {
        let mut k = exited("n1", 10, "w", 137);
        k.signal = Some("SIGKILL".into());
        let nodes = vec![("n1".to_string(), vec![ev("n1", 0, "w", "spawned"), k])];
        let s = story(&nodes);
        let f = s.first.as_ref().unwrap();
        assert!(f.cause().contains("OOM killer"), "{}", f.cause());
        let text = s.human("n1.w.log", &["last line".into()]);
        assert!(text.contains("\n  | last line\n"), "{text}");
        // A restart that came back says so.
        let mut evs = nodes[0].1.clone();
        evs.push(ev("n1", 20, "w", "spawned"));
        evs.push(ev("n1", 30, "w", "ready"));
        evs.push(shutdown("n1", 40, "received SIGUSR1"));
        let nodes = vec![
            ("n1".to_string(), evs),
            (
                "n2".to_string(),
                vec![shutdown("n2", 41, "received SIGUSR1")],
            ),
        ];
        let s = story(&nodes);
        assert!(s
            .headline()
            .unwrap()
            .ends_with("(it was restarted and ready again)"));
        // The drain that came later was not because of it.
        assert_eq!(s.drained().count(), 0);
        assert_eq!(s.outcome(&s.nodes[0]).as_str(), "recovered");
        assert_eq!(s.outcome(&s.nodes[1]).as_str(), "ok");
    }

    /// A process that failed three times, each run with its own line: each failure gets the
    /// diagnosis of its own run (not an earlier or later one's), the number of spawns after it,
    /// and whether a later run was ready.
    #[test]
    fn each_failure_of_a_restarted_process_is_explained_by_its_own_run() {
        let mut evs = Vec::new();
        for (run, t) in [(0u64, 0u64), (1, 20_000), (2, 40_000)] {
            evs.push(ev("n1", t, "w", "spawned"));
            if run < 2 {
                evs.push(ev("n1", t + 100, "w", "ready"));
            }
            let sig = ["cuda-oom", "nccl-error", "address-in-use"][run as usize];
            evs.push(diag(
                "n1",
                t + 1_000,
                "w",
                sig,
                &format!("line of run {run}"),
            ));
            evs.push(exited("n1", t + 1_010, "w", 1));
        }
        let nodes = [("n1".to_string(), evs)];
        let index = by_process(&nodes[0].1);
        let mut got = Vec::new();
        for mut f in failures_of("n1", &nodes[0].1) {
            explain(&mut f, &index);
            got.push((
                f.diagnosis.map(|d| d.signature.clone()),
                f.spawned_after,
                f.recovered,
            ));
        }
        let s = |x: &str| Some(x.to_string());
        assert_eq!(
            got,
            [
                (s("cuda-oom"), 2, true),
                (s("nccl-error"), 1, false),
                (s("address-in-use"), 0, false)
            ]
        );
    }

    #[test]
    fn a_job_without_failures_has_no_story() {
        let nodes = vec![(
            "n1".to_string(),
            vec![
                ev("n1", 0, "w", "spawned"),
                shutdown("n1", 10, "received SIGTERM"),
                ev("n1", 11, "w", "stopping"),
                exited("n1", 12, "w", 143),
            ],
        )];
        let s = story(&nodes);
        assert!(s.first.is_none() && s.headline().is_none());
        assert!(s.human("", &[]).starts_with("no process failed"));
    }
}
