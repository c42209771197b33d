//! The failure catalogues at work: every child's output is watched for the known failure lines
//! (`crate::engine::signatures`, `crate::mooncake::signatures`) as it arrives, and a match
//! becomes a `diagnosis` event with the line, the lines before it, what it means and the fix.
//!
//! A signature reported at once is reported once per process incarnation. A Python traceback is
//! followed to its final exception line, which is only kept: the runtime writes it when the
//! process then fails (healthy servers log tracebacks of requests they cancel), unless a probe
//! started after it passed (the process outlived that exception).

use std::collections::{HashMap, VecDeque};
use std::sync::OnceLock;
use std::time::Instant;

use aho_corasick::AhoCorasick;

use crate::domain::signature::{shown_line, Reported, Signature, SHOWN_CHARS};
use crate::runfiles::DiagnosisRecord;

use super::{Answer, Effect, Input, Now, Watcher};
use crate::plan::Plan;
use crate::runfiles::EventKind;
use crate::supervisor::logs::{LineTap, LineWatcher, Watch};
use crate::supervisor::machine::WatchRequest;

/// Bumped when a signature is added, removed or its meaning changes (events name it).
pub const CATALOGUE_VERSION: u32 = 3;

/// Lines a traceback is followed for before it is given up (a runaway dump is no traceback).
const TRACEBACK_MAX_LINES: usize = 2000;

/// Whether the catalogue watches the children's output: yes, unless `MCSUP_DIAGNOSE=0` (the
/// log-capture benchmark's comparison, or a log that trips a signature falsely). Read once.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("MCSUP_DIAGNOSE").is_none_or(|v| v != "0"))
}

/// Every signature, most specific first (a line is reported under the first one it matches):
/// Mooncake's, then the engines' and the system's.
pub fn catalogue() -> impl Iterator<Item = &'static Signature> + Clone {
    crate::mooncake::signatures::SIGNATURES
        .iter()
        .chain(crate::engine::signatures::SIGNATURES.iter())
}

/// The needles of the whole catalogue and `extra`, in one searcher.
pub fn finder(extra: &[&'static str]) -> AhoCorasick {
    let needles: Vec<&str> = catalogue()
        .flat_map(|s| s.needles.iter().copied())
        .chain(extra.iter().copied())
        .collect();
    AhoCorasick::new(needles).expect("the signature needles are plain strings")
}

/// The searcher of the catalogue alone (built once), for the tests of a watch without a store's
/// needles.
#[cfg(test)]
pub fn catalogue_finder() -> AhoCorasick {
    static F: OnceLock<AhoCorasick> = OnceLock::new();
    F.get_or_init(|| finder(&[])).clone()
}

/// A match of the catalogue in a process's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub signature: &'static Signature,
    pub line: String,
    /// The lines before it, oldest first.
    pub context: Vec<String>,
}

impl Found {
    fn new(signature: &'static Signature, line: &[u8], context: Vec<String>) -> Self {
        Found {
            signature,
            line: shown_line(line, SHOWN_CHARS),
            context,
        }
    }

    /// Whether the runtime writes it when seen (else only when the process fails).
    pub fn at_once(&self) -> bool {
        self.signature.reported.at_once()
    }

    /// The event's detail: `cuda-oom (what): line | fix: … | source: …`.
    pub fn detail(&self) -> String {
        let s = self.signature;
        format!(
            "{} ({}): {} | fix: {} | source: {}",
            s.id, s.what, self.line, s.fix, s.source
        )
    }

    /// The event's structured part.
    pub fn record(&self) -> DiagnosisRecord {
        let s = self.signature;
        DiagnosisRecord {
            signature: s.id.to_string(),
            catalogue: CATALOGUE_VERSION,
            line: self.line.clone(),
            context: self.context.clone(),
            what: s.what.to_string(),
            fix: s.fix.to_string(),
            source: s.source.to_string(),
            points_elsewhere: s.reported == Reported::AtOncePointer,
        }
    }
}

/// A traceback being followed: the last lines seen, for the context of its exception line.
struct Traceback {
    signature: &'static Signature,
    recent: VecDeque<String>,
    lines: usize,
}

/// The watcher of one process incarnation's output.
pub struct Diagnoser {
    /// Signatures already reported, by catalogue position.
    reported: Vec<bool>,
    traceback: Option<Traceback>,
    /// Sees every hit line first (a store's facts: its client id, …).
    facts: Option<LineTap>,
    report: Box<dyn FnMut(Found) + Send>,
}

impl Diagnoser {
    /// A watch on one incarnation's output: the catalogue's needles and `extra` (lines `facts`
    /// wants to see), each match given to `report`.
    pub fn watch(
        finder: AhoCorasick,
        facts: Option<LineTap>,
        report: Box<dyn FnMut(Found) + Send>,
    ) -> Watch {
        Watch::new(
            finder,
            Box::new(Diagnoser {
                reported: vec![false; catalogue().count()],
                traceback: None,
                facts,
                report,
            }),
        )
    }

    /// Report `line` under the first signature it matches that is reported at once, unless
    /// that one was already reported.
    fn at_once(&mut self, line: &[u8], context: impl FnOnce() -> Vec<String>) -> bool {
        let Some(i) = catalogue().position(|s| s.reported.at_once() && s.matches(line)) else {
            return false;
        };
        if !std::mem::replace(&mut self.reported[i], true) {
            let s = catalogue().nth(i).expect("a position of the catalogue");
            (self.report)(Found::new(s, line, context()));
        }
        true
    }
}

impl LineWatcher for Diagnoser {
    fn hit(&mut self, line: &[u8], before: &[&[u8]]) -> bool {
        if let Some(f) = &mut self.facts {
            f(line);
        }
        // A line can say both ("Scheduler hit an exception: Traceback (most recent call
        // last):"): its known failure is reported, and its traceback followed.
        self.at_once(line, || {
            before.iter().map(|l| shown_line(l, SHOWN_CHARS)).collect()
        });
        let Some(s) = catalogue().find(|s| s.reported == Reported::WhenItFails && s.matches(line))
        else {
            return false;
        };
        self.traceback = Some(Traceback {
            signature: s,
            recent: VecDeque::from([shown_line(line, SHOWN_CHARS)]),
            lines: 0,
        });
        true
    }

    fn follow(&mut self, line: &[u8]) -> bool {
        let Some(tb) = &mut self.traceback else {
            return false;
        };
        tb.lines += 1;
        let recent: Vec<String> = tb.recent.iter().cloned().collect();
        let frame = line.is_empty()
            || line[0] == b' '
            || line[0] == b'\t'
            || line.starts_with(b"Traceback ")
            || line.starts_with(b"During handling of the above exception")
            || line.starts_with(b"The above exception was the direct cause");
        if frame && tb.lines < TRACEBACK_MAX_LINES {
            if tb.recent.len() == crate::supervisor::logs::CONTEXT_BEFORE {
                tb.recent.pop_front();
            }
            tb.recent.push_back(shown_line(line, SHOWN_CHARS));
            // A known line inside the traceback (NCCL's message in a frame) is reported as
            // usual.
            self.at_once(line, || recent);
            return true;
        }
        let tb = self.traceback.take().expect("followed above");
        if tb.lines >= TRACEBACK_MAX_LINES {
            return false;
        }
        // The exception line: known (CUDA out of memory) or not, it is what the process died
        // of if it dies now.
        self.at_once(line, || recent.clone());
        (self.report)(Found::new(tb.signature, line, recent));
        false
    }

    fn finish(&mut self) {
        self.traceback = None;
    }
}

/// The diagnosis watcher: a failure line said at once, or the exception a process died of said
/// when it fails.
#[derive(Default)]
pub struct Diagnosis {
    exceptions: Exceptions,
}

impl Watcher for Diagnosis {
    fn on(&mut self, plan: &Plan, input: &Input<'_>, now: Now<'_>) -> Vec<Effect> {
        let (proc, found) = match input {
            Input::Spawned { proc, generation } => {
                self.exceptions.spawned(*proc, *generation);
                return Vec::new();
            }
            Input::Passed { proc, since } => {
                self.exceptions.outlived(*proc, *since);
                return Vec::new();
            }
            Input::Asked(WatchRequest::Diagnose { proc }) => (*proc, self.exceptions.failed(*proc)),
            Input::Answer(Answer::Found {
                proc,
                generation,
                found,
            }) => (
                *proc,
                self.exceptions
                    .found(*proc, *generation, found.clone(), now.at),
            ),
            _ => return Vec::new(),
        };
        match (found, plan.processes.get(proc)) {
            (Some(f), Some(p)) => vec![Effect::Note {
                unit: p.name.clone(),
                kind: EventKind::Diagnosis,
                detail: f.detail(),
                diagnosis: Some(f.record()),
            }],
            _ => Vec::new(),
        }
    }
}

/// The exception lines of the processes' tracebacks, held until the process fails (then
/// written as its diagnosis), is spawned again or passes a probe started after it (then
/// dropped).
#[derive(Default)]
pub struct Exceptions {
    /// Each process's current generation.
    generation: HashMap<usize, u64>,
    /// The last exception line of a process, with the generation that printed it and when it
    /// was read.
    last: HashMap<usize, (u64, Found, Instant)>,
    /// The generation of each process that failed last.
    failed: HashMap<usize, u64>,
}

impl Exceptions {
    pub fn spawned(&mut self, proc: usize, generation: u64) {
        self.generation.insert(proc, generation);
        self.last.remove(&proc);
    }

    /// A match in `proc`'s output of `generation`: what to write now.
    pub fn found(
        &mut self,
        proc: usize,
        generation: u64,
        found: Found,
        now: Instant,
    ) -> Option<Found> {
        if found.at_once() {
            return Some(found);
        }
        if self.failed.get(&proc) == Some(&generation) {
            // It failed before its last output was read: this is what it died of.
            return Some(found);
        }
        self.last.insert(proc, (generation, found, now));
        None
    }

    /// A probe of `proc` started at `since` passed: an exception read before then is one the
    /// process outlived (a server's log of a request that failed), not what it may die of later.
    pub fn outlived(&mut self, proc: usize, since: Instant) {
        if self.last.get(&proc).is_some_and(|(_, _, at)| *at < since) {
            self.last.remove(&proc);
        }
    }

    /// `proc` failed (an exit nobody asked for, a liveness failure, a readiness timeout): its
    /// last exception line, if its current incarnation printed one.
    pub fn failed(&mut self, proc: usize) -> Option<Found> {
        let generation = self.generation.get(&proc).copied()?;
        self.failed.insert(proc, generation);
        match self.last.remove(&proc) {
            Some((g, f, _)) if g == generation => Some(f),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn watch() -> (Watch, mpsc::Receiver<Found>) {
        let (tx, rx) = mpsc::channel();
        let w = Diagnoser::watch(
            catalogue_finder(),
            None,
            Box::new(move |f| {
                let _ = tx.send(f);
            }),
        );
        (w, rx)
    }

    #[test]
    fn the_catalogue_is_large_and_its_ids_unique() {
        let ids: std::collections::BTreeSet<_> = catalogue().map(|s| s.id).collect();
        assert_eq!(ids.len(), catalogue().count(), "ids are unique");
        assert!(ids.len() >= 25, "{} signatures", ids.len());
    }

    #[test]
    fn a_hit_is_reported_once_with_the_lines_before_it() {
        let (mut w, rx) = watch();
        w.scan(b"loading\n");
        w.scan(b"step 1\nstep 2\n[rank0] RuntimeError: CUDA error: out of memory\nmore\n");
        w.scan(b"[rank0] RuntimeError: CUDA error: out of memory\n");
        let got: Vec<Found> = rx.try_iter().collect();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].signature.id, "cuda-oom");
        assert_eq!(got[0].context, ["loading", "step 1", "step 2"]);
        assert_eq!(
            got[0].line,
            "[rank0] RuntimeError: CUDA error: out of memory"
        );
        assert!(
            got[0].detail().starts_with("cuda-oom ("),
            "{}",
            got[0].detail()
        );
        assert_eq!(got[0].record().catalogue, CATALOGUE_VERSION);
    }

    #[test]
    fn a_traceback_is_followed_to_its_exception_line_across_chunks() {
        let (mut w, rx) = watch();
        w.scan(
            b"INFO ok\nTraceback (most recent call last):\n  File \"a.py\", line 1, in <module>\n",
        );
        w.scan(
            b"    main()\n  File \"b.py\", line 9, in main\n    raise ValueError(\"bad config\")\n",
        );
        assert_eq!(rx.try_iter().count(), 0, "not before its exception line");
        w.scan(b"ValueError: bad config\nINFO after\n");
        let got: Vec<Found> = rx.try_iter().collect();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].signature.id, "python-exception");
        assert!(!got[0].at_once());
        assert_eq!(got[0].line, "ValueError: bad config");
        assert_eq!(
            got[0].context,
            [
                "    main()",
                "  File \"b.py\", line 9, in main",
                "    raise ValueError(\"bad config\")"
            ]
        );
    }

    #[test]
    fn a_known_exception_line_is_also_reported_at_once() {
        let (mut w, rx) = watch();
        w.scan(b"Traceback (most recent call last):\n  File \"m.py\", line 3, in f\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.06 GiB is free.\n");
        let got: Vec<&str> = rx.try_iter().map(|f| f.signature.id).collect();
        assert_eq!(got, ["cuda-oom", "python-exception"]);
    }

    #[test]
    fn sglangs_scheduler_line_is_reported_and_its_traceback_followed() {
        let (mut w, rx) = watch();
        w.scan(b"[2026-08-22 10:03:11 TP0] Scheduler hit an exception: Traceback (most recent call last):\n  File \"scheduler.py\", line 2297, in run_scheduler_process\nRuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.55\n");
        let got: Vec<&str> = rx.try_iter().map(|f| f.signature.id).collect();
        assert_eq!(
            got,
            [
                "sglang-scheduler-exception",
                "sglang-not-enough-memory",
                "python-exception"
            ]
        );
    }

    #[test]
    fn healthy_lines_and_an_unfinished_traceback_say_nothing() {
        let (mut w, rx) = watch();
        w.scan(b"INFO server started on 0.0.0.0:8000\nTraceback (most recent call last):\n  File \"x\"\n");
        w.finish();
        assert_eq!(rx.try_iter().count(), 0);
    }

    #[test]
    fn an_exception_line_is_written_only_when_its_incarnation_fails() {
        let exc = |line: &str| Found {
            signature: catalogue()
                .find(|s| s.reported == Reported::WhenItFails)
                .unwrap(),
            line: line.into(),
            context: vec![],
        };
        let t = Instant::now();
        let mut x = Exceptions::default();
        x.spawned(0, 1);
        assert_eq!(x.found(0, 1, exc("ValueError: a"), t), None);
        assert_eq!(x.found(0, 1, exc("KeyError: b"), t), None);
        assert_eq!(x.failed(0).map(|f| f.line), Some("KeyError: b".into()));
        assert_eq!(x.failed(0), None, "once");
        // Read after the failure was recorded: written at once.
        assert_eq!(
            x.found(0, 1, exc("OSError: late"), t).map(|f| f.line),
            Some("OSError: late".into())
        );
        // A new incarnation forgets the old one's exception.
        x.spawned(0, 2);
        assert_eq!(x.found(0, 2, exc("E: healthy log"), t), None);
        x.spawned(0, 3);
        assert_eq!(x.failed(0), None);
    }

    /// A probe that started after the exception and passed: the process outlived it (Python's
    /// http.server logs a client's reset as a traceback and serves on), so a later SIGKILL is
    /// not blamed on it. A probe that started before it does not clear it.
    #[test]
    fn an_exception_the_process_outlived_is_not_what_it_died_of() {
        let exc = Found {
            signature: catalogue()
                .find(|s| s.reported == Reported::WhenItFails)
                .unwrap(),
            line: "ConnectionResetError: [Errno 104] Connection reset by peer".into(),
            context: vec![],
        };
        let before = Instant::now();
        let at = before + std::time::Duration::from_millis(10);
        let after = at + std::time::Duration::from_millis(10);
        let mut x = Exceptions::default();
        x.spawned(0, 1);
        assert_eq!(x.found(0, 1, exc.clone(), at), None);
        x.outlived(0, before);
        x.outlived(1, after);
        x.outlived(0, at);
        assert_eq!(x.failed(0).map(|f| f.line), Some(exc.line.clone()));
        x.spawned(0, 2);
        assert_eq!(x.found(0, 2, exc, at), None);
        x.outlived(0, after);
        assert_eq!(x.failed(0), None);
    }
}
