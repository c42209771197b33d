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
        decode_served: Vec::new(),
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

// ---------------------------------------------------------------------------------------------
// benchmark: the result gate
// ---------------------------------------------------------------------------------------------

fn client() -> Plan {
    let mut b = proc("benchmark", ProcessKind::Benchmark);
    b.terminal = Some(crate::plan::TerminalSpec {
        benchmark: Some("sa-bench".into()),
        max_failed_requests: 1,
    });
    let mut s = proc("load", ProcessKind::Service);
    s.terminal = Some(crate::plan::TerminalSpec {
        benchmark: None,
        max_failed_requests: 0,
    });
    let mut p = plan(vec![b, s]);
    p.log_dir = "/job/logs".into();
    p
}

/// One of sa-bench's result files (benchmark_serving.py `--save-result`: the keys its
/// `benchmark_result` and `main` write).
fn sa_bench_result(completed: u64, tokens: u64, errors: &[&str]) -> String {
    serde_json::json!({
        "date": "20261206-120000", "backend": "dynamo", "model_id": "m", "num_prompts": completed as usize + errors.iter().filter(|e| !e.is_empty()).count(),
        "request_rate": "inf", "max_concurrency": 4, "duration": 2.5,
        "completed": completed, "total_input_tokens": 4096, "total_output_tokens": tokens,
        "request_throughput": 4.0, "output_throughput": 410.5,
        "mean_ttft_ms": 12.0, "median_ttft_ms": 11.0, "p99_ttft_ms": 30.5, "p99_itl_ms": 4.25,
        "errors": errors,
    })
    .to_string()
}

#[test]
fn a_benchmarks_end_is_judged_off_the_loop_from_the_files_written_since_it_started() {
    let p = client();
    let mut w = benchmark::Benchmark::default();
    let clock = Clock::new();
    let now = at(&clock);
    assert!(w
        .on(
            &p,
            &Input::Spawned {
                proc: 0,
                generation: 1
            },
            now
        )
        .is_empty());
    let e = w.on(&p, &Input::Asked(WatchRequest::Judge { proc: 0 }), now);
    match e.as_slice() {
        [Effect::Run {
            task:
                Task::Judge {
                    proc: 0,
                    dir,
                    since_ms,
                    kind,
                    max_failed: 1,
                },
            ..
        }] => {
            assert_eq!(dir, std::path::Path::new("/job/logs"));
            assert_eq!(kind, "sa-bench");
            assert_eq!(*since_ms, now.wall_ms());
        }
        other => panic!("{other:?}"),
    }
    // A terminal service has no result gate.
    assert!(w
        .on(&p, &Input::Asked(WatchRequest::Judge { proc: 1 }), now)
        .is_empty());
    // The verdict: fed to the machine, and into the status file.
    let status = benchmark::judge(
        "sa-bench",
        &[(
            "sa-bench_isl_8_osl_8/results_concurrency_4_gpus_1.json".into(),
            sa_bench_result(40, 4000, &["", ""]),
        )],
        1,
    );
    assert!(status.valid, "{status:?}");
    let e = w.on(
        &p,
        &Input::Answer(Answer::Judged {
            proc: 0,
            status: status.clone(),
        }),
        now,
    );
    assert!(matches!(
        fed(&e)[..],
        [Event::Judged {
            proc: 0,
            verdict: Ok(_)
        }]
    ));
    assert_eq!(status_of(&w).benchmark, Some(status));
}

#[test]
fn the_gate_names_the_number_that_was_wrong() {
    let ok = sa_bench_result(40, 4000, &[""]);
    let zero_tokens = sa_bench_result(40, 0, &[""]);
    let none = sa_bench_result(0, 0, &["Connection refused", "Connection refused"]);
    let failing = sa_bench_result(38, 3800, &["", "HTTP 500", "HTTP 500"]);
    let f = |name: &str, text: &str| (name.to_string(), text.to_string());
    let said = |s: crate::runfiles::BenchmarkStatus| (s.valid, s.said);

    let (valid, s) = said(benchmark::judge(
        "sa-bench",
        &[f("results_concurrency_4.json", &ok)],
        0,
    ));
    assert!(valid, "{s}");
    assert!(
        s.contains("40 requests completed, 4000 tokens generated, 0 failed"),
        "{s}"
    );
    assert!(s.contains("best output throughput 410.5 tok/s"), "{s}");

    // upstream srt-slurm #429: every KV transfer failed, "Total generated tokens: 0".
    let (valid, s) = said(benchmark::judge(
        "sa-bench",
        &[
            f("results_concurrency_4.json", &ok),
            f("results_concurrency_8.json", &zero_tokens),
        ],
        0,
    ));
    assert!(!valid);
    assert_eq!(
        s,
        "generated tokens: 0 in results_concurrency_8.json (concurrency 8) (40 requests completed with empty answers)"
    );
    let (valid, s) = said(benchmark::judge(
        "sa-bench",
        &[f("results_concurrency_4.json", &none)],
        0,
    ));
    assert!(!valid);
    assert!(
        s.starts_with("completed requests: 0 in results_concurrency_4.json"),
        "{s}"
    );
    // Failed requests within the recipe's bound pass; over it, not.
    assert!(benchmark::judge("sa-bench", &[f("results_concurrency_4.json", &failing)], 2).valid);
    let (valid, s) = said(benchmark::judge(
        "sa-bench",
        &[f("results_concurrency_4.json", &failing)],
        1,
    ));
    assert!(!valid);
    assert!(
        s.contains("failed requests: 2") && s.contains("benchmark.max_failed_requests (1)"),
        "{s}"
    );
    // upstream #423: sa-bench exits 0 with no result at all.
    let (valid, s) = said(benchmark::judge("sa-bench", &[], 0));
    assert!(!valid);
    assert!(s.contains("wrote no results_*.json"), "{s}");
    // A custom command with no file mcsup reads: its exit status is the verdict.
    let (valid, s) = said(benchmark::judge("custom", &[], 0));
    assert!(valid, "{s}");
    // A file that is not JSON is named.
    let (valid, s) = said(benchmark::judge(
        "sa-bench",
        &[f("results_x.json", "{trunc")],
        0,
    ));
    assert!(!valid);
    assert!(s.contains("results_x.json: not JSON"), "{s}");
}

#[test]
fn only_fresh_result_files_below_the_log_directory_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("sa-bench_isl_8_osl_8");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(
        run.join("results_concurrency_4_gpus_1.json"),
        sa_bench_result(4, 40, &[""]),
    )
    .unwrap();
    // Its `.pytorch.json` copy and unrelated files are not results.
    std::fs::write(run.join("results_concurrency_4_gpus_1.pytorch.json"), "[]").unwrap();
    std::fs::write(run.join("notes.json"), "{}").unwrap();
    // A link is not followed (a shared log directory is not trusted).
    std::os::unix::fs::symlink("/etc/passwd", run.join("results_link.json")).unwrap();
    let s = benchmark::read_and_judge(dir.path(), 0, "sa-bench", 0);
    assert!(s.valid, "{s:?}");
    assert_eq!(s.results.len(), 1, "{s:?}");
    assert_eq!(
        s.results[0].file,
        "sa-bench_isl_8_osl_8/results_concurrency_4_gpus_1.json"
    );
    assert_eq!(s.results[0].concurrency, Some(4));
    // Files from before the client started (a previous job's) are not this run's.
    let later = benchmark::now_ms() + 60_000;
    let s = benchmark::read_and_judge(dir.path(), later, "sa-bench", 0);
    assert!(!s.valid);
    assert!(s.results.is_empty());
}

/// Issue 50, item 1: a servable attempt during which a process here printed a KV transfer
/// failure fails, whatever its completion said; the next attempt, with no such line, passes.
/// A line before the attempt, or another kind of line, does not count.
#[test]
fn a_kv_transfer_failure_during_a_servable_attempt_fails_it() {
    let mut p = plan(vec![frontend()]);
    p.processes
        .push(proc("sglang-decode-0", ProcessKind::Worker));
    let sig = |id: &str| {
        crate::engine::signatures::SIGNATURES
            .iter()
            .find(|s| s.id == id)
            .unwrap()
    };
    let line = |id: &str, text: &str| {
        Input::Answer(Answer::Found {
            proc: 1,
            generation: 1,
            found: diagnosis::Found {
                signature: sig(id),
                line: text.into(),
                context: vec![],
            },
        })
    };
    let failed = "[TP0] Decode transfer failed for request rank=0 decode_req.req.rid='9f' with exception KVTransferError(bootstrap_room=1): Failed to get kvcache from prefill instance, it might be dead";
    let probe = ProbeSpec::Servable(servable_probe());
    let mut w = servable::Servable::default();
    let attempt = |w: &mut servable::Servable, n: u64, lines: &[(&str, &str)]| {
        on(
            w,
            &p,
            Input::Probe {
                attempt: n,
                proc: Some(0),
                probe: &probe,
                timeout: Duration::from_secs(1),
            },
        );
        for (id, text) in lines {
            on(w, &p, line(id, text));
        }
        let e = on(
            w,
            &p,
            Input::Answer(Answer::Servable {
                attempt: n,
                result: Ok(Seen {
                    prefill: 1,
                    decode: 2,
                }),
            }),
        );
        match fed(&e)[..] {
            [Event::ProbeDone { ok, detail, .. }] => (*ok, detail.clone()),
            _ => panic!("{e:?}"),
        }
    };
    // Before any attempt: not counted.
    on(&mut w, &p, line("sglang-kv-transfer-failed", failed));
    assert_eq!(
        attempt(&mut w, 1, &[("cuda-oom", "CUDA out of memory")]),
        (true, String::new())
    );
    let (ok, why) = attempt(&mut w, 2, &[("sglang-kv-transfer-failed", failed)]);
    assert!(!ok);
    assert!(
        why.starts_with("the completion generated, but a KV transfer failed meanwhile (sglang-kv-transfer-failed in sglang-decode-0's output: [TP0] Decode transfer failed"),
        "{why}"
    );
    assert_eq!(attempt(&mut w, 3, &[]), (true, String::new()));
}

/// upstream srt-slurm #429: every KV transfer failed, the benchmark "succeeded". A transfer
/// failure any process printed while the client ran makes its result invalid; one before it
/// started (or another kind of line) does not.
#[test]
fn a_kv_transfer_failure_during_the_benchmark_invalidates_its_result() {
    let mut p = client();
    p.processes
        .push(proc("sglang-decode-0", ProcessKind::Worker));
    let worker = 2;
    let sig = |id: &str| {
        crate::engine::signatures::SIGNATURES
            .iter()
            .chain(crate::mooncake::signatures::SIGNATURES.iter())
            .find(|s| s.id == id)
            .unwrap()
    };
    let line = |id: &str, text: &str| {
        Input::Answer(Answer::Found {
            proc: worker,
            generation: 1,
            found: diagnosis::Found {
                signature: sig(id),
                line: text.into(),
                context: vec![],
            },
        })
    };
    let ok = benchmark::judge(
        "sa-bench",
        &[(
            "results_concurrency_4.json".into(),
            sa_bench_result(40, 4000, &[""]),
        )],
        0,
    );
    let verdict = |w: &mut benchmark::Benchmark| {
        let e = on(
            w,
            &p,
            Input::Answer(Answer::Judged {
                proc: 0,
                status: ok.clone(),
            }),
        );
        match fed(&e)[..] {
            [Event::Judged { verdict, .. }] => verdict.clone(),
            _ => panic!("{e:?}"),
        }
    };
    // Before the client started: not its run.
    let mut w = benchmark::Benchmark::default();
    on(
        &mut w,
        &p,
        line("memory-registration", "Failed to register memory"),
    );
    on(
        &mut w,
        &p,
        Input::Spawned {
            proc: 0,
            generation: 1,
        },
    );
    assert!(verdict(&mut w).is_ok());
    // During it: the verdict names the process and the line.
    let mut w = benchmark::Benchmark::default();
    on(
        &mut w,
        &p,
        Input::Spawned {
            proc: 0,
            generation: 1,
        },
    );
    on(
        &mut w,
        &p,
        line("cuda-oom", "torch.OutOfMemoryError: CUDA out of memory."),
    );
    let failed = "[TP0] Decode transfer failed for request rank=0 decode_req.req.rid='9f' with exception KVTransferError(bootstrap_room=1): Failed to get kvcache from prefill instance, it might be dead";
    on(&mut w, &p, line("sglang-kv-transfer-failed", failed));
    let why = verdict(&mut w).unwrap_err();
    assert!(why.starts_with("a KV transfer failed while the benchmark ran (sglang-kv-transfer-failed in sglang-decode-0's output: [TP0] Decode transfer failed"), "{why}");
    assert_eq!(status_of(&w).benchmark.map(|b| b.valid), Some(false));
}

/// AIPerf 0.13.0's real summaries (tests/fixtures/aiperf): a clean run stands with its numbers;
/// a run whose frontend died has its failed requests counted; a cancelled run, a run with no
/// output token and a run whose streams were cut by an error do not stand.
#[test]
fn aiperfs_real_exports_are_judged_by_their_numbers() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/aiperf");
    let text = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let name = "aiperf/profile_export_aiperf.json".to_string();
    let ok = benchmark::judge(
        "custom",
        &[(name.clone(), text("profile_export_aiperf.json"))],
        0,
    );
    assert!(ok.valid, "{ok:?}");
    let n = &ok.results[0];
    assert_eq!((n.completed, n.failed, n.output_tokens), (10, 0, 166));
    assert!(
        (n.request_throughput.unwrap() - 15.011).abs() < 0.01,
        "{n:?}"
    );
    assert!(
        (n.output_throughput.unwrap() - 249.19).abs() < 0.01,
        "{n:?}"
    );
    assert!(
        n.latency_ms
            .iter()
            .any(|(k, v)| k == "p99_ttft_ms" && (*v - 58.99).abs() < 0.01),
        "{n:?}"
    );
    assert!(
        ok.said
            .contains("10 requests completed, 166 tokens generated, 0 failed"),
        "{}",
        ok.said
    );

    let errors = text("with-errors.profile_export_aiperf.json");
    let bad = benchmark::judge("custom", &[(name.clone(), errors.clone())], 0);
    assert!(!bad.valid);
    assert!(
        bad.said
            .starts_with("failed requests: 26 in aiperf/profile_export_aiperf.json"),
        "{}",
        bad.said
    );
    assert!(benchmark::judge("custom", &[(name.clone(), errors)], 26).valid);

    let mut v: serde_json::Value =
        serde_json::from_str(&text("profile_export_aiperf.json")).unwrap();
    v["was_cancelled"] = true.into();
    let s = benchmark::judge("custom", &[(name.clone(), v.to_string())], 0);
    assert!(!s.valid && s.said.contains("cancelled"), "{}", s.said);
    // A server that answers text but reports no token (`--use-server-token-count`: AIPerf's
    // total is null, every output length 0).
    let mut v: serde_json::Value =
        serde_json::from_str(&text("profile_export_aiperf.json")).unwrap();
    v["total_output_tokens"] = serde_json::Value::Null;
    v["output_sequence_length"]["avg"] = 0.0.into();
    let s = benchmark::judge("custom", &[(name.clone(), v.to_string())], 0);
    assert!(
        !s.valid && s.said.starts_with("generated tokens: 0"),
        "{}",
        s.said
    );
    // Four of ten streams ended by an error event: counted successes without an output length.
    let mut v: serde_json::Value =
        serde_json::from_str(&text("profile_export_aiperf.json")).unwrap();
    v["output_sequence_length"]["count"] = 6.into();
    let s = benchmark::judge("custom", &[(name, v.to_string())], 0);
    assert!(
        !s.valid && s.said.starts_with("failed requests: 4"),
        "{}",
        s.said
    );
}

// ---------------------------------------------------------------------------------------------
// canary
// ---------------------------------------------------------------------------------------------

/// A servable frontend with the canary's period 1 s and threshold 2.
fn canary_plan(action: crate::recipe::CanaryAction) -> Plan {
    let mut p = plan(vec![frontend()]);
    p.canary = crate::plan::CanarySpec {
        enabled: true,
        period: Duration::from_secs(1),
        threshold: 2,
        timeout: Duration::from_millis(500),
        on_failure: action,
    };
    p
}

#[test]
fn the_canary_starts_once_servable_and_says_a_failure_only_at_its_threshold() {
    let p = canary_plan(crate::recipe::CanaryAction::Report);
    let mut w = canary::Canary::default();
    let e = on(&mut w, &p, Input::Asked(WatchRequest::Servable { proc: 0 }));
    assert!(matches!(
        &e[..],
        [Effect::Run {
            key: Some(TaskKey::Canary),
            task: Task::Canary { every, .. },
        }] if *every == Duration::from_secs(1)
    ));
    // Servable again (a restart): one canary, not two.
    assert!(on(&mut w, &p, Input::Asked(WatchRequest::Servable { proc: 0 })).is_empty());
    let ok = || Input::Answer(Answer::Canary(Ok(())));
    let bad = || {
        Input::Answer(Answer::Canary(Err(
            "POST http://127.0.0.1:8000/v1/completions: timed out".into(),
        )))
    };
    assert!(notes(&on(&mut w, &p, ok())).is_empty());
    // One failure is below the threshold: the status counts it, no event.
    let e = on(&mut w, &p, bad());
    assert!(notes(&e).is_empty());
    assert_eq!(status_of(&w).canary.unwrap().failures_in_a_row, 1);
    // A success resets the count.
    on(&mut w, &p, ok());
    on(&mut w, &p, bad());
    let e = on(&mut w, &p, bad());
    assert_eq!(
        notes(&e),
        [("frontend".to_string(), RecordKind::CanaryFailed)]
    );
    assert!(
        detail(&e).contains("2 1-token completions in a row failed (one every 1 s): POST"),
        "{}",
        detail(&e)
    );
    assert!(fed(&e).is_empty(), "report only");
    let s = status_of(&w).canary.unwrap();
    assert!(!s.ok);
    assert_eq!((s.requests_total, s.failures_total), (5, 3));
    // Still failing: said once.
    assert!(notes(&on(&mut w, &p, bad())).is_empty());
    let e = on(&mut w, &p, ok());
    assert_eq!(notes(&e), [("frontend".to_string(), RecordKind::CanaryOk)]);
    assert!(status_of(&w).canary.unwrap().ok);
    // The teardown stops it; later answers are not counted.
    assert!(matches!(
        &on(&mut w, &p, Input::Stopping)[..],
        [Effect::Stop(TaskKey::Canary)]
    ));
    assert!(on(&mut w, &p, bad()).is_empty());
}

#[test]
fn a_canary_with_the_drain_policy_ends_the_job_and_a_disabled_one_never_starts() {
    let p = canary_plan(crate::recipe::CanaryAction::Drain);
    let mut w = canary::Canary::default();
    on(&mut w, &p, Input::Asked(WatchRequest::Servable { proc: 0 }));
    let bad = || Input::Answer(Answer::Canary(Err("no token".into())));
    on(&mut w, &p, bad());
    let e = on(&mut w, &p, bad());
    assert!(
        matches!(fed(&e)[..], [Event::EndpointFailed { detail }] if detail.starts_with("the endpoint's canary failed"))
    );
    let mut p = canary_plan(crate::recipe::CanaryAction::Report);
    p.canary.enabled = false;
    let mut w = canary::Canary::default();
    assert!(on(&mut w, &p, Input::Asked(WatchRequest::Servable { proc: 0 })).is_empty());
    assert_eq!(status_of(&w).canary, None);
}
