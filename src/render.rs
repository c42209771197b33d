//! Human and JSON renderings of a [`Plan`]. Both come from the same value; neither does I/O.
//!
//! Secrets ([`crate::secrets`]): values of secret variables and flags, and credential-shaped
//! words, are replaced by `<redacted>` everywhere (env, argv, files, warnings) unless the caller
//! asks to show them; a redacted plan says so (`"redacted": true`) and `run --plan-file` refuses
//! it.

use std::fmt::Write as _;

use crate::mooncake::size;
use crate::plan::*;
use crate::recipe::SIZE_VARIABLES;
use crate::secrets::{self, REDACTED};
use crate::supervisor::StatusFile;

/// A copy of the plan with secret values replaced, and marked as redacted when any was.
pub fn redacted(plan: &Plan) -> Plan {
    let mut p = plan.clone();
    let mut hidden: Vec<String> = Vec::new();
    for proc_ in &mut p.processes {
        let argv = secrets::redact_argv(&proc_.argv);
        for (old, new) in proc_.argv.iter().zip(&argv) {
            if old != new {
                hidden.push(
                    old.split_once('=')
                        .map_or(old.as_str(), |(_, v)| v)
                        .to_string(),
                );
            }
        }
        proc_.argv = argv;
        for v in &mut proc_.env {
            if secrets::shown(&v.name, &v.value) == REDACTED {
                hidden.push(std::mem::replace(&mut v.value, REDACTED.into()));
            }
            for o in &mut v.overrode {
                if secrets::shown(&v.name, &o.value) == REDACTED {
                    hidden.push(std::mem::replace(&mut o.value, REDACTED.into()));
                }
            }
        }
    }
    let refs: Vec<&str> = hidden.iter().map(String::as_str).collect();
    for w in &mut p.warnings {
        *w = secrets::redact_text(w, &refs);
    }
    for f in &mut p.files {
        let text = secrets::redact_text(&f.contents, &refs);
        if text != f.contents {
            f.contents = text;
        }
    }
    p.redacted = !hidden.is_empty();
    p
}

/// The plan as one JSON document (docs/plan.md shows its shape).
pub fn plan_json(plan: &Plan, show_secrets: bool) -> String {
    let p = if show_secrets {
        plan.clone()
    } else {
        redacted(plan)
    };
    serde_json::to_string_pretty(&p).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

fn secs(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.3}s", d.as_secs_f64())
            .trim_end_matches('0')
            .to_string()
    }
}

/// Quote a word for display the way a shell would need it.
fn shell_word(w: &str) -> String {
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
    {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

fn readiness_text(r: &ReadinessSpec) -> String {
    let probes = r
        .probes
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(" and ");
    let mut s = format!("{probes} (timeout {}", secs(r.timeout));
    if !r.initial_delay.is_zero() {
        let _ = write!(s, ", after {}", secs(r.initial_delay));
    }
    s.push(')');
    s
}

/// The plan for people.
pub fn plan_human(plan: &Plan, show_secrets: bool) -> String {
    let p = if show_secrets {
        plan.clone()
    } else {
        redacted(plan)
    };
    let mut o = String::new();
    let n = &p.node;
    let roles = p
        .roles
        .iter()
        .map(|r| r.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let _ = writeln!(
        o,
        "mcsup plan for node {} (id {}, {}), roles: {roles}",
        n.name, n.node_id, n.ip
    );
    match &n.job_id {
        Some(j) => {
            let _ = writeln!(o, "mode: {} (job {j})", n.mode);
        }
        None => {
            let _ = writeln!(o, "mode: {}", n.mode);
        }
    }
    let master_where = if n.runs_master {
        "on this node"
    } else {
        "not on this node"
    };
    let _ = writeln!(
        o,
        "infra node: {} ({}), master {master_where}",
        n.infra_node, n.infra_ip
    );
    let _ = writeln!(o, "log dir: {}", p.log_dir.display());
    if !p.recipe_schema.is_empty() {
        let _ = writeln!(o, "recipe: srt-slurm {} spelling", p.recipe_schema);
    }
    if !p.services.is_empty() {
        let _ = writeln!(
            o,
            "
services (the job's, as srtctl's dry-run lists them):"
        );
        for r in &p.services {
            let _ = writeln!(
                o,
                "  {}  type={} placement={} start={} critical={}",
                r.name, r.r#type, r.placement, r.start, r.critical
            );
            if let Some(why) = &r.implied_by {
                let _ = writeln!(o, "    implied by: {why}");
            }
            let here = match &r.here {
                ServiceHere::Runs { processes } => format!("runs here as {}", processes.join(", ")),
                ServiceHere::Elsewhere => "placed on other nodes".into(),
                ServiceHere::External { endpoint } => {
                    format!("external: {endpoint} (not launched)")
                }
                ServiceHere::Disabled => "disabled (enabled: false)".into(),
                ServiceHere::NotRun { why } => format!("not run by mcsup: {why}"),
            };
            let _ = writeln!(o, "    {here}; readiness {}; from {}", r.readiness, r.key);
        }
    }

    if !p.gates.is_empty() {
        let _ = writeln!(o, "\nwaits for (remote):");
        for g in &p.gates {
            let _ = writeln!(o, "  {}: {}", g.name, readiness_text(&g.readiness));
        }
    }
    if !p.files.is_empty() {
        let _ = writeln!(o, "\nfiles written before start:");
        for f in &p.files {
            let _ = writeln!(o, "  {} ({})", f.path.display(), f.purpose);
            for line in f.contents.lines() {
                let _ = writeln!(o, "    {line}");
            }
        }
    }
    let _ = writeln!(o, "\nprocesses, in start order:");
    for (i, s) in p.processes.iter().enumerate() {
        let mut tags = vec![s.kind.as_str().to_string()];
        if !s.roles.is_empty() {
            tags.push(format!(
                "roles: {}",
                s.roles
                    .iter()
                    .map(|r| r.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
        if s.critical {
            tags.push("critical".into());
        }
        let _ = writeln!(o, "\n{}. {}  [{}]", i + 1, s.name, tags.join(", "));
        if let Some(w) = &s.placement {
            let gpus = w
                .gpus
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",");
            let ports = w
                .ports
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = writeln!(o, "   worker {}: GPUs {gpus}; ports {ports}", w.endpoint);
            if w.nodes.len() > 1 {
                let _ = writeln!(
                    o,
                    "   multi-node: rank {} of {} ({}), leader {}",
                    w.rank,
                    w.nodes.len(),
                    w.nodes.join(", "),
                    w.nodes[0]
                );
            }
        }
        if let Some(pre) = &s.preamble {
            let _ = writeln!(o, "   preamble: {pre}");
        }
        let _ = writeln!(
            o,
            "   argv: {}",
            s.argv
                .iter()
                .map(|w| shell_word(w))
                .collect::<Vec<_>>()
                .join(" ")
        );
        if let Some(c) = &s.cwd {
            let _ = writeln!(o, "   cwd: {}", c.display());
        }
        if s.env.is_empty() {
            let _ = writeln!(o, "   env: (inherited only)");
        } else {
            let _ = writeln!(o, "   env (on top of the inherited environment):");
            let width = s
                .env
                .iter()
                .map(|v| v.name.len() + v.value.len() + 1)
                .max()
                .unwrap_or(0)
                .min(60);
            for v in &s.env {
                let kv = format!("{}={}", v.name, v.value);
                let mut note = v.source.clone();
                if SIZE_VARIABLES.contains(&v.name.as_str()) {
                    if let Ok(b) = size::parse_mooncake_size(&v.value) {
                        note = format!("{note}; = {}", size::Bytes(b));
                    }
                }
                for ov in &v.overrode {
                    let _ = write!(note, "; overrode {}={}", ov.source, ov.value);
                }
                let _ = writeln!(o, "     {kv:<width$}  ({note})");
            }
        }
        if !s.depends_on.is_empty() {
            let deps = s
                .depends_on
                .iter()
                .map(|d| {
                    format!(
                        "{} ({})",
                        d.target,
                        serde_json::to_value(d.condition)
                            .ok()
                            .and_then(|v| v.as_str().map(String::from))
                            .unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            let _ = writeln!(o, "   starts after: {deps}");
        }
        match &s.readiness {
            Some(r) => {
                let _ = writeln!(o, "   ready when: {}", readiness_text(r));
            }
            None => {
                let _ = writeln!(o, "   ready when: started (no probe)");
            }
        }
        if let Some(l) = &s.liveness {
            let _ = writeln!(
                o,
                "   liveness: {} every {}, restart after {} failures",
                l.probe,
                secs(l.period),
                l.failure_threshold
            );
        }
        let _ = writeln!(
            o,
            "   stop: {} (+SIGCONT), SIGKILL to the group after {}",
            s.stop.signal,
            secs(s.stop.grace)
        );
        let r = &s.restart;
        let restart = match r.policy {
            RestartPolicy::Never => "never".to_string(),
            pol => format!(
                "{pol}, backoff {} x{} up to {}, at most {} in {}",
                secs(r.backoff_initial),
                r.backoff_factor,
                secs(r.backoff_max),
                r.max_restarts,
                secs(r.window)
            ),
        };
        let _ = writeln!(o, "   restart: {restart}");
    }
    if p.processes.is_empty() {
        let _ = writeln!(o, "  (none)");
    }
    // What the preflight's DRAM budget will count on this node.
    let segments: Vec<String> = p
        .processes
        .iter()
        .filter(|x| x.kind == ProcessKind::Store)
        .filter_map(|x| {
            let v = x.env_value("MOONCAKE_GLOBAL_SEGMENT_SIZE")?;
            let b = size::parse_mooncake_size(v).ok()?;
            Some(format!("{} segment {}", x.name, size::Bytes(b)))
        })
        .collect();
    let hicache: Vec<String> = p
        .memory
        .hicache
        .iter()
        .filter_map(|h| match h {
            HiCacheL2::Sized {
                role,
                bytes,
                per_rank_gb,
                ranks,
                ..
            } => Some(format!(
                "HiCache L2 ({role}) {} = {per_rank_gb} GB x {ranks} ranks",
                size::Bytes(*bytes)
            )),
            HiCacheL2::Ratio { role, ratio, .. } => Some(format!(
                "HiCache L2 ({role}) by hicache-ratio {ratio}: unknown before the GPU starts"
            )),
            HiCacheL2::None { .. } => None,
        })
        .collect();
    if !segments.is_empty() || !hicache.is_empty() {
        let mut items = segments;
        items.extend(hicache);
        items.push(format!("headroom {}", size::Bytes(p.memory.headroom_bytes)));
        let _ = writeln!(o, "\nDRAM the preflight budgets: {}", items.join(" + "));
    }
    let sd = &p.shutdown;
    let tiers = crate::plan::teardown_tiers(&p.processes);
    let order = if tiers.is_empty() {
        "nothing to stop".to_string()
    } else {
        tiers
            .iter()
            .map(|t| t.names.join(" + "))
            .collect::<Vec<_>>()
            .join(", then ")
    };
    let _ = writeln!(
        o,
        "\nshutdown: {order}; deadline {}; drain signal {}{}",
        secs(sd.deadline),
        sd.drain_signal,
        if sd.exit_when_workers_done {
            "; also when every worker has exited"
        } else {
            ""
        }
    );
    if let Some(worst) = crate::preflight::slurm::worst_case_text(&tiers, sd.deadline) {
        let _ = writeln!(o, "  {worst}");
    }
    if !p.ignored_sections.is_empty() {
        let _ = writeln!(
            o,
            "\nignored (not interpreted by mcsup): {}",
            p.ignored_sections.join(", ")
        );
    }
    if !p.warnings.is_empty() {
        let _ = writeln!(o, "\nwarnings:");
        for w in &p.warnings {
            let _ = writeln!(o, "  - {w}");
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::{redact_argv, secret_name};

    #[test]
    fn secret_names_and_flags() {
        assert!(
            secret_name("HF_TOKEN")
                && secret_name("aws_secret_access_key")
                && !secret_name("MOONCAKE_MASTER")
        );
        let argv: Vec<String> = ["srv", "--api-key", "abc", "--token=xyz", "--port", "1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            redact_argv(&argv),
            vec![
                "srv",
                "--api-key",
                REDACTED,
                "--token=<redacted>",
                "--port",
                "1"
            ]
        );
    }
}

// ---------------------------------------------------------------------------------------------
// `mcsup status`
// ---------------------------------------------------------------------------------------------

fn ago(now_ms: u64, t: u64) -> String {
    let s = now_ms.saturating_sub(t) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{}s", s / 60, s % 60),
        _ => format!("{}h{}m", s / 3600, (s % 3600) / 60),
    }
}

/// How a run ended, for the status tables: `137 (SIGKILL)`, `0`, or `-` before any exit.
fn exit_text(e: Option<&crate::supervisor::StatusExit>) -> String {
    e.map_or_else(
        || "-".into(),
        |e| match &e.signal {
            Some(sig) => format!("{} ({sig})", e.code),
            None => e.code.to_string(),
        },
    )
}

/// A plain-text table: columns as wide as their widest cell, two spaces apart, one line per row
/// after the header (the status tables of `mcsup status` and `mcsup status --job`).
fn text_table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for cells in std::iter::once(header.map(String::from)).chain(rows.iter().cloned()) {
        let mut line = String::new();
        for (c, w) in cells.iter().zip(widths) {
            let _ = write!(line, "{c:<w$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `mcsup status` as a table: the node line (with "stale" when the mcsup that wrote it is gone
/// before it finished), one row per process, output losses. Pure: `now_ms` and whether the
/// writer is `alive` come from the caller.
pub fn status_human(s: &StatusFile, now_ms: u64, alive: bool) -> String {
    let mut out = format!(
        "node {}  mcsup pid {}  phase {}",
        s.node, s.mcsup_pid, s.phase
    );
    if s.phase != "stopped" && !alive {
        out.push_str("  (mcsup is not running: this status is stale)");
    }
    if let Some(r) = &s.reason {
        out.push_str(&format!("  reason: {r}"));
    }
    if let Some(c) = s.exit_code {
        out.push_str(&format!("  exit code {c}"));
    }
    out.push('\n');
    let header = [
        "NAME",
        "KIND",
        "STATE",
        "PID",
        "RESTARTS",
        "LAST EXIT",
        "SINCE",
        "DETAIL",
    ];
    let rows: Vec<[String; 8]> = s
        .units
        .iter()
        .map(|u| {
            [
                u.name.clone(),
                format!("{}{}", u.kind, if u.critical { "*" } else { "" }),
                u.state.clone(),
                u.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
                u.restarts.to_string(),
                exit_text(u.last_exit.as_ref()),
                ago(now_ms, u.state_since_ts_ms),
                u.detail.clone().unwrap_or_default(),
            ]
        })
        .collect();
    out.push_str(&text_table(header, &rows));
    for u in &s.units {
        if let Some(l) = &u.output_lost {
            out.push_str(&format!(
                "{}: {} bytes ({} lines) of output lost, not in its log file ({})\n",
                u.name, l.bytes, l.lines, l.error
            ));
        }
    }
    if s.console_dropped_lines > 0 {
        out.push_str(&format!(
            "console dropped {} lines (the log files have them)\n",
            s.console_dropped_lines
        ));
    }
    out.push_str("(* = critical)\n");
    out
}

// ---------------------------------------------------------------------------------------------
// Metrics: `<node>.prom`
// ---------------------------------------------------------------------------------------------

/// The status as Prometheus text exposition (format 0.0.4), for node_exporter's textfile
/// collector: per process `up`, `ready`, restarts, last exit code, seconds from spawn to ready
/// and failed probe attempts, labelled `node`, `process`, `kind`; mcsup's phase; and, once the
/// node is done, how long its teardown took. Pure: the runtime writes it next to the status file.
pub fn metrics_text(s: &StatusFile, teardown_seconds: Option<f64>) -> String {
    fn esc(v: &str) -> String {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    }
    let node = esc(&s.node);
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, String)>| {
        if samples.is_empty() {
            return;
        }
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    };
    let procs: Vec<_> = s.units.iter().filter(|u| u.kind != "gate").collect();
    let labels = |u: &crate::supervisor::StatusProcess| {
        format!(
            "node=\"{node}\",process=\"{}\",kind=\"{}\"",
            esc(&u.name),
            esc(&u.kind)
        )
    };
    let per = |f: &dyn Fn(&crate::supervisor::StatusProcess) -> Option<String>| {
        procs
            .iter()
            .filter_map(|u| f(u).map(|v| (labels(u), v)))
            .collect::<Vec<_>>()
    };
    family(
        "mcsup_process_up",
        "gauge",
        "Whether the process runs (1) or not (0).",
        per(&|u| Some(u8::from(u.pid.is_some()).to_string())),
    );
    family(
        "mcsup_process_ready",
        "gauge",
        "Whether the process is ready (1) or not (0).",
        per(&|u| Some(u8::from(u.state == "ready").to_string())),
    );
    family(
        "mcsup_process_restarts_total",
        "counter",
        "Restarts of the process since mcsup started.",
        per(&|u| Some(u.restarts.to_string())),
    );
    family(
        "mcsup_process_last_exit_code",
        "gauge",
        "Exit code of the process's last run (128 + signal when a signal ended it).",
        per(&|u| u.last_exit.as_ref().map(|e| e.code.to_string())),
    );
    family(
        "mcsup_process_ready_seconds",
        "gauge",
        "Seconds from spawn to ready of the last run that became ready.",
        per(&|u| {
            u.ready_after_ms
                .map(|ms| format!("{:.3}", ms as f64 / 1000.0))
        }),
    );
    family(
        "mcsup_process_probe_failures_total",
        "counter",
        "Readiness and liveness probe attempts of the process that failed.",
        per(&|u| Some(u.probe_failures.to_string())),
    );
    family(
        "mcsup_phase",
        "gauge",
        "The node's phase in mcsup (1 for the current one).",
        vec![(
            format!("node=\"{node}\",phase=\"{}\"", esc(&s.phase)),
            "1".into(),
        )],
    );
    family(
        "mcsup_teardown_seconds",
        "gauge",
        "Seconds mcsup's ordered teardown took (from the shutdown request to every process gone).",
        teardown_seconds
            .map(|t| vec![(format!("node=\"{node}\""), format!("{t:.3}"))])
            .unwrap_or_default(),
    );
    out
}

// ---------------------------------------------------------------------------------------------
// `mcsup status --job`
// ---------------------------------------------------------------------------------------------

/// One line about a node's mcsup: running, done with its exit code, or gone without finishing.
fn node_outcome(s: &StatusFile, alive: bool, now_ms: u64) -> String {
    let reason = s
        .reason
        .as_ref()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    match (s.exit_code, alive) {
        (Some(c), _) => format!("done, exit code {c}{reason}"),
        (None, true) => format!("{} (mcsup pid {}){reason}", s.phase, s.mcsup_pid),
        (None, false) => format!(
            "mcsup (pid {}) is gone without finishing: killed? its status is stale since {} ago (phase {})",
            s.mcsup_pid,
            ago(now_ms, s.updated_ts_ms),
            s.phase
        ),
    }
}

/// The process that took longest from spawn to ready, over the whole job.
fn slowest_to_ready(
    nodes: &[(String, crate::supervisor::StatusRead)],
) -> Option<(&str, &crate::supervisor::StatusProcess)> {
    nodes
        .iter()
        .flat_map(|(n, r)| r.status.units.iter().map(move |u| (n.as_str(), u)))
        .filter(|(_, u)| u.ready_after_ms.is_some())
        .max_by_key(|(_, u)| u.ready_after_ms)
}

/// `mcsup status --job`: every process of every node in one table, a line per node with its
/// outcome, and the job's slowest process to get ready. Pure: `now_ms` comes from the caller.
pub fn job_status_human(nodes: &[(String, crate::supervisor::StatusRead)], now_ms: u64) -> String {
    let header = [
        "NODE",
        "PROCESS",
        "KIND",
        "STATE",
        "PID",
        "RESTARTS",
        "READY AFTER",
        "LAST EXIT",
    ];
    let mut rows: Vec<[String; 8]> = Vec::new();
    for (node, r) in nodes {
        for u in &r.status.units {
            rows.push([
                node.clone(),
                u.name.clone(),
                format!("{}{}", u.kind, if u.critical { "*" } else { "" }),
                u.state.clone(),
                u.pid.map_or_else(|| "-".into(), |p| p.to_string()),
                u.restarts.to_string(),
                u.ready_after_ms
                    .map_or_else(|| "-".into(), |ms| format!("{:.1} s", ms as f64 / 1000.0)),
                exit_text(u.last_exit.as_ref()),
            ]);
        }
    }
    let mut out = format!(
        "job: {} node(s): {}\n",
        nodes.len(),
        nodes
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    out.push_str(&text_table(header, &rows));
    out.push('\n');
    for (node, r) in nodes {
        let _ = writeln!(
            out,
            "{node}: {}",
            node_outcome(&r.status, r.writer_alive, now_ms)
        );
    }
    if let Some((node, u)) = slowest_to_ready(nodes) {
        let _ = writeln!(
            out,
            "slowest to ready: {node}/{}, {:.1} s after spawn",
            u.name,
            u.ready_after_ms.unwrap_or(0) as f64 / 1000.0
        );
    }
    out.push_str("(* = critical)\n");
    out
}

/// `mcsup status --job --json`: `{"nodes": [{"node", "alive", "outcome", "status": STATUS}],
/// "slowest_to_ready": {"node", "process", "seconds"} | null}`.
pub fn job_status_json(nodes: &[(String, crate::supervisor::StatusRead)], now_ms: u64) -> String {
    let slowest = slowest_to_ready(nodes).map(|(n, u)| {
        serde_json::json!({
            "node": n,
            "process": u.name,
            "seconds": u.ready_after_ms.unwrap_or(0) as f64 / 1000.0,
        })
    });
    let doc = serde_json::json!({
        "nodes": nodes.iter().map(|(n, r)| serde_json::json!({
            "node": n,
            "alive": r.writer_alive,
            "outcome": node_outcome(&r.status, r.writer_alive, now_ms),
            "status": r.status,
        })).collect::<Vec<_>>(),
        "slowest_to_ready": slowest,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

// ---------------------------------------------------------------------------------------------
// `mcsup timeline`: one self-contained HTML page (inline SVG)
// ---------------------------------------------------------------------------------------------

/// One drawn stretch of a process's life.
struct Span {
    from: u64,
    to: u64,
    /// `starting` (spawned, not ready), `ready`, `stopping`, `failed`.
    phase: &'static str,
    title: String,
}

fn html_escape(v: &str) -> String {
    v.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The spans and point marks (restarts, failures) of one process from its events, in order.
fn spans_of(
    events: &[&crate::supervisor::EventRecord],
    end: u64,
) -> (Vec<Span>, Vec<(u64, String, String)>) {
    let mut spans = Vec::new();
    let mut marks = Vec::new();
    // The open stretch: (since, phase, title).
    let mut open: Option<(u64, &'static str, String)> = None;
    let close = |open: &mut Option<(u64, &'static str, String)>, at: u64, spans: &mut Vec<Span>| {
        if let Some((from, phase, title)) = open.take() {
            spans.push(Span {
                from,
                to: at.max(from),
                phase,
                title,
            });
        }
    };
    for e in events {
        let detail = e.detail.clone().unwrap_or_default();
        let t = e.ts_ms;
        match e.event.as_str() {
            "spawned" => {
                close(&mut open, t, &mut spans);
                open = Some((
                    t,
                    "starting",
                    format!("{} spawned (pid {})", e.process, e.pid.unwrap_or(0)),
                ));
            }
            "probing" | "waiting" | "still-waiting" => {
                if open.is_none() {
                    open = Some((t, "starting", format!("{} waiting", e.process)));
                }
                if e.event == "still-waiting" {
                    marks.push((t, "wait".to_string(), format!("still waiting: {detail}")));
                }
            }
            "ready" => {
                close(&mut open, t, &mut spans);
                open = Some((t, "ready", format!("{} ready", e.process)));
            }
            "stopping" | "killing" => {
                if open.as_ref().is_some_and(|o| o.1 == "stopping") {
                    continue;
                }
                close(&mut open, t, &mut spans);
                open = Some((
                    t,
                    "stopping",
                    format!("{} {}: {detail}", e.process, e.event),
                ));
            }
            "failed" => {
                close(&mut open, t, &mut spans);
                marks.push((
                    t,
                    "failed".to_string(),
                    format!("{} failed: {detail}", e.process),
                ));
            }
            "restarting" => marks.push((
                t,
                "restart".to_string(),
                format!("{} restarting: {detail}", e.process),
            )),
            "exited" | "stopped" | "completed" => {
                if let Some((from, phase, title)) = open.take() {
                    let failed = e.event == "exited"
                        && phase != "stopping"
                        && e.exit_code.is_some_and(|c| c != 0);
                    spans.push(Span {
                        from,
                        to: t.max(from),
                        phase: if failed { "failed" } else { phase },
                        title: format!(
                            "{title}; {} at +{} ms{}",
                            e.event,
                            t - from,
                            e.exit_code
                                .map(|c| format!(", exit code {c}"))
                                .unwrap_or_default()
                        ),
                    });
                }
            }
            _ => {}
        }
    }
    close(&mut open, end, &mut spans);
    (spans, marks)
}

/// `mcsup timeline`: every process of every node on one time axis (spawned -> ready ->
/// stopping -> gone, restarts and failures marked, failures in red with the reason on hover),
/// the shutdown requests as vertical lines. One self-contained HTML file: inline SVG and CSS, no
/// script, no external asset. Pure: the caller reads the events files.
pub fn timeline_html(nodes: &[(String, Vec<crate::supervisor::EventRecord>)]) -> String {
    const LEFT: f64 = 260.0;
    const WIDTH: f64 = 1100.0;
    const ROW: f64 = 20.0;
    const TOP: f64 = 40.0;
    let all = nodes.iter().flat_map(|(_, evs)| evs.iter());
    let start = all.clone().map(|e| e.ts_ms).min().unwrap_or(0);
    let end = all.map(|e| e.ts_ms).max().unwrap_or(start).max(start + 1);
    let x = |t: u64| LEFT + (t.saturating_sub(start)) as f64 / (end - start) as f64 * WIDTH;
    let mut rows = String::new();
    let mut lines = String::new();
    let mut row = 0usize;
    let mut bands = String::new();
    for (k, (node, evs)) in nodes.iter().enumerate() {
        // Processes in order of first appearance; mcsup's own events are markers.
        let mut names: Vec<&str> = Vec::new();
        for e in evs.iter().filter(|e| e.process != "mcsup") {
            if !names.contains(&e.process.as_str()) {
                names.push(&e.process);
            }
        }
        if k % 2 == 1 {
            // Every other node on a light band, so a node's rows read as one block.
            let _ = write!(
                bands,
                r#"<rect class="band" x="0" y="{y:.1}" width="{w:.1}" height="{h:.1}"/>"#,
                y = TOP + row as f64 * ROW,
                w = LEFT + WIDTH + 20.0,
                h = names.len() as f64 * ROW
            );
        }
        for e in evs
            .iter()
            .filter(|e| e.process == "mcsup" && e.event == "shutdown-requested")
        {
            let _ = write!(
                lines,
                r#"<line class="shutdown" data-node="{n}" x1="{x:.1}" x2="{x:.1}" y1="{y0:.1}" y2="{y1:.1}"><title>{n}: shutdown requested: {d}</title></line>"#,
                n = html_escape(node),
                x = x(e.ts_ms),
                y0 = TOP + row as f64 * ROW,
                y1 = TOP + (row + names.len().max(1)) as f64 * ROW,
                d = html_escape(e.detail.as_deref().unwrap_or(""))
            );
        }
        for name in names {
            let mine: Vec<&crate::supervisor::EventRecord> =
                evs.iter().filter(|e| e.process == name).collect();
            let (spans, marks) = spans_of(&mine, end);
            let y = TOP + row as f64 * ROW;
            let _ = write!(
                rows,
                r#"<g class="process" data-node="{n}" data-process="{p}"><text class="label" x="{lx:.1}" y="{ty:.1}">{n} / {p}</text>"#,
                n = html_escape(node),
                p = html_escape(name),
                lx = LEFT - 8.0,
                ty = y + ROW * 0.7
            );
            for s in spans {
                let _ = write!(
                    rows,
                    r#"<rect class="bar {ph}" data-phase="{ph}" data-from="{f}" data-to="{t}" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}"><title>{title}</title></rect>"#,
                    ph = s.phase,
                    f = s.from - start,
                    t = s.to - start,
                    x = x(s.from),
                    y = y + 3.0,
                    w = (x(s.to) - x(s.from)).max(2.0),
                    h = ROW - 6.0,
                    title = html_escape(&s.title)
                );
            }
            for (t, kind, title) in marks {
                let _ = write!(
                    rows,
                    r#"<circle class="mark {k}" data-mark="{k}" cx="{cx:.1}" cy="{cy:.1}" r="4"><title>{title}</title></circle>"#,
                    k = kind,
                    cx = x(t),
                    cy = y + ROW / 2.0,
                    title = html_escape(&title)
                );
            }
            rows.push_str("</g>");
            row += 1;
        }
    }
    let height = TOP + row as f64 * ROW + 30.0;
    let total_s = (end - start) as f64 / 1000.0;
    let mut ticks = String::new();
    let label = |t: u64| {
        let s = (t - start) as f64 / 1000.0;
        if total_s < 2.0 {
            format!("{:.0} ms", s * 1000.0)
        } else if total_s < 60.0 {
            format!("{s:.1} s")
        } else {
            format!("{s:.0} s")
        }
    };
    for k in 0..=10 {
        let t = start + (end - start) * k / 10;
        let _ = write!(
            ticks,
            r#"<line class="tick" x1="{x:.1}" x2="{x:.1}" y1="{y0}" y2="{y1:.1}"/><text class="tick" x="{x:.1}" y="{ty}">{s}</text>"#,
            x = x(t),
            y0 = TOP - 6.0,
            y1 = height - 24.0,
            ty = TOP - 10.0,
            s = label(t)
        );
    }
    format!(
        r#"<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>mcsup timeline</title>
<style>
body {{ font: 12px sans-serif; margin: 12px; }}
.label {{ text-anchor: end; }}
.tick {{ stroke: #ddd; fill: #777; text-anchor: middle; }}
.bar.starting {{ fill: #f0b429; }} .bar.ready {{ fill: #3f9142; }}
.bar.stopping {{ fill: #8a8a8a; }} .bar.failed {{ fill: #d64545; }}
.mark.failed {{ fill: #d64545; }} .mark.restart {{ fill: #1f6feb; }} .mark.wait {{ fill: #f0b429; stroke: #7a5a00; }}
.shutdown {{ stroke: #d64545; stroke-dasharray: 4 3; }}
.band {{ fill: #f3f4f6; }}
</style></head>
<body>
<h1>mcsup timeline: {n} node(s), {p} process(es), {total_s:.1} s</h1>
<p>amber: spawned, waiting to be ready; green: ready; grey: stopping; red: failed (hover for the reason); dots: restarts (blue), failures (red), long readiness waits (amber); dashed red line: shutdown requested.</p>
<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{height:.0}">
{bands}{ticks}{rows}{lines}
</svg>
</body></html>
"#,
        n = nodes.len(),
        p = row,
        w = LEFT + WIDTH + 40.0,
    )
}

#[cfg(test)]
pub(crate) mod status_tests {
    use super::*;
    use crate::supervisor::{OutputLost, StatusExit, StatusProcess};

    /// A status file with a ready critical master and a restarting worker that lost output
    /// (also the supervisor's status-file tests' sample).
    pub(crate) fn sample() -> StatusFile {
        StatusFile {
            node: "n1".into(),
            mcsup_pid: u32::MAX - 1,
            phase: "running".into(),
            started_ts_ms: 1_000,
            updated_ts_ms: 2_000,
            reason: None,
            exit_code: None,
            console_dropped_lines: 0,
            units: vec![
                StatusProcess {
                    name: "master".into(),
                    kind: "master".into(),
                    critical: true,
                    state: "ready".into(),
                    pid: Some(42),
                    restarts: 0,
                    last_exit: None,
                    spawned_ts_ms: Some(1_000),
                    state_since_ts_ms: 1_500,
                    detail: None,
                    output_lost: None,
                    probe_failures: 3,
                    ready_after_ms: Some(500),
                },
                StatusProcess {
                    name: "worker".into(),
                    kind: "worker".into(),
                    critical: false,
                    state: "backing-off".into(),
                    pid: None,
                    restarts: 2,
                    last_exit: Some(StatusExit {
                        code: 137,
                        signal: Some("SIGKILL".into()),
                    }),
                    spawned_ts_ms: Some(1_000),
                    state_since_ts_ms: 1_900,
                    detail: Some("restart 2 in 200 ms".into()),
                    output_lost: Some(OutputLost {
                        bytes: 4096,
                        lines: 40,
                        error: "No space left on device (os error 28)".into(),
                    }),
                    probe_failures: 0,
                    ready_after_ms: None,
                },
            ],
        }
    }

    #[test]
    fn metrics_are_prometheus_text_per_process() {
        let mut s = sample();
        s.node = "n\"1".into();
        let m = metrics_text(&s, Some(1.25));
        for line in [
            "# TYPE mcsup_process_up gauge",
            "mcsup_process_up{node=\"n\\\"1\",process=\"master\",kind=\"master\"} 1",
            "mcsup_process_up{node=\"n\\\"1\",process=\"worker\",kind=\"worker\"} 0",
            "mcsup_process_ready{node=\"n\\\"1\",process=\"master\",kind=\"master\"} 1",
            "# TYPE mcsup_process_restarts_total counter",
            "mcsup_process_restarts_total{node=\"n\\\"1\",process=\"worker\",kind=\"worker\"} 2",
            "mcsup_process_last_exit_code{node=\"n\\\"1\",process=\"worker\",kind=\"worker\"} 137",
            "mcsup_process_ready_seconds{node=\"n\\\"1\",process=\"master\",kind=\"master\"} 0.500",
            "mcsup_process_probe_failures_total{node=\"n\\\"1\",process=\"master\",kind=\"master\"} 3",
            "mcsup_phase{node=\"n\\\"1\",phase=\"running\"} 1",
            "mcsup_teardown_seconds{node=\"n\\\"1\"} 1.250",
        ] {
            assert!(m.lines().any(|l| l == line), "missing `{line}` in:\n{m}");
        }
        // No exit yet, no ready time yet: no sample rather than a made-up one.
        assert!(!m.contains("mcsup_process_last_exit_code{node=\"n\\\"1\",process=\"master\""));
        assert!(!metrics_text(&s, None).contains("mcsup_teardown_seconds"));
    }

    #[test]
    fn status_renders_a_table_and_says_when_it_is_stale() {
        let s = sample();
        let human = status_human(&s, 62_500, false);
        assert!(human.contains("stale"), "{human}");
        assert!(human.contains("137 (SIGKILL)"), "{human}");
        assert!(human.contains("1m1s"), "{human}");
        assert!(human.lines().nth(1).unwrap().starts_with("NAME"), "{human}");
        assert!(human.contains("master*"), "{human}");
        assert!(
            human.contains("worker: 4096 bytes (40 lines) of output lost"),
            "{human}"
        );
        assert!(!status_human(&s, 62_500, true).contains("stale"));
    }
}
