//! What mcsup shows people: the plan ([`plan_human`], [`plan_json`]: both from the same value), the
//! status files (`status`: one node, the whole job, Prometheus text) and the job's timeline
//! picture (`timeline`). Nothing here does I/O.
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

mod benchmark;
pub mod groups;
mod status;
mod timeline;
pub mod why;

#[cfg(test)]
pub(crate) use status::status_tests;
pub use status::{
    job_status_human, job_status_json, metrics_text, status_human, text_table, FULL_TABLE_UP_TO,
    NODE_LINES_UP_TO,
};
pub use timeline::{timeline_html, OPEN_ALL_UP_TO};

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
        if let Some(pre) = &mut proc_.preamble {
            let (shown, values) = secrets::redact_shell(pre);
            *pre = shown;
            hidden.extend(values);
        }
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
pub fn shell_word(w: &str) -> String {
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
    {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

/// A value as one line of the text plan: as it is, or, when it holds a newline or another
/// control character, quoted with escapes (`"a\nHF_TOKEN=x"`), so it cannot forge a line.
fn one_line(v: &str) -> std::borrow::Cow<'_, str> {
    if v.chars().any(char::is_control) {
        format!("{v:?}").into()
    } else {
        v.into()
    }
}

/// An argv word for the text plan: [`shell_word`], or bash's `$'...'` with escapes when it holds
/// a control character (a newline in single quotes would start a line of its own).
fn shown_word(w: &str) -> String {
    if !w.chars().any(char::is_control) {
        return shell_word(w);
    }
    let mut out = String::from("$'");
    for c in w.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
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
    plan_header(&mut o, &p);
    plan_services(&mut o, &p);
    plan_before_start(&mut o, &p);
    let _ = writeln!(o, "\nprocesses, in start order:");
    for (i, s) in p.processes.iter().enumerate() {
        plan_process(&mut o, i, s);
    }
    if p.processes.is_empty() {
        let _ = writeln!(o, "  (none)");
    }
    plan_dram(&mut o, &p);
    plan_shutdown(&mut o, &p);
    if !p.ignored_sections.is_empty() {
        let _ = writeln!(
            o,
            "\nignored (not interpreted by mcsup): {}",
            p.ignored_sections.join(", ")
        );
    }
    if !p.notes.is_empty() {
        let _ = writeln!(o, "\nnotes (what mcsup adds, and why):");
        for n in &p.notes {
            let _ = writeln!(o, "  - {n}");
        }
    }
    if !p.warnings.is_empty() {
        let _ = writeln!(o, "\nwarnings:");
        for w in &p.warnings {
            let _ = writeln!(o, "  - {w}");
        }
    }
    o
}

/// The node, its mode, the infra node, the log dir, the recipe's spelling and the endpoint.
fn plan_header(o: &mut String, p: &Plan) {
    let n = &p.node;
    let _ = writeln!(
        o,
        "mcsup plan for node {} (id {}, {}), roles: {}",
        n.name,
        n.node_id,
        n.ip,
        crate::domain::Role::list(&p.roles)
    );
    if let Some(why) = &p.roles_from {
        let _ = writeln!(o, "roles from --role auto: {why}");
    }
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
    if let Some(c) = &p.control {
        let _ = writeln!(
            o,
            "control: the mcsup of {} listens on {} for every node's (restarts of workers over several nodes, a node that failed); port and secret in {}",
            c.coordinator,
            match c.port {
                0 => format!("{} (a free port)", c.address),
                port => format!("{}:{port}", c.address),
            },
            c.secret.display()
        );
    }
    if !p.recipe_schema.is_empty() {
        let _ = writeln!(o, "recipe: srt-slurm {} spelling", p.recipe_schema);
    }
    if let Some(e) = &p.endpoint {
        let _ = writeln!(o, "endpoint: {e}");
    }
    if let Some(b) = &p.benchmark {
        let _ = writeln!(o, "benchmark: {b}");
    }
    let serves_here = p.processes.iter().any(|x| x.servable_probe().is_some());
    if serves_here && p.canary.enabled {
        let c = &p.canary;
        let _ = writeln!(
            o,
            "canary: once servable, a 1-token completion through the endpoint every {} (at most {} each); {} failures in a row: canary-failed, then {} (mcsup's, srtctl has none; mcsup.canary.enabled: false turns it off)",
            crate::domain::show_secs(c.period),
            crate::domain::show_secs(c.timeout),
            c.threshold,
            match c.on_failure {
                crate::recipe::CanaryAction::Report => "report (an event, DEGRADED, a metric)",
                crate::recipe::CanaryAction::Drain => "drain the job (exit code 6)",
            }
        );
    }
}

/// The job's services as srtctl's dry-run lists them, and what each does on this node.
fn plan_services(o: &mut String, p: &Plan) {
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
}

/// The remote waits, the files and the directories made before the first process.
fn plan_before_start(o: &mut String, p: &Plan) {
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
    if !p.dirs.is_empty() {
        let _ = writeln!(o, "\ndirectories made before start:");
        for d in &p.dirs {
            let _ = writeln!(o, "  {}", d.display());
        }
    }
    if let Some(d) = &p.scratch_dir {
        let _ = writeln!(
            o,
            "\nscratch directory (made 0700 before start, removed after the teardown): {}",
            d.display()
        );
    }
}

/// One process: tags, worker placement, argv, env with sources, waits, probes, policies.
fn plan_process(o: &mut String, i: usize, s: &ProcessSpec) {
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
        let gpus = crate::domain::gpu_list(&w.gpus);
        let ports = w
            .ports
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(o, "   worker {}: GPUs {gpus}; ports {ports}", w.endpoint);
        if let Some(step) = &s.slurm_step {
            let per_node = w.gpus.len();
            let _ = writeln!(
                o,
                "   Slurm step {}: {} ranks, {per_node} per node (one per GPU) on {}; started and stopped from here, the leader node",
                step.name,
                per_node * w.nodes.len(),
                w.nodes.join(", ")
            );
        } else if w.nodes.len() > 1 {
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
        // Each line marked as the preamble's: a line in it cannot pass for one of the plan's.
        let _ = writeln!(o, "   preamble:");
        for line in pre.lines() {
            let _ = writeln!(o, "     | {}", one_line(line));
        }
    }
    let _ = writeln!(
        o,
        "   argv: {}",
        s.argv
            .iter()
            .map(|w| shown_word(w))
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
            let kv = format!("{}={}", v.name, one_line(&v.value));
            let mut note = v.source.clone();
            if SIZE_VARIABLES.contains(&v.name.as_str()) {
                if let Ok(b) = size::parse_mooncake_size(&v.value) {
                    note = format!("{note}; = {}", size::Bytes(b));
                }
            }
            for ov in &v.overrode {
                let _ = write!(note, "; overrode {}={}", ov.source, one_line(&ov.value));
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
    plan_stop(o, &s.stop, s.slurm_step.as_ref());
    let _ = writeln!(o, "   restart: {}", restart_line(s));
}

/// A process's restart policy, in one line.
fn restart_line(s: &crate::plan::ProcessSpec) -> String {
    let r = &s.restart;
    let restart = match r.policy {
        RestartPolicy::Never => "never".to_string(),
        pol if r.window >= crate::plan::role_restart::WHOLE_JOB => format!(
            "{pol}, backoff {} x{} up to {}, never reset; at most {} over the whole job (srtctl's roles.<role>.restart)",
            secs(r.backoff_initial),
            r.backoff_factor,
            secs(r.backoff_max),
            r.max_restarts
        ),
        pol => format!(
            "{pol}, backoff {} x{} up to {}, at most {} in {}",
            secs(r.backoff_initial),
            r.backoff_factor,
            secs(r.backoff_max),
            r.max_restarts,
            secs(r.window)
        ),
    };
    let restart = match &r.unit {
        Some(u) => format!(
            "{restart}; as one unit with the other ranks of {} ({}): the coordinator decides for the worker, counting over the whole job, and every rank stops and starts again together",
            u.worker,
            u.nodes.join(", ")
        ),
        None => restart,
    };
    let gpus = s.gpus();
    if r.policy != RestartPolicy::Never && !gpus.is_empty() && !r.release_wait.is_zero() {
        format!(
            "{restart}; each restart waits up to {} for GPU {} to be released",
            secs(r.release_wait),
            crate::domain::gpu_list(gpus)
        )
    } else {
        restart
    }
}

/// What the preflight's DRAM budget will count on this node.
fn plan_dram(o: &mut String, p: &Plan) {
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
}

/// A process's stop: its signal and grace (to every rank of its Slurm step, through
/// `scancel`), its engine's budget, its in-flight gauge.
fn plan_stop(o: &mut String, stop: &crate::plan::StopSpec, step: Option<&crate::plan::SlurmStep>) {
    match step {
        Some(step) => {
            let _ = writeln!(
                o,
                "   stop: scancel --signal={} <job>.<step {}> (every rank), `scancel` (SIGKILL) after {}",
                stop.signal.as_str().trim_start_matches("SIG"),
                step.name,
                secs(stop.grace)
            );
        }
        None => {
            let _ = writeln!(
                o,
                "   stop: {} (+SIGCONT), SIGKILL to the group after {}",
                stop.signal,
                secs(stop.grace)
            );
        }
    }
    if let Some(b) = &stop.budget {
        let parts = if b.parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", b.parts.join(" + "))
        };
        let _ = writeln!(o, "   stop budget: {}{parts}", b.engine_line());
        if let Some(u) = &b.unbounded {
            let _ = writeln!(o, "     not bounded: {u}");
        }
    }
    if let Some(g) = &stop.inflight {
        let _ = writeln!(
            o,
            "   in flight: {} at {} (read by a drain)",
            g.metrics.join(" + "),
            g.url
        );
    }
}

/// The teardown order, its deadline and its worst case.
fn plan_shutdown(o: &mut String, p: &Plan) {
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
        "\nshutdown: {order}; deadline {}; drain signal {}{}{}",
        secs(sd.deadline),
        sd.drain_signal,
        if sd.drain.is_zero() {
            String::new()
        } else {
            format!(" (in-flight requests get {} first)", secs(sd.drain))
        },
        if sd.exit_when_workers_done {
            "; also when every worker has exited"
        } else {
            ""
        }
    );
    if let Some(worst) = crate::preflight::slurm::worst_case_text(&tiers, sd.deadline) {
        let _ = writeln!(o, "  {worst}");
    }
    if !sd.holds_ranks_of.is_empty() {
        let _ = writeln!(
            o,
            "  holds ranks of {}: stays up until told to stop, even with nothing of its own running",
            sd.holds_ranks_of.join(", ")
        );
    }
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
