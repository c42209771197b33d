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
    // squeue lists the job's steps as `<job>.<step> <name>`, oldest first.
    let script = r#"step=$(squeue -h -s -j "$1" -o "%i %j" | awk -v n="$2" '$2 == n { s = $1 } END { if (s != "") print s }')
[ -n "$step" ] || exit 3
if [ "$3" = SIGKILL ]; then exec scancel "$step"; fi
exec scancel --signal="${3#SIG}" "$step""#;
    [
        "sh",
        "-c",
        script,
        "mcsup-scancel",
        job,
        name,
        signal.as_str(),
    ]
    .map(String::from)
    .to_vec()
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
        write(
            "squeue",
            "printf '7.0 mcsup-node\\n7.3 mcsup.ep\\n7.5 other\\n7.6 mcsup.ep\\n'",
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
    }
}
