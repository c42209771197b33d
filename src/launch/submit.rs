//! `mcsup submit`: hand a rendered script to `sbatch`. The job is submitted held, its output
//! directory made (Slurm opens `--output` before the script runs and does not create
//! directories), the script kept there, and then released: no window in which the job can start
//! without the directory its log goes to.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::Rendered;

/// A submitted job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    pub job_id: String,
    /// `<output base>/<job id>`.
    pub dir: PathBuf,
}

/// Run `program` with `args`; its stdout, or what went wrong in words.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program).args(args).output().map_err(|e| {
        format!("cannot run `{program}`: {e} (is Slurm's client installed and on PATH?)")
    })?;
    if !out.status.success() {
        return Err(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `sbatch --parsable` prints `<id>` or `<id>;<cluster>`.
fn parse_job_id(stdout: &str) -> Option<String> {
    let id = stdout.trim().split(';').next()?.trim();
    (!id.is_empty() && id.chars().all(|c| c.is_ascii_digit())).then(|| id.to_string())
}

/// Submit `r` with `sbatch` (`extra` before the script), return the job id and its directory.
pub fn submit(r: &Rendered, extra: &[String]) -> Result<Submitted, String> {
    let base = &r.output_base;
    std::fs::create_dir_all(base).map_err(|e| format!("cannot create {}: {e}", base.display()))?;
    // sbatch reads the script once, at submission: a file of our own (never an existing one),
    // removed right after.
    let staged = base.join(format!(".mcsup-submit-{}.sh", std::process::id()));
    let write = || -> std::io::Result<()> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&staged)?;
        f.write_all(r.script.as_bytes())
    };
    write().map_err(|e| format!("cannot write {}: {e}", staged.display()))?;
    let script = staged.display().to_string();
    let mut args: Vec<&str> = vec!["--parsable", "--hold"];
    args.extend(extra.iter().map(String::as_str));
    args.push(&script);
    let submitted = run("sbatch", &args);
    let _ = std::fs::remove_file(&staged);
    let out = submitted?;
    let id = parse_job_id(&out).ok_or_else(|| format!("sbatch printed no job id: {out:?}"))?;
    let dir = base.join(&id);
    let prepared = std::fs::create_dir_all(dir.join("logs"))
        .and_then(|()| std::fs::write(dir.join("sbatch_script.sh"), &r.script));
    if let Err(e) = prepared {
        let cancelled = run("scancel", &[&id]).map_or_else(|e| e, |_| "cancelled".into());
        return Err(format!(
            "job {id}: cannot prepare {}: {e} (job {cancelled})",
            dir.display()
        ));
    }
    run("scontrol", &["release", &id]).map_err(|e| {
        format!("job {id} stays held: {e}; release it with `scontrol release {id}`")
    })?;
    Ok(Submitted { job_id: id, dir })
}

/// What to type next: status, timeline, the job's log.
pub fn next_steps(s: &Submitted) -> String {
    let logs = s.dir.join("logs");
    let show = |p: &Path| crate::render::shell_word(&p.display().to_string());
    format!(
        "  status:   mcsup status --job {l}\n  timeline: mcsup timeline {l} -o timeline.html\n  log:      {out}\n  stop:     scancel --batch --signal=USR1 {id}   (the ordered drain)\n",
        l = show(&logs),
        out = show(&logs.join(format!("sweep_{}.log", s.job_id))),
        id = s.job_id,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_as_sbatch_parsable_prints_them() {
        assert_eq!(parse_job_id("1234\n").as_deref(), Some("1234"));
        assert_eq!(parse_job_id("77;cluster-a\n").as_deref(), Some("77"));
        assert_eq!(parse_job_id("Submitted batch job 5\n"), None);
        assert_eq!(parse_job_id(""), None);
    }
}
