//! Supervision policies and probes: default stop/restart per process kind, the recipe's
//! overrides, and probe specs from recipe probe blocks. Pure.

use std::time::Duration;

use super::error::{err, PlanError};
use super::placeholders::Placeholders;
use super::spec::*;
use crate::recipe::*;

pub fn policy_defaults(kind: ProcessKind) -> (StopSpec, RestartSpec) {
    let stop = match kind {
        ProcessKind::Worker => StopSpec {
            signal: SignalName::SIGTERM,
            grace: Duration::from_secs(10),
            budget: None,
            inflight: None,
        },
        // Older store services handle only SIGINT. store.close() unmounts over RPC: measured
        // (tests/e2e_store_close.rs) 1.7-2.7 s with the master alive, 11-13 s with it gone.
        ProcessKind::Store => StopSpec {
            signal: SignalName::SIGINT,
            grace: Duration::from_secs(20),
            budget: None,
            inflight: None,
        },
        ProcessKind::Master => StopSpec {
            signal: SignalName::SIGTERM,
            grace: Duration::from_secs(5),
            budget: None,
            inflight: None,
        },
        ProcessKind::Service => StopSpec {
            signal: SignalName::SIGTERM,
            grace: Duration::from_secs(10),
            budget: None,
            inflight: None,
        },
        // Dynamo's frontend drains its HTTP server for DYN_HTTP_GRACEFUL_SHUTDOWN_TIMEOUT_SECS
        // (5 s by default); nginx and the SGLang router stop at once on SIGTERM.
        ProcessKind::Frontend => StopSpec {
            signal: SignalName::SIGTERM,
            grace: Duration::from_secs(5),
            budget: None,
            inflight: None,
        },
        // srtctl terminates the client and waits 15 s before it kills it.
        ProcessKind::Benchmark => StopSpec {
            signal: SignalName::SIGTERM,
            grace: Duration::from_secs(15),
            budget: None,
            inflight: None,
        },
    };
    let restart = RestartSpec {
        policy: match kind {
            // A restarted store re-registers its segment. A restarted master comes back empty,
            // but the stores (Mooncake >= 0.3.12) remount by themselves and the workers carry
            // on: measured under mcsup (tests/e2e_master_recovery.rs), the master is ready
            // ~1.1 s after it is spawned again and every store's capacity is back 0.35-0.6 s
            // later, with no worker touched; only the cached keys are lost. An inference worker's
            // restart needs its peers: fail fast by default.
            ProcessKind::Store | ProcessKind::Master => RestartPolicy::OnFailure,
            _ => RestartPolicy::Never,
        },
        success_codes: vec![0],
        backoff_initial: Duration::from_secs(1),
        backoff_factor: 2.0,
        backoff_max: Duration::from_secs(30),
        reset_after: Duration::from_secs(60),
        max_restarts: 3,
        window: Duration::from_secs(600),
        release_wait: DEFAULT_RELEASE_WAIT,
        unit: None,
    };
    (stop, restart)
}

pub fn apply_stop(mut base: StopSpec, cfg: Option<&StopConfig>) -> StopSpec {
    if let Some(c) = cfg {
        if let Some(s) = c.signal {
            base.signal = s.0;
        }
        if let Some(g) = c.grace_seconds {
            base.grace = g.duration();
        }
    }
    base
}

pub fn apply_restart(
    mut base: RestartSpec,
    cfg: Option<&RestartConfig>,
    key: &str,
) -> Result<RestartSpec, PlanError> {
    let Some(c) = cfg else { return Ok(base) };
    if let Some(p) = c.policy {
        base.policy = match p {
            RestartPolicyName::Never => RestartPolicy::Never,
            RestartPolicyName::OnFailure => RestartPolicy::OnFailure,
            RestartPolicyName::Always => RestartPolicy::Always,
        };
    }
    if let Some(codes) = &c.success_codes {
        if let Some(bad) = codes.iter().find(|c| !(0..=255).contains(*c)) {
            return Err(err(
                format!("{key}.success_codes"),
                format!("exit code {bad} is out of range"),
                "exit codes are 0..=255",
            ));
        }
        base.success_codes = codes.clone();
    }
    if let Some(s) = c.backoff_initial_seconds {
        base.backoff_initial = s.duration();
    }
    if let Some(f) = c.backoff_factor {
        if !(1.0..=100.0).contains(&f) {
            return Err(err(
                format!("{key}.backoff_factor"),
                format!("{f} is out of range"),
                "use a factor from 1.0 (fixed delay) to 100",
            ));
        }
        base.backoff_factor = f;
    }
    if let Some(s) = c.backoff_max_seconds {
        base.backoff_max = s.duration();
    }
    if base.backoff_max < base.backoff_initial {
        return Err(err(
            format!("{key}.backoff_max_seconds"),
            "the backoff cap is below the initial backoff",
            "make backoff_max_seconds at least backoff_initial_seconds",
        ));
    }
    if let Some(s) = c.reset_after_seconds {
        base.reset_after = s.duration();
    }
    if let Some(n) = c.max_restarts {
        base.max_restarts = n;
    }
    if let Some(w) = c.window_seconds {
        base.window = w.duration();
    }
    if let Some(w) = c.release_wait_seconds {
        base.release_wait = w.duration();
    }
    Ok(base)
}

/// "Start after `target` is healthy", when there is a target.
pub fn healthy(target: Option<&str>) -> Vec<DependencySpec> {
    target
        .map(|t| DependencySpec {
            target: t.to_string(),
            condition: DependencyCondition::Healthy,
        })
        .into_iter()
        .collect()
}

pub fn tcp(host: &str, port: u16) -> ProbeSpec {
    ProbeSpec::Tcp {
        host: host.to_string(),
        port,
    }
}

/// A gate on something on another node: no exit event to wait on, so poll gently.
pub fn remote_gate(name: &str, probes: Vec<ProbeSpec>, timeout: Duration) -> GateSpec {
    GateSpec {
        name: name.to_string(),
        readiness: ReadinessSpec {
            interval: Duration::from_millis(100),
            ..readiness(probes, timeout)
        },
    }
}

pub fn readiness(probes: Vec<ProbeSpec>, timeout: Duration) -> ReadinessSpec {
    ReadinessSpec {
        probes,
        initial_delay: Duration::ZERO,
        // Fast (a service is seen ~1 ms after it is ready) for the machine's first seconds of a
        // wait (its FAST_WINDOW), then backing off to 1 s.
        interval: Duration::from_millis(1),
        max_interval: Duration::from_secs(1),
        attempt_timeout: Duration::from_secs(2),
        timeout,
    }
}

pub fn probe_list(
    p: &Placeholders,
    tcp_cfg: Option<&TcpProbeConfig>,
    http: Option<&HttpProbeConfig>,
    exec: Option<&Command>,
    file: Option<&String>,
    cwd: &std::path::Path,
) -> Vec<ProbeSpec> {
    let mut probes = Vec::new();
    if let Some(t) = tcp_cfg {
        probes.push(tcp(
            &p.apply(t.host.as_deref().unwrap_or("127.0.0.1")),
            t.port.0,
        ));
    }
    if let Some(h) = http {
        probes.push(ProbeSpec::Http {
            host: p.apply(h.host.as_deref().unwrap_or("127.0.0.1")),
            port: h.port.0,
            path: p.apply(h.path.as_deref().unwrap_or("/")),
            status: h.status.unwrap_or(200),
            body_contains: h.body_contains.clone(),
        });
    }
    if let Some(e) = exec {
        probes.push(ProbeSpec::Exec {
            argv: p.apply_all(&e.0),
        });
    }
    if let Some(f) = file {
        probes.push(ProbeSpec::File {
            path: cwd.join(p.apply(f)),
        });
    }
    probes
}

pub fn liveness_spec(
    p: &Placeholders,
    l: &LivenessConfig,
    key: &str,
    cwd: &std::path::Path,
) -> Result<LivenessSpec, PlanError> {
    let mut probes = probe_list(
        p,
        l.tcp.as_ref(),
        l.http.as_ref(),
        l.exec.as_ref(),
        l.file.as_ref(),
        cwd,
    );
    if probes.len() != 1 {
        return Err(err(
            key,
            format!("liveness needs exactly one probe, found {}", probes.len()),
            "keep one of tcp, http, exec, file",
        ));
    }
    if l.period_seconds.is_some_and(|s| s.0 < 0.01) {
        return Err(err(
            key,
            "liveness.period_seconds is under 0.01 s: the probe would run in a loop",
            "probe every 0.01 s or less often (the default is 10 s)",
        ));
    }
    Ok(LivenessSpec {
        probe: probes.remove(0),
        period: l
            .period_seconds
            .map_or(Duration::from_secs(10), |s| s.duration()),
        attempt_timeout: l
            .timeout_seconds
            .map_or(Duration::from_secs(2), |s| s.duration()),
        failure_threshold: l.failure_threshold.unwrap_or(3).max(1),
    })
}

/// `mcsup.canary` over the product's defaults ([`CanarySpec::default`]).
pub fn canary(c: &crate::recipe::CanaryConfig) -> Result<CanarySpec, PlanError> {
    let d = CanarySpec::default();
    if c.failure_threshold == Some(0) {
        return Err(err(
            "mcsup.canary.failure_threshold",
            "is 0: the canary would fail before any request",
            "set 1 or more (failures in a row before canary-failed), or enabled: false",
        ));
    }
    Ok(CanarySpec {
        enabled: c.enabled.unwrap_or(d.enabled),
        period: c.period_seconds.map_or(d.period, |s| s.duration()),
        threshold: c.failure_threshold.unwrap_or(d.threshold),
        timeout: c.timeout_seconds.map_or(d.timeout, |s| s.duration()),
        on_failure: c.on_failure.unwrap_or(d.on_failure),
    })
}
