//! What mcsup learns of its Mooncake clients while they run: each store's client id and
//! transport (from its own output), whether the master holds its segment as planned (the store's
//! readiness), what its client `/health` says (its liveness), and Mooncake's failure lines in the
//! output of stores and workers (`diagnosis` events, see `super::diagnosis`).
//!
//! The Mooncake facts (the master's answers, the lines and their fixes) are in
//! `crate::mooncake::{segments, signatures}`; here is their runtime side: the watcher
//! ([`Stores`]: one watch per process incarnation, the per-store memory of what it printed) and
//! the two async checks ([`segment`], [`health`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use aho_corasick::AhoCorasick;

use crate::mooncake::segments::{self, Expected, Verdict, SEGMENTS_DETAIL_PATH};
use crate::plan::{Plan, ProbeSpec, ProcessKind, SegmentProbe};
use crate::runfiles::StatusFile;

use super::diagnosis::{self as diagnose, Diagnoser, Found};
use super::{probe_done, Answer, Effect, Hooks, Input, Now, Report, Task, Watcher};
use crate::supervisor::logs::Watch;
use crate::supervisor::machine::Event;

/// The stores watcher: what each store printed and what its `/health` said, each store's planned
/// segment (for the status file), and the failure-line watch on every process's output.
pub struct Stores {
    watch: StoreWatch,
    /// Each store's planned segment (its registration probe's size), by name.
    planned_segments: HashMap<String, u64>,
}

impl Stores {
    pub fn new(plan: &Plan) -> Self {
        Stores {
            watch: StoreWatch::default(),
            planned_segments: plan
                .processes
                .iter()
                .filter_map(|p| Some((p.name.clone(), p.segment_probe()?.size_bytes?)))
                .collect(),
        }
    }
}

impl Watcher for Stores {
    fn on(&mut self, plan: &Plan, input: &Input<'_>, _now: Now<'_>) -> Vec<Effect> {
        match input {
            Input::Probe {
                attempt,
                proc,
                probe: ProbeSpec::MooncakeSegment(p),
                timeout,
            } => vec![Effect::Run {
                key: None,
                task: Task::Segment {
                    attempt: *attempt,
                    probe: p.clone(),
                    printed: proc.map(|i| self.watch.printed(i)).unwrap_or_default(),
                    timeout: *timeout,
                },
            }],
            Input::Probe {
                attempt,
                proc,
                probe: ProbeSpec::MooncakeHealth { host, port },
                timeout,
            } => match proc {
                Some(proc) => vec![Effect::Run {
                    key: None,
                    task: Task::StoreHealth {
                        attempt: *attempt,
                        proc: *proc,
                        host: host.clone(),
                        port: *port,
                        timeout: *timeout,
                    },
                }],
                None => vec![probe_done(
                    *attempt,
                    Err("a store's /health is not a gate".into()),
                )],
            },
            Input::Answer(Answer::Segment { attempt, verdict }) => {
                let attempt = *attempt;
                vec![Effect::Feed(match verdict {
                    Verdict::Registered(detail) => Event::ProbeDone {
                        attempt,
                        ok: true,
                        detail: detail.clone(),
                    },
                    Verdict::NotYet(detail) => Event::ProbeDone {
                        attempt,
                        ok: false,
                        detail: detail.clone(),
                    },
                    Verdict::Mismatch(detail) => Event::ProbeFailed {
                        attempt,
                        detail: detail.clone(),
                    },
                })]
            }
            Input::Answer(Answer::Health {
                attempt,
                proc,
                port,
                answer,
            }) => {
                let o = self.watch.on_health(*proc, *port, answer.clone());
                let mut out: Vec<Effect> = o
                    .event
                    .map(|(kind, detail)| Effect::note(&plan.processes[*proc].name, kind, detail))
                    .into_iter()
                    .collect();
                out.push(Effect::Feed(Event::ProbeDone {
                    attempt: *attempt,
                    ok: o.ok,
                    detail: o.detail,
                }));
                out
            }
            _ => Vec::new(),
        }
    }

    fn hooks(
        &mut self,
        plan: &Plan,
        proc: usize,
        generation: u64,
        report: &Report,
        _taken: &Hooks,
    ) -> Hooks {
        let kind = plan.processes[proc].kind;
        // Stores are always watched: their readiness needs what they print.
        if !(diagnose::enabled() || kind == ProcessKind::Store) {
            return Hooks::default();
        }
        let report = report.clone();
        let watch = self.watch.watch(
            proc,
            kind,
            Box::new(move |found| {
                report(Answer::Found {
                    proc,
                    generation,
                    found,
                })
            }),
        );
        Hooks {
            watch: Some(watch),
            ..Hooks::default()
        }
    }

    fn status(&self, status: &mut StatusFile) {
        for unit in &mut status.units {
            unit.segment_bytes = self.planned_segments.get(&unit.name).copied();
        }
    }
}

/// What a store printed that its readiness needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Printed {
    pub client_id: Option<String>,
    /// "Found 0 HCAs": an `rdma` store that serves over TCP.
    pub found_no_hca: bool,
    /// "Failed to start client HTTP server on port N": its `/health` port is someone else's.
    pub http_port_taken: bool,
}

/// Store lines that are not failures but facts the checks need.
const CLIENT_ID: &str = "] client_id=";
const NO_HCA: &str = "Found 0 HCAs";
const HTTP_NOT_STARTED: &str = "Failed to start client HTTP server";

/// Build the watches' searcher once, before anything is spawned.
pub fn warm_finders() {
    let _ = finder();
}

/// The needles of every watch: the catalogue's and the lines a store's checks need, in one
/// searcher shared by every process (its DFA is 1.4 MB: two, one with the store's lines and
/// one without, were 2.9 MB of mcsup's 10.8 MB resident set). Another process's line that holds
/// a store's needle is a hit its watch passes over (no catalogue signature matches it, and only
/// a store's watch reads facts).
fn finder() -> AhoCorasick {
    static FINDER: OnceLock<AhoCorasick> = OnceLock::new();
    FINDER
        .get_or_init(|| diagnose::finder(&[CLIENT_ID, HTTP_NOT_STARTED]))
        .clone()
}

/// How a store's `/health` looked at the last check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    Healthy,
    MasterUnreachable,
}

/// The runtime's memory of its Mooncake clients, by process index.
#[derive(Default)]
pub struct StoreWatch {
    printed: HashMap<usize, Arc<Mutex<Printed>>>,
    health: HashMap<usize, Health>,
    /// Stores whose `/health` answered at least once in this incarnation.
    answered: HashMap<usize, bool>,
}

/// One `/health` answer as the runtime reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthAnswer {
    /// 200.
    Healthy,
    /// 503 `master_unreachable`: the client has lost the master.
    MasterUnreachable(String),
    /// No answer, or another status: the detail.
    Failed(String),
}

/// What the runtime does with a `/health` answer: the probe's result for the machine, and an
/// event to write when the store's view of the master changed.
pub struct HealthOutcome {
    pub ok: bool,
    pub detail: String,
    pub event: Option<(crate::runfiles::EventKind, String)>,
}

impl StoreWatch {
    /// A new incarnation of process `proc`: the watch on its output (every process is watched
    /// for the catalogue's failure lines; a store's also for what its checks need). `report` gets
    /// each match (see [`Diagnoser`]).
    pub fn watch(
        &mut self,
        proc: usize,
        kind: ProcessKind,
        report: Box<dyn FnMut(Found) + Send>,
    ) -> Watch {
        let store = kind == ProcessKind::Store;
        let facts: Option<crate::supervisor::logs::LineTap> = store.then(|| {
            let printed = Arc::new(Mutex::new(Printed::default()));
            self.printed.insert(proc, printed.clone());
            self.health.remove(&proc);
            self.answered.remove(&proc);
            Box::new(move |line: &[u8]| {
                if let Ok(mut p) = printed.lock() {
                    if p.client_id.is_none() {
                        p.client_id = segments::client_id_in(line);
                    }
                    let has = |n: &str| memchr::memmem::find(line, n.as_bytes()).is_some();
                    p.found_no_hca |= has(NO_HCA);
                    p.http_port_taken |= has(HTTP_NOT_STARTED);
                }
            }) as crate::supervisor::logs::LineTap
        });
        Diagnoser::watch(finder(), facts, report)
    }

    /// What store `proc`'s current incarnation printed so far.
    pub fn printed(&self, proc: usize) -> Printed {
        self.printed
            .get(&proc)
            .and_then(|p| p.lock().ok().map(|p| p.clone()))
            .unwrap_or_default()
    }

    /// Judge one `/health` answer of store `proc` on `port`.
    pub fn on_health(&mut self, proc: usize, port: u16, answer: HealthAnswer) -> HealthOutcome {
        use crate::runfiles::EventKind;
        let before = self.health.get(&proc).copied();
        let answered = self.answered.get(&proc).copied().unwrap_or(false);
        let taken = self.printed(proc).http_port_taken;
        let answer = match answer {
            // Whatever answers on the port is not this store.
            _ if taken => HealthAnswer::Failed("its port is another process's".into()),
            a => a,
        };
        match answer {
            HealthAnswer::Healthy => {
                self.answered.insert(proc, true);
                self.health.insert(proc, Health::Healthy);
                HealthOutcome {
                    ok: true,
                    detail: String::new(),
                    event: (before == Some(Health::MasterUnreachable)).then(|| {
                        (
                            EventKind::MasterReachable,
                            "the store reaches the master again (its /health answers 200)".into(),
                        )
                    }),
                }
            }
            HealthAnswer::MasterUnreachable(body) => {
                self.answered.insert(proc, true);
                self.health.insert(proc, Health::MasterUnreachable);
                HealthOutcome {
                    ok: true,
                    detail: String::new(),
                    event: (before != Some(Health::MasterUnreachable)).then(|| {
                        (
                            EventKind::MasterUnreachable,
                            format!("the store has lost the master (its /health answers 503 {body}); it remounts its segment when the master answers again, and keeps running"),
                        )
                    }),
                }
            }
            HealthAnswer::Failed(d) if !answered || taken => {
                // Never answered in this incarnation: a release without the client HTTP server
                // (before 0.3.12), or its port held by another process. Not the store's failure;
                // said once.
                let first = self.answered.insert(proc, false).is_none();
                HealthOutcome {
                    ok: true,
                    detail: String::new(),
                    event: first.then(|| {
                        (
                            EventKind::Diagnosis,
                            if taken {
                                format!("the store could not start its client HTTP server on port {port} (another process holds it): its liveness is its process alone; free the port or set mcsup.store.client_http_port")
                            } else {
                                format!("the store's client HTTP server does not answer on port {port} ({d}): a Mooncake before 0.3.12 has none; its liveness is its process alone")
                            },
                        )
                    }),
                }
            }
            HealthAnswer::Failed(d) => HealthOutcome {
                ok: false,
                detail: d,
                event: None,
            },
        }
    }
}

/// One look at the master for store `p`: its verdict (see [`segments::judge`]).
pub async fn segment(p: SegmentProbe, printed: Printed, timeout: Duration) -> Verdict {
    let body = crate::supervisor::probes::http_body(
        p.master_host.clone(),
        p.admin_port,
        SEGMENTS_DETAIL_PATH,
        timeout,
    )
    .await;
    let segs = match body.and_then(|b| segments::parse_detail(&b)) {
        Ok(s) => s,
        Err(e) => return Verdict::NotYet(format!("the master's segment list: {e}")),
    };
    let e = Expected {
        hostname: p.hostname,
        size: p.size_bytes,
        protocol: p.protocol,
        client_id: printed.client_id,
        found_no_hca: printed.found_no_hca,
    };
    segments::judge(&e, &segs)
}

/// One GET of a Mooncake client's `/health`.
pub async fn health(host: String, port: u16, timeout: Duration) -> HealthAnswer {
    let url = format!("http://{host}:{port}/health");
    match crate::supervisor::probes::get_status(url.clone(), timeout).await {
        Ok((200, _)) => HealthAnswer::Healthy,
        Ok((503, body)) if body.contains("master_unreachable") => {
            HealthAnswer::MasterUnreachable(body.trim().to_string())
        }
        Ok((code, body)) => {
            HealthAnswer::Failed(format!("GET {url}: status {code} {}", body.trim()))
        }
        Err(e) if e.starts_with("GET ") => HealthAnswer::Failed(e),
        Err(e) => HealthAnswer::Failed(format!("GET {url}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runfiles::EventKind;
    use std::sync::mpsc;

    fn watch(kind: ProcessKind) -> (StoreWatch, Watch, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel();
        let mut w = StoreWatch::default();
        let watch = w.watch(
            0,
            kind,
            Box::new(move |f: Found| {
                let _ = tx.send(f.detail());
            }),
        );
        (w, watch, rx)
    }

    #[test]
    fn a_store_watch_keeps_its_client_id_and_reports_each_failure_once() {
        let (w, mut watch, rx) = watch(ProcessKind::Store);
        watch.scan(b"I1 a] Mooncake configuration loaded\nI1203 x client_service.cpp:423] client_id=12-34\nE1 y] Too many errors found in local RNIC mlx5_3, mark it inactive\nE1 y] Too many errors found in local RNIC mlx5_3, mark it inactive\nI1 x] Topology discovery complete. Found 0 HCAs.\n");
        let p = w.printed(0);
        assert_eq!(p.client_id.as_deref(), Some("12-34"));
        assert!(p.found_no_hca && !p.http_port_taken);
        let got: Vec<String> = rx.try_iter().collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].starts_with("rnic-inactive"), "{}", got[0]);
        assert!(got[1].starts_with("no-hca"), "{}", got[1]);
    }

    #[test]
    fn every_kind_is_watched_for_failures_and_only_a_store_for_its_facts() {
        for kind in [
            ProcessKind::Worker,
            ProcessKind::Master,
            ProcessKind::Frontend,
        ] {
            let (w, mut watch, rx) = watch(kind);
            watch.scan(b"[TP0] E1 x] client_id=9\n[TP0] Mooncake memory registration failed.\n");
            assert_eq!(
                w.printed(0),
                Printed::default(),
                "{kind:?}: its ids are not kept"
            );
            assert_eq!(rx.try_iter().count(), 1, "{kind:?}");
        }
    }

    #[test]
    fn health_reports_the_master_lost_and_found_and_restarts_only_a_dead_store() {
        let mut w = StoreWatch::default();
        let _ = w.watch(0, ProcessKind::Store, Box::new(|_| {}));
        let o = w.on_health(0, 9300, HealthAnswer::Healthy);
        assert!(o.ok && o.event.is_none());
        let lost = r#"{"status":"master_unreachable","code":2}"#;
        let o = w.on_health(0, 9300, HealthAnswer::MasterUnreachable(lost.into()));
        assert!(o.ok);
        let (kind, d) = o.event.unwrap();
        assert_eq!(kind, EventKind::MasterUnreachable);
        assert!(
            d.contains("503 {\"status\":\"master_unreachable\",\"code\":2}"),
            "{d}"
        );
        // Said once while it lasts, then once when it is over.
        assert!(w
            .on_health(0, 9300, HealthAnswer::MasterUnreachable(lost.into()))
            .event
            .is_none());
        let o = w.on_health(0, 9300, HealthAnswer::Healthy);
        assert_eq!(o.event.unwrap().0, EventKind::MasterReachable);
        // A store that answered and then stops answering fails its liveness.
        let o = w.on_health(0, 9300, HealthAnswer::Failed("refused".into()));
        assert!(!o.ok && o.detail == "refused");
    }

    #[test]
    fn a_store_without_a_client_http_server_is_said_once_and_not_failed() {
        let mut w = StoreWatch::default();
        let _ = w.watch(0, ProcessKind::Store, Box::new(|_| {}));
        let o = w.on_health(0, 9300, HealthAnswer::Failed("connection refused".into()));
        assert!(o.ok);
        let (kind, d) = o.event.unwrap();
        assert_eq!(kind, EventKind::Diagnosis);
        assert!(d.contains("before 0.3.12"), "{d}");
        assert!(w
            .on_health(0, 9300, HealthAnswer::Failed("connection refused".into()))
            .event
            .is_none());
        // Its port taken by another process: said so.
        let mut w = StoreWatch::default();
        let mut watch = w.watch(0, ProcessKind::Store, Box::new(|_| {}));
        watch.scan(b"W1 real_client.cpp:1157] Failed to start client HTTP server on port 9300; continuing without HTTP endpoints\n");
        let o = w.on_health(0, 9300, HealthAnswer::Failed("status 404".into()));
        assert!(o.event.unwrap().1.contains("another process holds it"));
    }
}
