//! The watchers as specifications: inputs in, effects out, no process, no task, no clock read
//! beyond the one instant handed in (as the machine's tests).

use std::time::{Duration, Instant};

use super::*;
use crate::engine::frontend::{Expected, FrontendType};
use crate::mooncake::remount::Look;
use crate::plan::{ProcessKind, ProcessSpec, ReadinessSpec};
use crate::runfiles::ServableState;
use crate::supervisor::machine::tests::{plan, proc};

fn at(clock: &Clock) -> Now<'_> {
    Now {
        at: clock.start() + Duration::from_secs(3),
        clock,
    }
}

fn on(w: &mut dyn Watcher, p: &Plan, input: Input<'_>) -> Vec<Effect> {
    let clock = Clock::new();
    w.on(p, &input, at(&clock))
}

fn notes(effects: &[Effect]) -> Vec<(String, RecordKind)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Note { unit, kind, .. } => Some((unit.clone(), *kind)),
            _ => None,
        })
        .collect()
}

fn detail(effects: &[Effect]) -> String {
    effects
        .iter()
        .find_map(|e| match e {
            Effect::Note { detail, .. } => Some(detail.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

fn fed(effects: &[Effect]) -> Vec<&Event> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Feed(ev) => Some(ev),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// servable
// ---------------------------------------------------------------------------------------------

fn servable_probe() -> ServableProbe {
    ServableProbe {
        host: "127.0.0.1".into(),
        port: 8000,
        frontend: FrontendType::default_kind(),
        expected: Expected {
            prefill: 1,
            decode: 2,
        },
        model: "m".into(),
        url: "http://10.0.0.1:8000".into(),
    }
}

fn frontend() -> ProcessSpec {
    let mut f = proc("frontend", ProcessKind::Frontend);
    f.readiness = Some(ReadinessSpec {
        probes: vec![ProbeSpec::Servable(servable_probe())],
        initial_delay: Duration::ZERO,
        interval: Duration::from_millis(10),
        max_interval: Duration::from_millis(40),
        attempt_timeout: Duration::from_millis(100),
        timeout: Duration::from_secs(10),
    });
    f
}

fn status_of(w: &dyn Watcher) -> StatusFile {
    let mut s: StatusFile = serde_json::from_str(
        r#"{"node":"n1","mcsup_pid":1,"phase":"running","started_ts_ms":0,"updated_ts_ms":0,"reason":null,"exit_code":null,"console_dropped_lines":0,"units":[]}"#,
    )
    .expect("a minimal status file");
    w.status(&mut s);
    s
}

#[test]
fn servable_is_said_once_ready_then_the_frontend_is_watched_until_the_teardown() {
    let p = plan(vec![frontend()]);
    let mut w = servable::Servable::default();
    let probe = ProbeSpec::Servable(servable_probe());
    // An attempt is a task; its answer is the machine's probe result, and what it saw is kept.
    let e = on(
        &mut w,
        &p,
        Input::Probe {
            attempt: 7,
            proc: Some(0),
            probe: &probe,
            timeout: Duration::from_secs(1),
        },
    );
    assert!(
        matches!(
            e[..],
            [Effect::Run {
                key: None,
                task: Task::ServableProbe { attempt: 7, .. }
            }]
        ),
        "{e:?}"
    );
    let seen = Seen {
        prefill: 1,
        decode: 2,
    };
    let e = on(
        &mut w,
        &p,
        Input::Answer(Answer::Servable {
            attempt: 7,
            result: Ok(seen),
        }),
    );
    assert!(
        matches!(
            fed(&e)[..],
            [Event::ProbeDone {
                attempt: 7,
                ok: true,
                ..
            }]
        ),
        "{e:?}"
    );
    // Ready: servable, and the frontend's reads start (keyed: a later one replaces it).
    let e = on(&mut w, &p, Input::Asked(WatchRequest::Servable { proc: 0 }));
    assert_eq!(notes(&e), [("frontend".to_string(), RecordKind::Servable)]);
    assert!(
        detail(&e).starts_with("http://10.0.0.1:8000: 3/3 workers"),
        "{}",
        detail(&e)
    );
    assert!(e.iter().any(|x| matches!(
        x,
        Effect::Run {
            key: Some(TaskKey::FrontendWatch),
            ..
        }
    )));
    assert_eq!(
        status_of(&w).servable.unwrap().state,
        ServableState::Servable
    );
    // The same count again: nothing; a worker lost: said, and the status written now.
    assert!(on(&mut w, &p, Input::Answer(Answer::Seen(Ok(seen)))).is_empty());
    let less = Seen {
        prefill: 1,
        decode: 1,
    };
    let e = on(&mut w, &p, Input::Answer(Answer::Seen(Ok(less))));
    assert_eq!(
        notes(&e),
        [("frontend".to_string(), RecordKind::WorkersLost)]
    );
    assert!(matches!(e.last(), Some(Effect::StatusNow)));
    assert_eq!(
        status_of(&w).servable.unwrap().state,
        ServableState::Degraded
    );
    let e = on(&mut w, &p, Input::Answer(Answer::Seen(Ok(seen))));
    assert_eq!(
        notes(&e),
        [("frontend".to_string(), RecordKind::WorkersBack)]
    );
    // The teardown ends the reads, once; a read still on its way is not judged.
    let e = on(&mut w, &p, Input::Stopping);
    assert!(
        matches!(e[..], [Effect::Stop(TaskKey::FrontendWatch)]),
        "{e:?}"
    );
    assert!(on(&mut w, &p, Input::Stopping).is_empty());
    assert!(on(
        &mut w,
        &p,
        Input::Answer(Answer::Seen(Err("refused".into())))
    )
    .is_empty());
}

// ---------------------------------------------------------------------------------------------
// mooncake
// ---------------------------------------------------------------------------------------------

fn master_and_store() -> Plan {
    let mut master = proc("master", ProcessKind::Master);
    master.argv = vec!["mooncake_master".into(), "--metrics_port=9003".into()];
    let mut store = proc("store", ProcessKind::Store);
    store.env = vec![crate::plan::EnvVar {
        name: "MOONCAKE_GLOBAL_SEGMENT_SIZE".into(),
        value: "1gb".into(),
        source: "test".into(),
        overrode: Vec::new(),
    }];
    plan(vec![master, store])
}

#[test]
fn the_master_is_looked_at_once_ready_and_its_restart_is_verified() {
    let p = master_and_store();
    let mut w = mooncake::Mooncake::default();
    let e = on(&mut w, &p, Input::Asked(WatchRequest::Master { proc: 0 }));
    assert!(
        matches!(
            e[..],
            [Effect::Run {
                key: Some(TaskKey::MasterLooks),
                task: Task::MasterLooks { port: 9003, .. }
            }]
        ),
        "{e:?}"
    );
    // Ready again (restarted): the looks go on, the remount is verified.
    let e = on(&mut w, &p, Input::Asked(WatchRequest::Master { proc: 0 }));
    assert!(
        matches!(
            e[..],
            [Effect::Run {
                key: None,
                task: Task::Remount { .. }
            }]
        ),
        "{e:?}"
    );
    let e = on(
        &mut w,
        &p,
        Input::Answer(Answer::Remount {
            master: "master".into(),
            ok: false,
            detail: "late".into(),
        }),
    );
    assert_eq!(notes(&e), [("master".to_string(), RecordKind::RemountLate)]);
}

#[test]
fn the_capacity_is_said_when_it_changes_and_a_short_look_only_when_it_lasts() {
    let p = master_and_store();
    let mut w = mooncake::Mooncake::default();
    let look = Look {
        capacity: Some(1 << 30),
        ..Look::default()
    };
    // A view: the status changes, the job's stores are read (once at a time).
    let e = on(
        &mut w,
        &p,
        Input::Answer(Answer::MasterView(Ok(look.clone()))),
    );
    assert!(
        matches!(
            e[..],
            [
                Effect::StatusChanged,
                Effect::Run {
                    task: Task::JobStores {
                        capacity: 1073741824,
                        ..
                    },
                    ..
                }
            ]
        ),
        "{e:?}"
    );
    let e = on(&mut w, &p, Input::Answer(Answer::MasterView(Ok(look))));
    assert!(
        matches!(e[..], [Effect::StatusChanged]),
        "a read is under way: {e:?}"
    );
    assert_eq!(status_of(&w).mooncake.unwrap().capacity_bytes, 1 << 30);
    let stores = |ready: bool| Answer::JobStores {
        stores: vec![vec![(ready, 1 << 30)]],
        capacity: 1 << 30,
    };
    // Not every store ready: nothing said; whole: said once.
    assert!(on(&mut w, &p, Input::Answer(stores(false))).is_empty());
    let e = on(&mut w, &p, Input::Answer(stores(true)));
    assert_eq!(notes(&e), [("master".to_string(), RecordKind::Capacity)]);
    assert!(on(&mut w, &p, Input::Answer(stores(true))).is_empty());
    // Short: said at the second look in a row.
    let short = || Answer::JobStores {
        stores: vec![vec![(true, 1 << 30)]],
        capacity: 0,
    };
    assert!(on(&mut w, &p, Input::Answer(short())).is_empty());
    assert_eq!(notes(&on(&mut w, &p, Input::Answer(short()))).len(), 1);
    // A failed look keeps the last view, with the error.
    on(
        &mut w,
        &p,
        Input::Answer(Answer::MasterView(Err("refused".into()))),
    );
    let v = status_of(&w).mooncake.unwrap();
    assert_eq!(
        (v.capacity_bytes, v.error.as_deref()),
        (1 << 30, Some("refused"))
    );
}

// ---------------------------------------------------------------------------------------------
// diagnosis
// ---------------------------------------------------------------------------------------------

fn found(line: &[u8]) -> diagnosis::Found {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut w = diagnosis::Diagnoser::watch(
        diagnosis::catalogue_finder(),
        None,
        Box::new(move |f| {
            let _ = tx.send(f);
        }),
    );
    w.scan(line);
    rx.try_iter().next().expect("a catalogue line")
}

#[test]
fn a_failure_line_is_said_at_once_and_an_exception_only_when_its_process_fails() {
    let p = plan(vec![proc("worker", ProcessKind::Worker)]);
    let mut w = diagnosis::Diagnosis::default();
    assert!(on(
        &mut w,
        &p,
        Input::Spawned {
            proc: 0,
            generation: 1
        }
    )
    .is_empty());
    let oom = found(b"[rank0] RuntimeError: CUDA error: out of memory\n");
    let e = on(
        &mut w,
        &p,
        Input::Answer(Answer::Found {
            proc: 0,
            generation: 1,
            found: oom,
        }),
    );
    assert_eq!(notes(&e), [("worker".to_string(), RecordKind::Diagnosis)]);
    assert!(matches!(&e[0], Effect::Note { diagnosis: Some(d), .. } if d.signature == "cuda-oom"));
    // A traceback's exception is kept until the process fails.
    let exc =
        found(b"Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad\n");
    assert!(!exc.at_once());
    let e = on(
        &mut w,
        &p,
        Input::Answer(Answer::Found {
            proc: 0,
            generation: 1,
            found: exc.clone(),
        }),
    );
    assert!(e.is_empty(), "{e:?}");
    let e = on(&mut w, &p, Input::Asked(WatchRequest::Diagnose { proc: 0 }));
    assert_eq!(notes(&e), [("worker".to_string(), RecordKind::Diagnosis)]);
    // Outlived: a probe started after it passed, and the failure says nothing.
    on(
        &mut w,
        &p,
        Input::Spawned {
            proc: 0,
            generation: 2,
        },
    );
    let e = on(
        &mut w,
        &p,
        Input::Answer(Answer::Found {
            proc: 0,
            generation: 2,
            found: exc,
        }),
    );
    assert!(e.is_empty());
    let later = Instant::now() + Duration::from_secs(60);
    on(
        &mut w,
        &p,
        Input::Passed {
            proc: 0,
            since: later,
        },
    );
    assert!(on(&mut w, &p, Input::Asked(WatchRequest::Diagnose { proc: 0 })).is_empty());
}

// ---------------------------------------------------------------------------------------------
// stores and release
// ---------------------------------------------------------------------------------------------

#[test]
fn a_stores_health_is_a_task_and_its_answer_the_probes_result() {
    let p = master_and_store();
    let mut w = stores::Stores::new(&p);
    let probe = ProbeSpec::MooncakeHealth {
        host: "127.0.0.1".into(),
        port: 9300,
    };
    let gate = on(
        &mut w,
        &p,
        Input::Probe {
            attempt: 1,
            proc: None,
            probe: &probe,
            timeout: Duration::from_secs(1),
        },
    );
    assert!(
        matches!(fed(&gate)[..], [Event::ProbeDone { ok: false, .. }]),
        "{gate:?}"
    );
    let e = on(
        &mut w,
        &p,
        Input::Probe {
            attempt: 2,
            proc: Some(1),
            probe: &probe,
            timeout: Duration::from_secs(1),
        },
    );
    assert!(
        matches!(
            e[..],
            [Effect::Run {
                task: Task::StoreHealth {
                    attempt: 2,
                    proc: 1,
                    port: 9300,
                    ..
                },
                ..
            }]
        ),
        "{e:?}"
    );
    let e = on(
        &mut w,
        &p,
        Input::Answer(Answer::Health {
            attempt: 2,
            proc: 1,
            port: 9300,
            answer: stores::HealthAnswer::MasterUnreachable("503".into()),
        }),
    );
    assert_eq!(
        notes(&e),
        [("store".to_string(), RecordKind::MasterUnreachable)]
    );
    assert!(matches!(
        fed(&e)[..],
        [Event::ProbeDone {
            attempt: 2,
            ok: true,
            ..
        }]
    ));
}

#[test]
fn a_release_wait_without_a_baseline_still_waits_for_the_group() {
    let p = plan(vec![proc("worker", ProcessKind::Worker)]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    // Nothing may restart on a GPU here: nothing is read before the run.
    let mut w = rt.block_on(release::Release::read(&p));
    let e = on(
        &mut w,
        &p,
        Input::Release {
            attempt: 3,
            pgid: 42,
            gpus: &[0, 1],
            within: Duration::from_secs(5),
        },
    );
    match &e[..] {
        [Effect::Run {
            task:
                Task::GpuRelease {
                    attempt: 3,
                    pgid: 42,
                    gpus,
                    baseline: Err(why),
                    ..
                },
            ..
        }] => {
            assert_eq!(gpus, &[0, 1]);
            assert_eq!(why, "not read before the run");
        }
        _ => panic!("{e:?}"),
    }
    let e = on(
        &mut w,
        &p,
        Input::Answer(Answer::Released {
            attempt: 3,
            result: Ok("free".into()),
        }),
    );
    assert!(matches!(fed(&e)[..], [Event::Released { attempt: 3, .. }]));
}
