//! Processes that are Slurm steps of the job (an MPI endpoint over several nodes: the process
//! is the step's `srun` client; docs/trtllm.md). Their signals go to the step's tasks on every
//! node through `scancel`, never to srun: measured (tests/slurm/FINDINGS.md), SIGTERM to srun
//! SIGKILLs every task at once, while `scancel --signal=TERM <job>.<step>` lets every rank run
//! its handler. The step is found by its name (srun `--job-name`).

use nix::sys::signal::Signal;

/// Exit status of [`scancel_argv`]'s command when the job has no running step of that name.
pub const NO_SUCH_STEP: i32 = 3;

/// The command that sends `signal` to the tasks of the newest step named `name` of job `job`,
/// or kills them (`scancel` without a signal: SIGKILL at once) when `signal` is SIGKILL.
pub fn scancel_argv(job: &str, name: &str, signal: Signal) -> Vec<String> {
    step_argv(job, name, signal.as_str())
}

/// The command that exits 0 while job `job` has a step named `name`, [`NO_SUCH_STEP`] once not.
fn exists_argv(job: &str, name: &str) -> Vec<String> {
    step_argv(job, name, "")
}

/// Find the newest step named `name` of `job`, then: nothing (`what` empty), cancel it
/// (`SIGKILL`), or send it that signal.
fn step_argv(job: &str, name: &str, what: &str) -> Vec<String> {
    // squeue lists the job's steps as `<job>.<step> <name>`, oldest first.
    let script = r#"step=$(squeue -h -s -j "$1" -o "%i %j" | awk -v n="$2" '$2 == n { s = $1 } END { if (s != "") print s }')
[ -n "$step" ] || exit 3
[ -n "$3" ] || exit 0
if [ "$3" = SIGKILL ]; then exec scancel "$step"; fi
exec scancel --signal="${3#SIG}" "$step""#;
    ["sh", "-c", script, "mcsup-scancel", job, name, what]
        .map(String::from)
        .to_vec()
}

/// Run `argv` (bounded by [`STALE_BOUND`]) and give its exit code; `None` when it could not run
/// or did not finish.
fn run_bounded(argv: &[String], path: Option<&str>) -> Result<Option<i32>, std::io::Error> {
    let mut cmd = std::process::Command::new(&argv[0]);
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    let mut child = cmd
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let until = std::time::Instant::now() + STALE_BOUND;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Ok(s.code()),
            Ok(None) if std::time::Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(None);
            }
        }
    }
}

/// The most [`cancel_stale`] waits for one `scancel`.
const STALE_BOUND: std::time::Duration = std::time::Duration::from_secs(10);

/// Before anything starts: cancel the running steps of `job` named as `names` (left by an
/// earlier life of this node's mcsup, SIGKILLed with its step while their ranks lived on), so a
/// new step does not meet the old one's ranks on its GPUs and ports. Returns what it said.
/// Runs before the supervisor's reaper: it waits for its own children.
pub fn cancel_stale(job: &str, names: &[String]) -> Vec<String> {
    cancel_stale_with(job, names, None)
}

/// [`cancel_stale`] with `squeue` and `scancel` looked up in `path` when given.
fn cancel_stale_with(job: &str, names: &[String], path: Option<&str>) -> Vec<String> {
    let mut said = Vec::new();
    for name in names {
        match run_bounded(&scancel_argv(job, name, Signal::SIGKILL), path) {
            Ok(Some(0)) => {
                // Cancelled: wait (bounded) until Slurm has ended it, so the new step does not
                // meet its ranks on their ports.
                let until = std::time::Instant::now() + STALE_BOUND;
                let gone = loop {
                    match run_bounded(&exists_argv(job, name), path) {
                        Ok(Some(NO_SUCH_STEP)) => break true,
                        _ if std::time::Instant::now() >= until => break false,
                        _ => std::thread::sleep(std::time::Duration::from_millis(200)),
                    }
                };
                said.push(format!(
                    "a Slurm step {name} of job {job} was still running (an earlier mcsup's): cancelled{}",
                    if gone { "" } else { ", but it was still listed 10 s later" }
                ));
            }
            Ok(Some(NO_SUCH_STEP)) => {}
            Ok(other) => said.push(format!(
                "could not check for an earlier step {name} of job {job} ({}): if one runs, its ranks hold their GPUs and ports",
                other.map_or("no answer within 10 s".to_string(), |c| format!("exit {c}"))
            )),
            Err(e) => said.push(format!("cannot look for an earlier step {name}: {e}")),
        }
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command against a fake `squeue` and `scancel` on PATH: the newest step of that name
    /// is signalled, by its name without `SIG`; SIGKILL cancels it; no step is exit 3.
    #[test]
    fn the_newest_step_of_that_name_is_signalled() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path();
        let log = bin.join("calls");
        let write = |name: &str, body: &str| {
            let p = bin.join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            let mut perm = std::fs::metadata(&p).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
            std::fs::set_permissions(&p, perm).unwrap();
        };
        // Once scancel has killed 7.6 (a line `7.6` in the calls), its steps are gone.
        write(
            "squeue",
            &format!(
                "if grep -qx 7.6 {0} 2>/dev/null; then printf '7.0 mcsup-node\\n7.5 other\\n'; else printf '7.0 mcsup-node\\n7.3 mcsup.ep\\n7.5 other\\n7.6 mcsup.ep\\n'; fi",
                log.display()
            ),
        );
        write("scancel", &format!("echo \"$@\" >> {}", log.display()));
        let run = |name: &str, sig: Signal| {
            let argv = scancel_argv("7", name, sig);
            std::process::Command::new(&argv[0])
                .args(&argv[1..])
                .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                .status()
                .unwrap()
                .code()
        };
        assert_eq!(run("mcsup.ep", Signal::SIGTERM), Some(0));
        assert_eq!(run("mcsup.ep", Signal::SIGKILL), Some(0));
        assert_eq!(run("gone", Signal::SIGTERM), Some(NO_SUCH_STEP));
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "--signal=TERM 7.6\n7.6\n"
        );
        // At start: a step left by an earlier mcsup is cancelled and said; none is silent.
        std::fs::remove_file(&log).unwrap();
        let path = format!("{}:/usr/bin:/bin", bin.display());
        let said = cancel_stale_with("7", &["mcsup.ep".into(), "gone".into()], Some(&path));
        assert_eq!(
            said,
            ["a Slurm step mcsup.ep of job 7 was still running (an earlier mcsup's): cancelled"]
        );
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "7.6\n");
    }
}
