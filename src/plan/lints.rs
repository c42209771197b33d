//! Warnings about recipes that are legal but probably wrong: the memory-ownership rule of the
//! seed, srt-slurm's env layering trap, sizes one of Mooncake's parsers would read differently.
//! Each returns the warning text; the caller decides where it goes. Pure.

use crate::mooncake::{self, size};

/// `mooncake_kv_store.env` silently replaces the role's value (srt-slurm's layering order).
pub fn shared_env_override(
    process: &str,
    shared_source: &str,
    name: &str,
    value: &str,
    role_source: &str,
    role_value: &str,
) -> String {
    // Values of secrets never reach a warning (it is printed and logged as is).
    let value = crate::secrets::shown(name, value);
    let role_value = crate::secrets::shown(name, role_value);
    format!(
        "{process}: {shared_source}.{name}=\"{value}\" silently overrides {role_source}.{name}=\"{role_value}\" (srt-slurm layering) — remove one of them"
    )
}

/// The seed's memory-ownership rule: with a standalone store on the node, a worker must not
/// contribute a global segment of its own.
pub fn worker_segment(name: &str, value: Option<&str>, role_env: &str, warnings: &mut Vec<String>) {
    match value {
        None => warnings.push(format!(
            "{name}: MOONCAKE_GLOBAL_SEGMENT_SIZE is not set, so the worker's embedded Mooncake client contributes its default segment (4gb in SGLang) besides the standalone store — set MOONCAKE_GLOBAL_SEGMENT_SIZE: \"0\" in {role_env}"
        )),
        Some(v) if v.contains('{') => {}
        Some(v) => match size::parse_mooncake_size(v) {
            Ok(0) => {}
            Ok(n) => warnings.push(format!(
                "{name}: MOONCAKE_GLOBAL_SEGMENT_SIZE=\"{v}\" ({}) while a standalone store serves this node: the worker would contribute DRAM twice — set it to \"0\"",
                size::Bytes(n)
            )),
            Err(e) => warnings.push(format!("{name}: MOONCAKE_GLOBAL_SEGMENT_SIZE=\"{v}\" is invalid ({e})")),
        },
    }
}

/// SGLang's own size parser is stricter than Mooncake's.
pub fn sglang_size(name: &str, value: &str, warnings: &mut Vec<String>) {
    if !size::sglang_accepts(value) && !value.contains('{') {
        warnings.push(format!(
            "{name}: MOONCAKE_GLOBAL_SEGMENT_SIZE=\"{value}\" is valid for Mooncake but SGLang's parser rejects it (it takes an integer followed by gb, or plain bytes)"
        ));
    }
}

/// A store's segment: unset means Mooncake's default; below 16 MiB Mooncake refuses it.
/// `Err(message)` is a hard error.
pub fn store_segment(
    store: &str,
    node: &str,
    value: Option<&str>,
    key: &str,
    warnings: &mut Vec<String>,
) -> Result<(), String> {
    match value {
        None => warnings.push(format!(
            "{store} on {node}: MOONCAKE_GLOBAL_SEGMENT_SIZE is not set, so Mooncake uses its default of {} — set it in {key}",
            size::Bytes(mooncake::DEFAULT_SEGMENT)
        )),
        Some(v) if !v.contains('{') => {
            if let Ok(n) = size::parse_mooncake_size(v) {
                if n < mooncake::MIN_STORE_SEGMENT {
                    return Err(format!(
                        "the store's segment {v} ({}) is below Mooncake's minimum of 16 MiB",
                        size::Bytes(n)
                    ));
                }
            }
        }
        Some(_) => {}
    }
    Ok(())
}

/// vLLM's client JSON with a non-zero `global_segment_size` next to a standalone store.
pub fn vllm_segment(source: &str, v: &serde_json::Value, warnings: &mut Vec<String>) {
    let nonzero = match v {
        serde_json::Value::Number(n) => n.as_u64() != Some(0),
        serde_json::Value::String(s) => size::parse_mooncake_size(s) != Ok(0),
        _ => true,
    };
    if nonzero {
        warnings.push(format!(
            "{source}.global_segment_size is {v}, but a standalone store serves this node: each vLLM rank would contribute DRAM too — set it to 0 and mode: standalone-store"
        ));
    }
}

/// A Dynamo frontend that migrates no request (`--migration-limit`, `DYN_MIGRATION_LIMIT`: 0 by
/// default in ai-dynamo 1.6.1's `frontend_args.py`) in front of workers that restart: the
/// requests in flight on a worker that dies are lost with it, which a limit of 1 or more would
/// move to another worker. `workers_restart`: the job's workers restart (this node's, or
/// `mcsup.worker_defaults.restart`).
pub fn migration_limit(
    processes: &[super::spec::ProcessSpec],
    workers_restart: bool,
    warnings: &mut Vec<String>,
) {
    if !workers_restart {
        return;
    }
    for p in processes.iter().filter(|p| {
        p.kind == super::spec::ProcessKind::Frontend
            && p.argv.iter().any(|a| a == "dynamo.frontend")
    }) {
        let flag = p.argv.iter().enumerate().find_map(|(i, a)| {
            match a.strip_prefix("--migration-limit") {
                Some("") => p.argv.get(i + 1).cloned(),
                Some(v) => v.strip_prefix('=').map(String::from),
                None => None,
            }
        });
        let limit = flag.or_else(|| p.env_value("DYN_MIGRATION_LIMIT").map(String::from));
        if limit.as_deref().is_some_and(|l| l.trim() != "0") {
            continue;
        }
        warnings.push(format!(
            "{}: Dynamo's frontend migrates no request (--migration-limit {}) while the workers restart: the requests in flight on a worker that dies are lost with it; set frontend.args: {{migration-limit: 3}} (or DYN_MIGRATION_LIMIT in frontend.env) to move them to another worker",
            p.name,
            limit.as_deref().unwrap_or("0, Dynamo's default")
        ));
    }
}

/// Stop budgets that do not add up: an engine that needs longer to stop than its grace (it would
/// be SIGKILLed while draining), and a grace longer than the whole teardown's deadline (cut by
/// it). Processes with the same finding are named together.
pub fn stop_budgets(
    processes: &[super::spec::ProcessSpec],
    deadline: std::time::Duration,
    warnings: &mut Vec<String>,
) {
    for (what, fix) in stop_budget_findings(processes, deadline) {
        warnings.push(format!("{what}; {fix}"));
    }
}

/// [`stop_budgets`]' findings as (what is wrong, with the processes' names; the fix).
pub fn stop_budget_findings(
    processes: &[super::spec::ProcessSpec],
    deadline: std::time::Duration,
) -> Vec<(String, String)> {
    use crate::domain::show_secs as show;
    use crate::engine::stop::MARGIN;
    let mut found: Vec<((String, String), Vec<String>)> = Vec::new();
    let mut note = |what: String, fix: String, name: &String| {
        let key = (what, fix);
        match found.iter_mut().find(|(k, _)| *k == key) {
            Some((_, names)) => names.push(name.clone()),
            None => found.push((key, vec![name.clone()])),
        }
    };
    for p in processes {
        let grace = p.stop.grace;
        if let Some(b) = &p.stop.budget {
            let need = b.total + MARGIN;
            if need > grace {
                let mut fix = match &b.fix {
                    Some(f) if f.contains('=') => format!("set {f} in the worker's environment"),
                    Some(f) => format!("lower {f}"),
                    None => String::from("use a shorter engine stop"),
                };
                fix.push_str(&format!(
                    ", or raise the stop grace to {} or more (mcsup.worker_defaults.stop.grace_seconds, or the worker's stop.grace_seconds)",
                    show(need)
                ));
                if need > deadline {
                    fix.push_str(&format!(
                        " and mcsup.shutdown.deadline_seconds (now {}) with it",
                        show(deadline)
                    ));
                }
                note(
                    format!(
                        "{} ({}), but the stop grace is {} (it needs the budget + {} margin, {}): mcsup would SIGKILL it while it stops",
                        b.engine_line(),
                        b.parts.join(" + "),
                        show(grace),
                        show(MARGIN),
                        show(need)
                    ),
                    fix,
                    &p.name,
                );
            }
        }
        if grace > deadline {
            note(
                format!(
                    "stop grace {} is longer than the teardown deadline {}: whatever still runs at the deadline is SIGKILLed",
                    show(grace),
                    show(deadline)
                ),
                "lower the grace or raise mcsup.shutdown.deadline_seconds".into(),
                &p.name,
            );
        }
    }
    found
        .into_iter()
        .map(|((what, fix), names)| (format!("{}: {what}", names.join(", ")), fix))
        .collect()
}

/// Two processes of this node on one port (round 4's N30: two stores on 28800 and 28801 whose
/// other ports met, a node-exporter's `options.port` and a service's readiness port, planned
/// without a word): the ports each listens on (its placement's) or is probed on here.
/// `here`: whether a probe's host is this node.
pub fn port_clashes(
    processes: &[super::spec::ProcessSpec],
    here: &dyn Fn(&str) -> bool,
    warnings: &mut Vec<String>,
) {
    let mut owners: Vec<(u16, &str)> = Vec::new();
    for p in processes {
        for port in p.ports_here(here) {
            match owners.iter().find(|(q, _)| *q == port) {
                Some((_, other)) => warnings.push(format!(
                    "{other} and {} both use port {port} on this node (listening or probed there): if both listen, the second fails to bind — give one of them another port",
                    p.name
                )),
                None => owners.push((port, &p.name)),
            }
        }
    }
}
