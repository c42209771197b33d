//! Renderings of the status files: `mcsup status` (one node), `mcsup status --job` (every node of
//! the job) and the Prometheus text of `<node>.prom`. Pure: the caller reads the files and passes
//! the current time.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::engine::frontend::describe as servable_describe;
use crate::mooncake::segments::Capacity;
use crate::render::why::{Outcome, Story};
use crate::runfiles::{
    CanaryStatus, MooncakeView, NodePhase, ServableState, ServableStatus, StatusFile,
    StatusProcess, StatusRead, UnitKind, UnitState,
};

// ---------------------------------------------------------------------------------------------
// `mcsup status`
// ---------------------------------------------------------------------------------------------

pub(super) fn ago(now_ms: u64, t: u64) -> String {
    let s = now_ms.saturating_sub(t) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{}s", s / 60, s % 60),
        _ => format!("{}h{}m", s / 3600, (s % 3600) / 60),
    }
}

/// How a run ended, for the status tables: `137 (SIGKILL)`, `0`, or `-` before any exit.
pub(super) fn exit_text(e: Option<&crate::runfiles::StatusExit>) -> String {
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
pub fn text_table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
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
    if s.phase != NodePhase::Stopped && !alive {
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
                u.state.to_string(),
                u.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
                u.restarts.to_string(),
                exit_text(u.last_exit.as_ref()),
                ago(now_ms, u.state_since_ts_ms),
                u.detail.clone().unwrap_or_default(),
            ]
        })
        .collect();
    out.push_str(&text_table(header, &rows));
    if let Some(line) = servable_line(s, now_ms) {
        out.push_str(&line);
        out.push('\n');
    }
    if let Some(line) = super::benchmark::line(s, now_ms) {
        out.push_str(&line);
        out.push('\n');
    }
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

/// `servable: http://n1:8000, 3/3 workers (…), 41.2 s after start` (or what is missing now),
/// for the node that runs the job's endpoint. The start is the earliest mcsup start of `start_ms`.
fn servable_text(
    v: &ServableStatus,
    canary: Option<&CanaryStatus>,
    start_ms: u64,
    now_ms: u64,
) -> String {
    let after = format!(
        "{:.1} s after start",
        v.servable_ts_ms.saturating_sub(start_ms) as f64 / 1000.0
    );
    let workers = servable_describe(&v.expected, &v.seen);
    let failing = canary.filter(|c| !c.ok);
    match (v.state, failing) {
        // Every worker listed, but the canary's completions fail: not serving.
        (ServableState::Servable, Some(c)) => {
            format!(
                "servable: {} DEGRADED for {}: {workers}, but {} canary completions in a row failed: {} (servable {after})",
                v.url,
                ago(now_ms, c.since_ts_ms),
                c.failures_in_a_row,
                c.error.as_deref().unwrap_or("no answer")
            )
        }
        (ServableState::Servable, None) => format!("servable: {}, {workers}, {after}", v.url),
        (ServableState::Degraded, _) => format!(
            "servable: {} DEGRADED for {}: {workers} (servable {after})",
            v.url,
            ago(now_ms, v.since_ts_ms)
        ),
        (ServableState::Unreachable, _) => format!(
            "servable: {} UNREACHABLE for {}: {} (servable {after})",
            v.url,
            ago(now_ms, v.since_ts_ms),
            v.error.as_deref().unwrap_or("no answer")
        ),
    }
}

fn servable_line(s: &StatusFile, now_ms: u64) -> Option<String> {
    s.servable
        .as_ref()
        .map(|v| servable_text(v, s.canary.as_ref(), s.started_ts_ms, now_ms))
}

// ---------------------------------------------------------------------------------------------
// Metrics: `<node>.prom`
// ---------------------------------------------------------------------------------------------

/// The status as Prometheus text exposition (format 0.0.4), for node_exporter's textfile
/// collector: per process `up`, `ready`, restarts, last exit code, seconds from spawn to ready
/// and failed probe attempts, labelled `node`, `process`, `kind`; mcsup's phase; when the file
/// was written and how often it is (a stale file is a gone mcsup's); and, once the node is done,
/// how long its teardown took. Pure: the runtime writes it next to the status file.
pub fn metrics_text(s: &StatusFile, teardown_seconds: Option<f64>) -> String {
    let node = prom_escape(&s.node);
    let mut out = Prom::default();
    unit_families(&mut out, s, &node);
    out.family(
        "mcsup_phase",
        "gauge",
        "The node's phase in mcsup (1 for the current one).",
        vec![(
            format!("node=\"{node}\",phase=\"{}\"", s.phase.as_str()),
            "1".into(),
        )],
    );
    if let Some(v) = &s.servable {
        servable_families(&mut out, v, s.started_ts_ms, &node);
    }
    for (name, kind, help, samples) in super::benchmark::families(s, &node) {
        out.family(name, kind, help, samples);
    }
    if let Some(c) = &s.canary {
        canary_families(&mut out, c, &node);
    }
    mooncake_families(&mut out, s, &node);
    if let Some(c) = &s.control {
        out.family(
            "mcsup_control_joined",
            "gauge",
            "Whether this node's mcsup has joined the job's control connection (1) or not (0): without it a worker over several nodes cannot restart as one unit here.",
            vec![(format!("node=\"{node}\""), u8::from(c.joined).to_string())],
        );
    }
    // A SIGKILLed mcsup cannot take its `up 1` back: the file's age says it is a last word.
    out.family(
        "mcsup_status_updated_timestamp_seconds",
        "gauge",
        "When mcsup last wrote this file (Unix time): at least every mcsup_heartbeat_seconds while it runs; older than three of those (and no exit), these values are the last word of a mcsup that is gone.",
        vec![(
            format!("node=\"{node}\""),
            format!("{:.3}", s.updated_ts_ms as f64 / 1000.0),
        )],
    );
    out.family(
        "mcsup_heartbeat_seconds",
        "gauge",
        "How often a running mcsup rewrites this file, changed or not.",
        vec![(
            format!("node=\"{node}\""),
            format!("{:.3}", s.heartbeat_ms as f64 / 1000.0),
        )],
    );
    out.family(
        "mcsup_teardown_seconds",
        "gauge",
        "Seconds mcsup's ordered teardown took (from the shutdown request to every process gone).",
        teardown_seconds
            .map(|t| vec![(format!("node=\"{node}\""), format!("{t:.3}"))])
            .unwrap_or_default(),
    );
    out.0
}

/// Each store's planned segment, and on the master's node the master's own series (its
/// `/metrics`, read every few seconds), prefixed `mooncake_` and labelled by node: the job's
/// capacity is `sum(mcsup_store_segment_planned_bytes)` against
/// `mooncake_master_total_capacity_bytes`.
fn mooncake_families(out: &mut Prom, s: &StatusFile, node: &str) {
    out.family(
        "mcsup_store_segment_planned_bytes",
        "gauge",
        "The segment the plan gives a Mooncake store (what the master must hold for it).",
        s.units
            .iter()
            .filter_map(|u| {
                let b = u.segment_bytes?;
                Some((
                    format!("node=\"{node}\",process=\"{}\"", prom_escape(&u.name)),
                    b.to_string(),
                ))
            })
            .collect(),
    );
    let Some(m) = &s.mooncake else { return };
    let one = |v: u64| vec![(format!("node=\"{node}\""), v.to_string())];
    out.family(
        "mooncake_master_total_capacity_bytes",
        "gauge",
        "The Mooncake master's master_total_capacity_bytes: every mounted segment, summed.",
        one(m.capacity_bytes),
    );
    out.family(
        "mooncake_master_allocated_bytes",
        "gauge",
        "The Mooncake master's master_allocated_bytes: what the cached objects use.",
        one(m.allocated_bytes),
    );
    out.family(
        "mooncake_master_key_count",
        "gauge",
        "The Mooncake master's master_key_count.",
        one(m.keys),
    );
    out.family(
        "mooncake_master_active_clients",
        "gauge",
        "The Mooncake master's master_active_clients.",
        one(m.clients),
    );
    out.family(
        "mooncake_segment_total_capacity_bytes",
        "gauge",
        "Each mounted segment's capacity, as the Mooncake master lists it.",
        m.segment_capacity
            .iter()
            .map(|(seg, b)| {
                (
                    format!("node=\"{node}\",segment=\"{}\"", prom_escape(seg)),
                    b.to_string(),
                )
            })
            .collect(),
    );
    out.family(
        "mooncake_master_view_timestamp_seconds",
        "gauge",
        "When mcsup last read the Mooncake master's metrics (unix seconds).",
        vec![(
            format!("node=\"{node}\""),
            format!("{:.3}", m.ts_ms as f64 / 1000.0),
        )],
    );
}

/// A label value in the Prometheus text format.
pub(super) fn prom_escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The text of the families written so far.
#[derive(Default)]
struct Prom(String);

impl Prom {
    /// One metric family; none at all when it has no sample.
    fn family(&mut self, name: &str, kind: &str, help: &str, samples: Vec<(String, String)>) {
        if samples.is_empty() {
            return;
        }
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(self.0, "{name}{{{labels}}} {value}");
        }
    }
}

/// Per process and per gate: up, ready, restarts, last exit, time to ready, probe failures.
fn unit_families(out: &mut Prom, s: &StatusFile, node: &str) {
    let esc = prom_escape;
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, String)>| {
        out.family(name, kind, help, samples)
    };
    type Unit = crate::runfiles::StatusProcess;
    // One sample per unit of a kind (processes, or gates: a process on another node that this
    // node waits for), labelled by `labels`, where `f` has a value.
    let samples =
        |gates: bool, labels: &dyn Fn(&Unit) -> String, f: &dyn Fn(&Unit) -> Option<String>| {
            s.units
                .iter()
                .filter(|u| (u.kind == UnitKind::Gate) == gates)
                .filter_map(|u| f(u).map(|v| (labels(u), v)))
                .collect::<Vec<_>>()
        };
    let process_labels = |u: &Unit| {
        format!(
            "node=\"{node}\",process=\"{}\",kind=\"{}\"",
            esc(&u.name),
            u.kind.as_str()
        )
    };
    let gate_labels = |u: &Unit| format!("node=\"{node}\",gate=\"{}\"", esc(&u.name));
    let per = |f: &dyn Fn(&Unit) -> Option<String>| samples(false, &process_labels, f);
    let gates = |f: &dyn Fn(&Unit) -> Option<String>| samples(true, &gate_labels, f);
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
        per(&|u| Some(u8::from(u.state == UnitState::Ready).to_string())),
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
        "mcsup_gate_ready",
        "gauge",
        "Whether the gate (a process on another node that this node waits for) is ready (1) or not (0).",
        gates(&|u| Some(u8::from(u.state == UnitState::Ready).to_string())),
    );
    family(
        "mcsup_gate_ready_seconds",
        "gauge",
        "Seconds from mcsup's start to the gate's first readiness.",
        gates(&|u| {
            u.first_ready_ts_ms
                .map(|t| format!("{:.3}", t.saturating_sub(s.started_ts_ms) as f64 / 1000.0))
        }),
    );
    family(
        "mcsup_gate_probe_failures_total",
        "counter",
        "Probe attempts of the gate that failed.",
        gates(&|u| Some(u.probe_failures.to_string())),
    );
}

/// The endpoint's canary: whether it stands, and its requests and failures so far.
fn canary_families(out: &mut Prom, c: &CanaryStatus, node: &str) {
    let labels = format!("node=\"{node}\",url=\"{}\"", prom_escape(&c.url));
    out.family(
        "mcsup_canary_ok",
        "gauge",
        "Whether the endpoint's canary stands (1), or its 1-token completions failed the threshold's times in a row (0: canary-failed).",
        vec![(labels.clone(), u8::from(c.ok).to_string())],
    );
    out.family(
        "mcsup_canary_requests_total",
        "counter",
        "Canary completions sent through the endpoint.",
        vec![(labels.clone(), c.requests_total.to_string())],
    );
    out.family(
        "mcsup_canary_failures_total",
        "counter",
        "Canary completions that failed (no answer, an error, or no generated token).",
        vec![(labels, c.failures_total.to_string())],
    );
}

/// The job's endpoint, on the node that runs it: servable, when, and the workers it lists.
fn servable_families(
    out: &mut Prom,
    v: &crate::runfiles::ServableStatus,
    started_ts_ms: u64,
    node: &str,
) {
    let esc = prom_escape;
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, String)>| {
        out.family(name, kind, help, samples)
    };
    let url = esc(&v.url);
    family(
            "mcsup_servable",
            "gauge",
            "Whether the job's endpoint serves with every expected worker (1) or not (0); only on the node that runs it, once it has been servable.",
            vec![(
                format!("node=\"{node}\",url=\"{url}\""),
                u8::from(v.state == ServableState::Servable).to_string(),
            )],
        );
    family(
        "mcsup_servable_seconds",
        "gauge",
        "Seconds from mcsup's start on this node to the job's first servable moment.",
        vec![(
            format!("node=\"{node}\",url=\"{url}\""),
            format!(
                "{:.3}",
                v.servable_ts_ms.saturating_sub(started_ts_ms) as f64 / 1000.0
            ),
        )],
    );
    let by_kind = |prefill: u32, decode: u32| {
        [("prefill", prefill), ("decode", decode)]
            .map(|(kind, n)| {
                (
                    format!("node=\"{node}\",url=\"{url}\",kind=\"{kind}\""),
                    n.to_string(),
                )
            })
            .to_vec()
    };
    family(
        "mcsup_frontend_workers",
        "gauge",
        "Workers the job's frontend lists, by kind (aggregated workers count as decode).",
        by_kind(v.seen.prefill, v.seen.decode),
    );
    family(
        "mcsup_frontend_workers_expected",
        "gauge",
        "Workers the job's frontend must list to be servable, by kind.",
        by_kind(v.expected.prefill, v.expected.decode),
    );
}

// ---------------------------------------------------------------------------------------------
// `mcsup status --job`
// ---------------------------------------------------------------------------------------------

/// One line about a node's mcsup: running (with its pid when `pid`), done with its exit code, or
/// gone without finishing.
fn node_outcome(s: &StatusFile, alive: bool, now_ms: u64, pid: bool) -> String {
    let reason = s
        .reason
        .as_ref()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    let holding = if s.holds_ranks_of.is_empty() {
        String::new()
    } else {
        format!(", holding ranks of {}", s.holds_ranks_of.join(", "))
    };
    match (s.exit_code, alive) {
        (Some(c), _) => format!("done, exit code {c}{reason}"),
        (None, true) if pid => format!(
            "{} (mcsup pid {}){holding}{reason}",
            s.phase, s.mcsup_pid
        ),
        (None, true) => format!("{}{holding}{reason}", s.phase),
        (None, false) if !pid => format!(
            "mcsup is gone without finishing: killed? (phase {})",
            s.phase
        ),
        (None, false) => format!(
            "mcsup (pid {}) is gone without finishing: killed? its status is stale since {} ago (phase {})",
            s.mcsup_pid,
            ago(now_ms, s.updated_ts_ms),
            s.phase
        ),
    }
}

/// A unit of one node of the job.
type NodeUnit<'a> = (&'a str, &'a StatusProcess);

/// Every unit of every node.
fn units(nodes: &[(String, StatusRead)]) -> impl Iterator<Item = NodeUnit<'_>> {
    nodes
        .iter()
        .flat_map(|(n, r)| r.status.units.iter().map(move |u| (n.as_str(), u)))
}

/// When a unit first became ready (wall-clock ms), if it has: the start-up, not a restart. (A
/// status file without the field: a process at its spawn plus its time to ready, a gate when it
/// entered `ready`.)
fn ready_at(u: &StatusProcess) -> Option<u64> {
    if let Some(t) = u.first_ready_ts_ms {
        Some(t)
    } else if u.kind == UnitKind::Gate {
        (u.state == UnitState::Ready).then_some(u.state_since_ts_ms)
    } else {
        Some(u.spawned_ts_ms? + u.ready_after_ms?)
    }
}

/// The dependency of `u` (on its node) that became ready last: the one its spawn waited for.
fn gated_by<'a>(
    nodes: &'a [(String, StatusRead)],
    node: &str,
    u: &StatusProcess,
) -> Option<&'a StatusProcess> {
    let (_, r) = nodes.iter().find(|(n, _)| n == node)?;
    u.depends_on
        .iter()
        .filter_map(|d| r.status.units.iter().find(|x| &x.name == d))
        .filter_map(|x| Some((ready_at(x)?, x)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, x)| x)
}

/// The process that took longest from spawn to ready, over the whole job.
fn slowest_to_ready(nodes: &[(String, StatusRead)]) -> Option<NodeUnit<'_>> {
    units(nodes)
        .filter(|(_, u)| u.ready_after_ms.is_some())
        .max_by_key(|(_, u)| u.ready_after_ms)
}

/// The job's start-up critical path: the unit that became ready last, preceded by the dependency
/// each one's spawn waited for (the one ready last), back to a unit that waited for nothing. A
/// gate on another node's process (`master@n1`) is preceded by that process.
/// Each step with its ready time in ms after the first node's mcsup started.
fn critical_path(nodes: &[(String, StatusRead)]) -> Vec<(NodeUnit<'_>, u64)> {
    let t0 = nodes
        .iter()
        .map(|(_, r)| r.status.started_ts_ms)
        .min()
        .unwrap_or(0);
    let Some(mut step) = units(nodes)
        .filter_map(|nu| Some((nu, ready_at(nu.1)?)))
        .max_by_key(|(_, t)| *t)
    else {
        return Vec::new();
    };
    let mut path = Vec::new();
    loop {
        path.push((step.0, step.1.saturating_sub(t0)));
        let ((node, u), _) = step;
        match gated_by(nodes, node, u)
            .map(|d| (node, d))
            .or_else(|| remote(nodes, u))
        {
            // Names are unique per node and dependencies acyclic (the planner checks), but the
            // files are input: never loop.
            Some((dn, d))
                if path.len() <= 64
                    && !path.iter().any(|((n, x), _)| *n == dn && x.name == d.name) =>
            {
                step = ((dn, d), ready_at(d).unwrap_or(0));
            }
            _ => break,
        }
    }
    path.reverse();
    path
}

/// The other node's process a gate waits for (`<process>@<node>`), when that node is in the job
/// and the process has been ready.
fn remote<'a>(nodes: &'a [(String, StatusRead)], gate: &StatusProcess) -> Option<NodeUnit<'a>> {
    if gate.kind != UnitKind::Gate {
        return None;
    }
    let (process, node) = gate.name.rsplit_once('@')?;
    let (n, r) = nodes.iter().find(|(n, _)| n == node)?;
    let u = r.status.units.iter().find(|u| u.name == process)?;
    ready_at(u).map(|_| (n.as_str(), u))
}

/// What a running job is waiting for right now, one entry per unit that is not ready: a process
/// not yet spawned waits on its dependencies that are not ready; a spawned one (or a gate) on its
/// own readiness. Nodes whose mcsup is gone or done are left out.
fn waiting(nodes: &[(String, StatusRead)], now_ms: u64) -> Vec<(NodeUnit<'_>, String)> {
    let mut out = Vec::new();
    for (node, r) in nodes {
        if !r.writer_alive
            || r.status.exit_code.is_some()
            || !matches!(r.status.phase, NodePhase::Starting | NodePhase::Running)
        {
            continue;
        }
        for u in &r.status.units {
            let since = (now_ms.saturating_sub(u.state_since_ts_ms)) as f64 / 1000.0;
            let what = match u.state {
                UnitState::Waiting => {
                    let on: Vec<String> = u
                        .depends_on
                        .iter()
                        .filter_map(|d| r.status.units.iter().find(|x| &x.name == d))
                        .filter(|x| ready_at(x).is_none())
                        .map(|x| format!("{} ({})", x.name, x.state))
                        .collect();
                    if on.is_empty() {
                        continue;
                    }
                    format!("on {}, for {since:.1} s", on.join(", "))
                }
                UnitState::Starting | UnitState::Probing => format!(
                    "for its readiness, {since:.1} s so far, {} probe failure(s)",
                    u.probe_failures
                ),
                _ => continue,
            };
            out.push(((node.as_str(), u), what));
        }
    }
    out
}

/// Up to this many processes, `status --job` lists every one; beyond, the ones that need a look
/// (`--all`: every one).
pub const FULL_TABLE_UP_TO: usize = 40;
/// Up to this many nodes, `status --job` gives each its outcome line; beyond, nodes with the same
/// outcome share one (`--all`: one each).
pub const NODE_LINES_UP_TO: usize = 16;

/// Whether unit `u` of node `r` needs a look in a large job's table: it failed (`failed`, from the
/// job's story), restarted, is failed or backing off, its node's mcsup is gone, or it is not ready
/// while its node runs.
fn needs_a_look(r: &StatusRead, u: &StatusProcess, failed: bool) -> bool {
    let running = r.status.exit_code.is_none();
    failed
        || u.restarts > 0
        || matches!(u.state, UnitState::Failed | UnitState::BackingOff)
        || (running && !r.writer_alive && u.state != UnitState::Exited)
        || (running && r.writer_alive && !matches!(u.state, UnitState::Ready | UnitState::Exited))
}

/// The processes the job's story names as failed: (node, process).
fn failed_units<'a>(story: Option<&'a Story>) -> std::collections::HashSet<(&'a str, &'a str)> {
    story
        .into_iter()
        .flat_map(|s| {
            s.first
                .iter()
                .chain(s.nodes.iter().flat_map(|n| n.failed_after.iter()))
                .map(|f| (f.node, f.process))
        })
        .collect()
}

/// `mcsup status --job`: a line per role (nodes, how many ready, processes by state), every
/// process of every node in one table (in a large job, the ones that need a look, unless `all`),
/// each node's outcome (nodes with the same one together in a large job), what the job waits
/// for while it starts, the start-up's critical path and the slowest process to get ready.
/// Pure: `now_ms` comes from the caller.
pub fn job_status_human(
    nodes: &[(String, StatusRead)],
    story: Option<&Story>,
    now_ms: u64,
    all: bool,
) -> String {
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
    let total = units(nodes).count();
    let failed = failed_units(story);
    let mut rows: Vec<[String; 8]> = Vec::new();
    for (node, r) in nodes {
        for u in &r.status.units {
            if !(all
                || total <= FULL_TABLE_UP_TO
                || needs_a_look(r, u, failed.contains(&(node.as_str(), u.name.as_str()))))
            {
                continue;
            }
            rows.push(unit_row(node, u));
        }
    }
    let mut out = format!(
        "job: {} node(s): {}\n",
        nodes.len(),
        crate::node::compress_nodelist(&nodes.iter().map(|(n, _)| n).collect::<Vec<_>>())
    );
    if let Some(h) = story.and_then(Story::headline) {
        let _ = writeln!(out, "{h} (`mcsup why` tells the story)");
    }
    let files: Vec<&StatusFile> = nodes.iter().map(|(_, r)| &r.status).collect();
    for sum in super::groups::summaries(&files) {
        let _ = writeln!(out, "{}", sum.text());
    }
    if rows.len() < total {
        let _ = writeln!(
            out,
            "{} of {total} processes, the ones that need a look (restarted, failed, not ready); --all lists every one:",
            rows.len()
        );
    }
    if !rows.is_empty() {
        out.push_str(&text_table(header, &rows));
    }
    out.push('\n');
    node_lines(&mut out, nodes, story, now_ms, all);
    job_status_tail(&mut out, nodes, now_ms);
    out
}

/// A row of the `status --job` table.
fn unit_row(node: &str, u: &StatusProcess) -> [String; 8] {
    [
        node.to_string(),
        u.name.clone(),
        format!("{}{}", u.kind, if u.critical { "*" } else { "" }),
        u.state.to_string(),
        u.pid.map_or_else(|| "-".into(), |p| p.to_string()),
        u.restarts.to_string(),
        u.ready_after_ms
            .map_or_else(|| "-".into(), |ms| format!("{:.1} s", ms as f64 / 1000.0)),
        exit_text(u.last_exit.as_ref()),
    ]
}

/// Each node's outcome line; in a large job (unless `all`), one line for the nodes whose outcome
/// reads the same (`n[2-64] (63 nodes): done, exit code 0; drained because of ...`).
fn node_lines(
    out: &mut String,
    nodes: &[(String, StatusRead)],
    story: Option<&Story>,
    now_ms: u64,
    all: bool,
) {
    let outcomes = story.map(Story::outcomes).unwrap_or_default();
    let after: HashMap<&str, String> = nodes
        .iter()
        .map(|(n, _)| {
            (
                n.as_str(),
                after_first_failure(story, outcomes.get(n.as_str())),
            )
        })
        .collect();
    if all || nodes.len() <= NODE_LINES_UP_TO {
        for (node, r) in nodes {
            let _ = writeln!(
                out,
                "{node}: {}{}",
                node_outcome(&r.status, r.writer_alive, now_ms, true),
                after[node.as_str()]
            );
        }
        return;
    }
    let mut same: Vec<(String, Vec<&str>)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (node, r) in nodes {
        let line = format!(
            "{}{}",
            node_outcome(&r.status, r.writer_alive, now_ms, false),
            after[node.as_str()]
        );
        let k = *index.entry(line.clone()).or_insert_with(|| {
            same.push((line, Vec::new()));
            same.len() - 1
        });
        same[k].1.push(node);
    }
    for (line, names) in same {
        let who = match names.len() {
            1 => names[0].to_string(),
            n => format!("{} ({n} nodes)", crate::node::compress_nodelist(&names)),
        };
        let _ = writeln!(out, "{who}: {line}");
    }
}

/// What follows the node lines: the endpoint, Mooncake, what the job waits for, the start-up's
/// critical path, the slowest process.
fn job_status_tail(out: &mut String, nodes: &[(String, StatusRead)], now_ms: u64) {
    let start = nodes
        .iter()
        .map(|(_, r)| r.status.started_ts_ms)
        .min()
        .unwrap_or(0);
    for (node, r) in nodes {
        if let Some(v) = &r.status.servable {
            let text = servable_text(v, r.status.canary.as_ref(), start, now_ms);
            let _ = writeln!(out, "{text} (on {node})");
        }
    }
    for (node, r) in nodes {
        if let Some(line) = super::benchmark::line(&r.status, now_ms) {
            let _ = writeln!(out, "{line} (on {node})");
        }
    }
    if let Some(line) = mooncake_line(nodes) {
        let _ = writeln!(out, "{line}");
    }
    for line in control_lines(nodes) {
        let _ = writeln!(out, "{line}");
    }
    if !nodes.iter().any(|(_, r)| r.status.servable.is_some()) {
        if let Some((node, u)) = units(nodes).find(|(_, u)| {
            u.kind == UnitKind::Frontend
                && u.state != UnitState::Ready
                && u.state != UnitState::Exited
        }) {
            let _ = writeln!(out, "not servable yet: {node}/{} is {}", u.name, u.state);
        }
    }
    for ((node, u), what) in waiting(nodes, now_ms) {
        let _ = writeln!(out, "waiting: {node}/{} {what}", u.name);
    }
    let path = critical_path(nodes);
    if !path.is_empty() {
        let steps: Vec<String> = path
            .iter()
            .map(|((n, u), t)| format!("{n}/{} +{:.1} s", u.name, *t as f64 / 1000.0))
            .collect();
        let _ = writeln!(
            out,
            "start-up critical path (ready, after the first mcsup started): {}",
            steps.join(" -> ")
        );
    }
    if let Some((node, u)) = slowest_to_ready(nodes) {
        let gate = gated_by(nodes, node, u)
            .map(|d| format!(", spawned once {} was ready", d.name))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "slowest to ready: {node}/{}, {:.1} s after spawn{gate}",
            u.name,
            u.ready_after_ms.unwrap_or(0) as f64 / 1000.0
        );
    }
    out.push_str("(* = critical)\n");
}

/// A running node whose mcsup has not joined the job's control connection (or lost it): a
/// worker over several nodes cannot restart as one unit there, and another node's failure
/// reaches it only through the batch script. Nothing when every node has joined.
fn control_lines(nodes: &[(String, StatusRead)]) -> Vec<String> {
    nodes
        .iter()
        .filter(|(_, r)| {
            r.writer_alive && matches!(r.status.phase, NodePhase::Starting | NodePhase::Running)
        })
        .filter_map(|(node, r)| {
            let c = r.status.control.as_ref().filter(|c| !c.joined)?;
            Some(format!(
                "control connection: {node} has not joined ({}): a worker over several nodes fails there at its first death, and other nodes' failures reach it only through the batch script",
                c.why.as_deref().unwrap_or("no reason given")
            ))
        })
        .collect()
}

/// What the first failure of the job did to a node (its `outcome`), for its outcome line:
/// nothing, or that it failed first, was drained because of it, or failed after it.
fn after_first_failure(story: Option<&Story>, outcome: Option<&Outcome>) -> String {
    let (Some(f), Some(outcome)) = (story.and_then(|s| s.first.as_ref()), outcome) else {
        return String::new();
    };
    match outcome {
        Outcome::Failed => format!("; the job's first failure: {}", f.process),
        Outcome::Recovered => format!(
            "; the job's first failure: {} (restarted, ready again)",
            f.process
        ),
        Outcome::Drained => format!(
            "; drained because of the first failure ({}/{}), not failed",
            f.node, f.process
        ),
        Outcome::FailedAfter => format!(
            "; failed after the first failure ({}/{})",
            f.node, f.process
        ),
        Outcome::Ok => String::new(),
    }
}

/// The job's stores as its nodes list them, against what the master holds (from the status of
/// the master's node), or `None` when no node has seen the master.
fn mooncake_capacity(nodes: &[(String, StatusRead)]) -> Option<(String, Capacity, &MooncakeView)> {
    let (node, view) = nodes
        .iter()
        .find_map(|(n, r)| r.status.mooncake.as_ref().map(|m| (n.clone(), m)))?;
    let stores: Vec<Vec<(bool, u64)>> = nodes
        .iter()
        .map(|(_, r)| r.status.store_segments())
        .collect();
    Some((node, Capacity::of(view.capacity_bytes, &stores), view))
}

/// `Mooncake: 3 store(s) on 3 node(s), 1.2 TiB of 1.2 TiB registered; 120 keys, 7 clients, 3.1 GiB
/// used (master on n1, read 4 s ago)`.
fn mooncake_line(nodes: &[(String, StatusRead)]) -> Option<String> {
    let (node, c, m) = mooncake_capacity(nodes)?;
    let now = nodes
        .iter()
        .map(|(_, r)| r.status.updated_ts_ms)
        .max()
        .unwrap_or(m.ts_ms);
    Some(format!(
        "{}; {} key(s), {} client(s), {} used (master on {node}, read {:.0} s before the last status{})",
        c.text(),
        m.keys,
        m.clients,
        crate::mooncake::size::Bytes(m.allocated_bytes),
        now.saturating_sub(m.ts_ms) as f64 / 1000.0,
        m.error.as_ref().map(|e| format!("; its last look failed: {e}")).unwrap_or_default()
    ))
}

/// `mcsup status --job --json`: `{"nodes": [{"node", "alive", "outcome", "status": STATUS}],
/// "waiting": [{"node", "unit", "what"}], "critical_path": [{"node", "unit", "ready_s"}],
/// "slowest_to_ready": {"node", "process", "seconds", "spawned_after"} | null}`.
pub fn job_status_json(
    nodes: &[(String, StatusRead)],
    story: Option<&Story>,
    now_ms: u64,
) -> String {
    let slowest = slowest_to_ready(nodes).map(|(n, u)| {
        serde_json::json!({
            "node": n,
            "process": u.name,
            "seconds": u.ready_after_ms.unwrap_or(0) as f64 / 1000.0,
            "spawned_after": gated_by(nodes, n, u).map(|d| d.name.clone()),
        })
    });
    let files: Vec<&StatusFile> = nodes.iter().map(|(_, r)| &r.status).collect();
    let outcomes = story.map(Story::outcomes).unwrap_or_default();
    let doc = serde_json::json!({
        "roles": super::groups::summaries(&files).iter().map(super::groups::Summary::json).collect::<Vec<_>>(),
        "nodes": nodes.iter().map(|(n, r)| serde_json::json!({
            "node": n,
            "alive": r.writer_alive,
            "outcome": node_outcome(&r.status, r.writer_alive, now_ms, true),
            "after_first_failure": outcomes.get(n.as_str()).map(|o| o.as_str()),
            "status": r.status,
        })).collect::<Vec<_>>(),
        "first_failure": story.map(|s| s.json(None)["first_failure"].clone()),
        "waiting": waiting(nodes, now_ms).into_iter().map(|((n, u), what)| serde_json::json!({
            "node": n, "unit": u.name, "what": what,
        })).collect::<Vec<_>>(),
        "critical_path": critical_path(nodes).into_iter().map(|((n, u), t)| serde_json::json!({
            "node": n, "unit": u.name, "ready_s": t as f64 / 1000.0,
        })).collect::<Vec<_>>(),
        "slowest_to_ready": slowest,
        "mooncake": mooncake_capacity(nodes).map(|(node, c, m)| serde_json::json!({
            "node": node,
            "stores": c.stores,
            "stores_ready": c.ready,
            "planned_bytes": c.planned,
            "capacity_bytes": c.held,
            "whole": c.whole(),
            "summary": c.text(),
            "keys": m.keys,
            "clients": m.clients,
            "allocated_bytes": m.allocated_bytes,
        })),
        "benchmark": nodes.iter().find_map(|(n, r)| super::benchmark::json(n, &r.status)),
        "servable": nodes.iter().find_map(|(n, r)| r.status.servable.as_ref().map(|v| serde_json::json!({
            "node": n,
            "url": v.url,
            "state": v.state,
            "seconds_after_start": v.servable_ts_ms.saturating_sub(nodes.iter().map(|(_, r)| r.status.started_ts_ms).min().unwrap_or(0)) as f64 / 1000.0,
            "seen": v.seen,
            "expected": v.expected,
            "canary": r.status.canary,
        }))),
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

#[cfg(test)]
pub(crate) mod status_tests {
    use super::*;
    use crate::runfiles::{OutputLost, StatusExit, StatusProcess};

    /// A status file with a ready critical master and a restarting worker that lost output
    /// (also the supervisor's status-file tests' sample).
    pub(crate) fn sample() -> StatusFile {
        StatusFile {
            node: "n1".into(),
            roles: vec![],
            mcsup_pid: u32::MAX - 1,
            host: String::new(),
            pid_ns: String::new(),
            phase: "running".into(),
            started_ts_ms: 1_000,
            updated_ts_ms: 2_000,
            heartbeat_ms: 5_000,
            reason: None,
            exit_code: None,
            console_dropped_lines: 0,
            servable: None,
            mooncake: None,
            benchmark: None,
            canary: None,
            holds_ranks_of: Vec::new(),
            control: None,
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
                    first_ready_ts_ms: Some(1_500),
                    depends_on: vec![],
                    segment_bytes: None,
                    roles: vec![],
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
                    first_ready_ts_ms: None,
                    depends_on: vec!["master".into()],
                    segment_bytes: None,
                    roles: vec![],
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

    /// The adversarial re-run's D17: the status file stopped at `running` (the disk was full),
    /// the events file took the `finished` record: the node is done with that exit code, not
    /// "gone without finishing: killed?"; a node without such a record still is.
    #[test]
    fn a_node_whose_events_say_it_finished_is_done_whatever_its_stale_status() {
        let (name, mut read) = node("n1", "running", vec![]);
        read.writer_alive = false;
        read.status.exit_code = None;
        read.status.reason = Some("received SIGTERM".into());
        let stale = read.clone();
        let finished = |detail: &str| crate::runfiles::EventRecord {
            ts_ms: 2_000,
            t_ms: 1_000.0,
            node: "n1".into(),
            process: "mcsup".into(),
            event: crate::runfiles::EventKind::Finished,
            pid: None,
            exit_code: None,
            signal: None,
            detail: Some(detail.into()),
            diagnosis: None,
        };
        read.finish_from_events(&[finished(
            "exit code 4; 3 writes of the events, status or metrics files failed",
        )]);
        let table = job_status_human(&[(name.clone(), read)], None, 62_500, false);
        assert!(
            table.contains("n1: done, exit code 4 (received SIGTERM; its status file did not take the last writes, its events did: exit code 4; 3 writes"),
            "{table}"
        );
        let table = job_status_human(&[(name, stale)], None, 62_500, false);
        assert!(table.contains("gone without finishing: killed?"), "{table}");
    }

    /// A unit of the two-node sample: spawned at `spawn` (ms), ready `ready` ms later.
    fn unit(
        name: &str,
        kind: &str,
        deps: &[&str],
        spawn: u64,
        ready: Option<u64>,
    ) -> StatusProcess {
        StatusProcess {
            name: name.into(),
            kind: kind.into(),
            critical: true,
            state: if ready.is_some() { "ready" } else { "starting" }.into(),
            pid: Some(7),
            restarts: 0,
            last_exit: None,
            spawned_ts_ms: (kind != "gate").then_some(spawn),
            state_since_ts_ms: spawn + ready.unwrap_or(0),
            detail: None,
            output_lost: None,
            probe_failures: 2,
            ready_after_ms: if kind == "gate" { None } else { ready },
            first_ready_ts_ms: None,
            depends_on: deps.iter().map(|d| d.to_string()).collect(),
            segment_bytes: None,
            roles: vec![],
        }
    }

    fn node(name: &str, phase: &str, units: Vec<StatusProcess>) -> (String, StatusRead) {
        let mut status = sample();
        status.node = name.into();
        status.phase = phase.into();
        status.started_ts_ms = if name == "n1" { 1_000 } else { 1_200 };
        status.units = units;
        let text = serde_json::to_string(&status).unwrap();
        (
            name.into(),
            StatusRead {
                text,
                status,
                writer_alive: true,
            },
        )
    }

    /// n1: master, then store, then a worker ready at 5.8 s. n2: the gate on n1's master, its
    /// store, and a worker that took 6 s after its spawn, ready last (at 8 s).
    fn two_nodes() -> Vec<(String, StatusRead)> {
        vec![
            node(
                "n1",
                "running",
                vec![
                    unit("master", "master", &[], 1_000, Some(500)),
                    unit("store", "store", &["master"], 1_500, Some(300)),
                    unit("worker", "worker", &["store"], 1_800, Some(4_000)),
                ],
            ),
            node(
                "n2",
                "running",
                vec![
                    unit("master@n1", "gate", &[], 1_200, Some(400)),
                    unit("store", "store", &["master@n1"], 1_600, Some(400)),
                    unit(
                        "worker",
                        "worker",
                        &["master@n1", "store"],
                        2_000,
                        Some(6_000),
                    ),
                ],
            ),
        ]
    }

    #[test]
    fn the_critical_path_follows_what_each_spawn_waited_for() {
        let nodes = two_nodes();
        let out = job_status_human(&nodes, None, 10_000, false);
        assert!(
            out.contains(
                "start-up critical path (ready, after the first mcsup started): \
                 n1/master +0.5 s -> n2/master@n1 +0.6 s -> n2/store +1.0 s -> n2/worker +7.0 s\n"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "slowest to ready: n2/worker, 6.0 s after spawn, spawned once store was ready\n"
            ),
            "{out}"
        );
        assert!(!out.contains("waiting:"), "{out}");
        let json: serde_json::Value =
            serde_json::from_str(&job_status_json(&nodes, None, 10_000)).unwrap();
        assert_eq!(json["critical_path"][1]["unit"], "master@n1");
        assert_eq!(json["critical_path"][3]["ready_s"], 7.0);
        assert_eq!(json["slowest_to_ready"]["spawned_after"], "store");

        // n2's store crashed at 20 s and was ready again 0.5 s after its restart: the start-up's
        // path still goes through its first readiness.
        let mut nodes = two_nodes();
        let store = &mut nodes[1].1.status.units[1];
        store.first_ready_ts_ms = Some(2_000);
        store.spawned_ts_ms = Some(20_000);
        store.ready_after_ms = Some(500);
        store.restarts = 1;
        let again = job_status_human(&nodes, None, 30_000, false);
        assert!(
            again.contains("-> n2/store +1.0 s -> n2/worker +7.0 s\n"),
            "{again}"
        );
    }

    #[test]
    fn a_node_holding_another_nodes_ranks_says_so() {
        let mut nodes = two_nodes();
        let n2 = &mut nodes[1].1.status;
        n2.units.clear();
        n2.holds_ranks_of = vec!["decode[0] (step mcsup.trtllm-decode-0, led by n1)".into()];
        let out = job_status_human(&nodes, None, 10_000, false);
        assert!(
            out.lines().any(|l| l.starts_with("n2: running (mcsup pid ")
                && l.ends_with(
                    ", holding ranks of decode[0] (step mcsup.trtllm-decode-0, led by n1)"
                )),
            "{out}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&job_status_json(&nodes, None, 10_000)).unwrap();
        assert!(
            json.to_string().contains("holding ranks of decode[0]"),
            "{json}"
        );
    }

    #[test]
    fn a_node_that_has_not_joined_the_control_connection_is_named() {
        use crate::runfiles::ControlStatus;
        let mut nodes = two_nodes();
        let joined = ControlStatus {
            joined: true,
            why: None,
        };
        nodes[0].1.status.control = Some(joined.clone());
        nodes[1].1.status.control = Some(joined);
        let quiet = job_status_human(&nodes, None, 10_000, false);
        assert!(!quiet.contains("control connection"), "{quiet}");

        let why = "the coordinator's mcsup (n1 at 10.0.0.1, ...) could not be reached within 1 min: connection refused; still trying every 2 s";
        nodes[1].1.status.control = Some(ControlStatus {
            joined: false,
            why: Some(why.into()),
        });
        let out = job_status_human(&nodes, None, 10_000, false);
        assert!(
            out.contains(&format!("control connection: n2 has not joined ({why}): a worker over several nodes fails there at its first death")),
            "{out}"
        );
        let m = metrics_text(&nodes[1].1.status, None);
        assert!(
            m.lines()
                .any(|l| l == "mcsup_control_joined{node=\"n2\"} 0"),
            "{m}"
        );
        assert!(metrics_text(&nodes[0].1.status, None)
            .lines()
            .any(|l| l == "mcsup_control_joined{node=\"n1\"} 1"));
        // A node in its teardown has left the connection on purpose.
        nodes[1].1.status.phase = NodePhase::Stopping;
        assert!(!job_status_human(&nodes, None, 10_000, false).contains("control connection"));
        // One node: no control connection, no sample.
        nodes[1].1.status.control = None;
        assert!(!metrics_text(&nodes[1].1.status, None).contains("mcsup_control_joined"));
    }

    #[test]
    fn a_starting_job_says_what_it_waits_on() {
        let mut nodes = two_nodes();
        // n2's store is spawned but not ready; its worker waits for it.
        let n2 = &mut nodes[1].1.status;
        n2.phase = "starting".into();
        n2.units[1] = unit("store", "store", &["master@n1"], 1_600, None);
        n2.units[2] = unit("worker", "worker", &["store"], 0, None);
        n2.units[2].state = "waiting".into();
        n2.units[2].spawned_ts_ms = None;
        n2.units[2].state_since_ts_ms = 1_200;
        let out = job_status_human(&nodes, None, 46_600, false);
        assert!(
            out.contains(
                "waiting: n2/store for its readiness, 45.0 s so far, 2 probe failure(s)\n"
            ),
            "{out}"
        );
        assert!(
            out.contains("waiting: n2/worker on store (starting), for 45.4 s\n"),
            "{out}"
        );
        // The critical path so far ends at n1's worker, the last unit ready.
        assert!(out.contains("-> n1/worker +4.8 s\n"), "{out}");
        // A node whose mcsup is gone waits for nothing.
        nodes[1].1.writer_alive = false;
        assert!(!job_status_human(&nodes, None, 46_600, false).contains("waiting:"));
    }

    #[test]
    fn a_dependency_cycle_in_a_status_file_does_not_hang() {
        let nodes = vec![node(
            "n1",
            "running",
            vec![
                unit("a", "worker", &["b"], 1_000, Some(10)),
                unit("b", "worker", &["a"], 1_000, Some(10)),
            ],
        )];
        let path = critical_path(&nodes);
        assert_eq!(path.len(), 2, "{path:?}");
    }
}
