//! Live checks of this machine: managed ports are free, executables and Python modules exist,
//! and the installed `mooncake_master` accepts the recipe's flags (version skew such as
//! `--nof_eviction_high_watermark_ratio` on masters before v0.3.11).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::report::{Check, Report};
use crate::plan::{Plan, ProbeSpec, ProcessKind, ProcessSpec};

/// Ports this node's processes will listen on.
pub fn listening_ports(plan: &Plan) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for p in &plan.processes {
        if !matches!(p.kind, ProcessKind::Master | ProcessKind::Store) {
            continue;
        }
        for probe in p.readiness.iter().flat_map(|r| &r.probes) {
            if let ProbeSpec::Tcp { host, port } = probe {
                if host == "127.0.0.1" || host == "localhost" {
                    out.push((p.name.clone(), *port));
                }
            }
        }
    }
    out
}

/// Bind test on each port (the master binds 0.0.0.0).
pub fn check_ports(plan: &Plan, report: &mut Report) {
    for (name, port) in listening_ports(plan) {
        let label = format!("{name} port {port}");
        match std::net::TcpListener::bind(("0.0.0.0", port)) {
            Ok(_) => report.push(Check::ok("ports", &label, "free")),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => report.push(Check::fail(
                "ports",
                &label,
                format!("port {port} is already in use on this node"),
                format!("find the owner with `ss -ltnp 'sport = :{port}'`; stop it, or move {name} to another port (mcsup.master.*_port / standalone.health_check.port and its --port arg)"),
            )),
            Err(e) => report.push(Check::warn("ports", &label, format!("cannot bind port {port}: {e}"), "check for a firewall or a privileged port")),
        }
    }
}

/// Find a program the way exec would (`PATH` search for bare names).
pub fn find_program(name: &str, path_var: Option<&str>, cwd: Option<&Path>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        let p = match cwd {
            Some(c) if !Path::new(name).is_absolute() => c.join(name),
            _ => PathBuf::from(name),
        };
        return is_exec(&p).then_some(p);
    }
    path_var?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| is_exec(p))
}

fn python_module(spec: &ProcessSpec) -> Option<&str> {
    let prog = Path::new(spec.argv.first()?).file_name()?.to_str()?;
    if !prog.starts_with("python") {
        return None;
    }
    match spec.argv.get(1).map(String::as_str) {
        Some("-m") => spec.argv.get(2).map(String::as_str),
        _ => None,
    }
}

/// Run a short command with a timeout; returns (success, combined output).
fn run_bounded(
    argv: &[String],
    env: &[(String, String)],
    timeout: Duration,
) -> Option<(bool, String)> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().ok()?;
    let start = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => return None,
        }
    }
    let out = child.wait_with_output().ok()?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Some((out.status.success(), text))
}

/// Every process's program exists; `python -m module` modules import.
pub fn check_executables(plan: &Plan, path_var: Option<&str>, report: &mut Report) {
    let mut seen = BTreeSet::new();
    for p in &plan.processes {
        let Some(prog) = p.argv.first() else { continue };
        let label = format!("{} program", p.name);
        let Some(found) = find_program(prog, path_var, p.cwd.as_deref()) else {
            let fix = match p.kind {
                ProcessKind::Master => "install Mooncake (scripts/setup.sh puts it in .venv/bin) and put it on PATH, or set mcsup.master.command",
                ProcessKind::Store => "install Mooncake's Python package in the interpreter on PATH, or set standalone.command",
                ProcessKind::Service => "install the service's program on this node (srtctl's /configs binaries: set mcsup.configs_dir), or set the service's command",
                ProcessKind::Worker => "fix the worker's command, or put its program on PATH",
            };
            report.push(Check::fail(
                "tools",
                &label,
                format!("`{prog}` not found (PATH and cwd)"),
                fix,
            ));
            continue;
        };
        if let Some(module) = python_module(p) {
            if seen.insert((found.clone(), module.to_string())) {
                let probe = vec![
                    found.display().to_string(),
                    "-c".to_string(),
                    format!("import importlib.util,sys; sys.exit(0 if importlib.util.find_spec({module:?}) else 3)"),
                ];
                match run_bounded(&probe, &[], Duration::from_secs(20)) {
                    Some((true, _)) => report.push(Check::ok("tools", &label, format!("{} has module {module}", found.display()))),
                    Some((false, out)) => report.push(Check::fail(
                        "tools",
                        &label,
                        format!("{} cannot find module {module}{}", found.display(), out.lines().last().map_or(String::new(), |l| format!(" ({l})"))),
                        "install the package into that interpreter (for Mooncake: mooncake-transfer-engine), or point the command at the right python",
                    )),
                    None => report.push(Check::warn("tools", &label, format!("could not run {} to check module {module}", found.display()), "check the interpreter")),
                }
            }
        } else {
            report.push(Check::ok("tools", &label, found.display().to_string()));
        }
    }
}

/// Flag names a gflags `--help` lists (`    -name (...)`), plus `no<name>` forms.
pub fn gflags_names(help: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in help.lines() {
        let Some(rest) = line.strip_prefix("    -") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() && rest[name.len()..].starts_with(' ') {
            names.insert(format!("no{name}"));
            names.insert(name);
        }
    }
    names
}

/// Flags in an argv (`--name=value`, `--name value`, `-name`).
pub fn argv_flags(argv: &[String]) -> Vec<String> {
    argv.iter()
        .skip(1)
        .filter_map(|a| a.strip_prefix("--").or_else(|| a.strip_prefix('-')))
        .map(|a| a.split('=').next().unwrap_or(a).to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

/// The installed master accepts every flag the plan gives it.
pub fn check_master_flags(plan: &Plan, path_var: Option<&str>, report: &mut Report) {
    let Some(master) = plan
        .processes
        .iter()
        .find(|p| p.kind == ProcessKind::Master)
    else {
        return;
    };
    let Some(prog) = find_program(&master.argv[0], path_var, None) else {
        return;
    };
    let help = match run_bounded(
        &[prog.display().to_string(), "--help".into()],
        &[],
        Duration::from_secs(10),
    ) {
        Some((_, out)) => out,
        None => {
            report.push(Check::warn(
                "tools",
                "master flags",
                "`mooncake_master --help` did not answer",
                "check the installed master",
            ));
            return;
        }
    };
    let known = gflags_names(&help);
    if known.is_empty() {
        report.push(Check::warn(
            "tools",
            "master flags",
            "`mooncake_master --help` listed no flags; cannot check the recipe's",
            "check the installed master",
        ));
        return;
    }
    let unknown: Vec<String> = argv_flags(&master.argv)
        .into_iter()
        .filter(|f| !known.contains(f))
        .collect();
    if unknown.is_empty() {
        report.push(Check::ok(
            "tools",
            "master flags",
            format!(
                "all {} flags known to the installed master",
                argv_flags(&master.argv).len()
            ),
        ));
    } else {
        let hints: Vec<String> = unknown
            .iter()
            .map(|u| {
                let near = known
                    .iter()
                    .map(|k| (strsim::damerau_levenshtein(u, k), k))
                    .filter(|(d, _)| *d <= 3)
                    .min_by_key(|(d, _)| *d)
                    .map(|(_, k)| format!(" (did you mean --{k}?)"))
                    .unwrap_or_default();
                format!("--{u}{near}")
            })
            .collect();
        report.push(Check::fail(
            "tools",
            "master flags",
            format!("the installed mooncake_master does not know {}: it would exit with \"unknown command line flag\"", hints.join(", ")),
            "remove them from mooncake_kv_store.master_args / master_extra_args, or install a Mooncake that has them (e.g. --nof_eviction_high_watermark_ratio needs v0.3.11+)",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_gflags_help() {
        let help = "  Flags from x.cpp:\n    -rpc_port (Port) type: int32 default: 50051\n    -enable_http_metadata_server (b) type: bool\n      default: false\n";
        let n = gflags_names(help);
        assert!(
            n.contains("rpc_port")
                && n.contains("enable_http_metadata_server")
                && !n.contains("nofoo")
        );
        let argv: Vec<String> = ["m", "--rpc_port=1", "-x", "--y", "v"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(argv_flags(&argv), vec!["rpc_port", "x", "y"]);
    }
}
