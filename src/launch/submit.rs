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
    safe_base(base)?;
    // sbatch reads the script once, at submission: a file of our own (never an existing one),
    // removed right after; its name unpredictable, so that nobody can take it first (the re-run
    // of round 4, NEW-B: `.mcsup-submit-<pid>.sh` planted in a shared directory stopped submit).
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce).map_err(|e| format!("no random bytes: {e}"))?;
    let staged = base.join(format!(".mcsup-submit-{}.sh", hex::encode(nonce)));
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
    let prepared = own_dir(&dir)
        .and_then(|()| own_dir(&dir.join("logs")))
        .and_then(|()| {
            crate::supervisor::write_atomic(
                &dir.join("sbatch_script.sh"),
                r.script.as_bytes(),
                0o755,
            )
            .map_err(|e| e.to_string())
        });
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

/// Make `dir` (its parent exists) a directory of this user's, or take it when it already is one
/// that nobody else can write in. In a shared output directory another user can guess the next
/// job id and prepare `<id>/` with a link where the script goes: a link, another user's
/// directory, or one others can write in is refused, never written through.
pub(crate) fn own_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    let why = if m.file_type().is_symlink() {
        "is a symbolic link".to_string()
    } else if !m.is_dir() {
        "is not a directory".to_string()
    } else if m.uid() != me {
        format!("belongs to uid {} (you are uid {me})", m.uid())
    } else if crate::domain::writable_by_others(&m) {
        format!("can be written by others (mode {:o})", m.mode() & 0o7777)
    } else {
        return Ok(());
    };
    Err(format!(
        "{} {why}, and was there before mcsup made it: another user may have prepared it; mcsup writes nothing through it (remove it, or submit with an output directory only you can write)",
        dir.display()
    ))
}

/// Whether nobody else can change output directory `dir` (it exists) or any directory above it:
/// each must be this user's or root's, and nobody else may write in it unless its sticky bit is
/// set. From a directory another user can write in (a group-writable project directory too),
/// `<out>/<id>/` could be swapped after the submission, and the batch script would write the
/// job's recipe through whatever was put there, as this user (round 4's re-run, NEW-A).
pub(crate) fn safe_base(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let real = std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    for d in real.ancestors() {
        let m = std::fs::metadata(d).map_err(|e| format!("{}: {e}", d.display()))?;
        let why = if m.uid() != me && m.uid() != 0 {
            format!("belongs to uid {} (you are uid {me})", m.uid())
        } else if crate::domain::writable_by_others(&m) && m.mode() & 0o1000 == 0 {
            format!(
                "can be written by others and has no sticky bit (mode {:o})",
                m.mode() & 0o7777
            )
        } else {
            continue;
        };
        let at = if d == real {
            String::new()
        } else {
            format!(" (above the output directory {})", dir.display())
        };
        return Err(format!(
            "{}{at} {why}: another user could swap the job's directory after it is submitted, and the batch script would write the recipe through what they put there; fix: an output directory (--output-dir, or output_dir in srtslurm.yaml) that only you or root can change, all the way up (chmod go-w, or the sticky bit on a shared parent)",
            d.display()
        ));
    }
    Ok(())
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

    /// Round 4's re-run, NEW-A: an output directory that someone else can change, or under one,
    /// is refused naming the directory; a sticky shared parent (`/tmp`) is fine.
    #[test]
    fn an_output_directory_others_can_change_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        let out = d.path().join("out");
        std::fs::create_dir(&out).unwrap();
        mode(&out, 0o755);
        safe_base(&out).unwrap();
        mode(&out, 0o777);
        let e = safe_base(&out).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "{} can be written by others and has no sticky bit (mode 777)",
                std::fs::canonicalize(&out).unwrap().display()
            )) && e.contains("fix:"),
            "{e}"
        );
        mode(&out, 0o1777);
        safe_base(&out).unwrap();
        // Under a parent others can write in: the parent is named.
        mode(&out, 0o777);
        let below = out.join("mine");
        std::fs::create_dir(&below).unwrap();
        mode(&below, 0o755);
        let e = safe_base(&below).unwrap_err();
        assert!(e.contains("(above the output directory"), "{e}");
        mode(&out, 0o755);
        safe_base(&below).unwrap();
        if nix::unistd::geteuid().is_root() {
            nix::unistd::chown(&below, Some(nix::unistd::Uid::from_raw(1000)), None).unwrap();
            let e = safe_base(&below).unwrap_err();
            assert!(e.contains("belongs to uid 1000"), "{e}");
        } else {
            assert!(
                std::env::var_os("CI").is_none(),
                "the chown case needs root under CI"
            );
        }
    }

    /// Round 4's H2: another user guesses the next job id in a shared output directory and
    /// prepares `<id>/` (or a link in its place); nothing is written into or through it.
    #[test]
    fn a_job_directory_prepared_by_someone_else_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let fresh = d.path().join("777");
        own_dir(&fresh).unwrap();
        assert!(fresh.is_dir());
        own_dir(&fresh).unwrap();
        // A link where the job directory goes.
        let victim = d.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        let link = d.path().join("778");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = own_dir(&link).unwrap_err();
        assert!(
            e.contains("is a symbolic link") && e.contains("writes nothing through it"),
            "{e}"
        );
        // One anyone can write in.
        let open = d.path().join("779");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = own_dir(&open).unwrap_err();
        assert!(e.contains("can be written by others (mode 777)"), "{e}");
        if nix::unistd::geteuid().is_root() {
            let theirs = d.path().join("780");
            std::fs::create_dir(&theirs).unwrap();
            nix::unistd::chown(&theirs, Some(nix::unistd::Uid::from_raw(1000)), None).unwrap();
            let e = own_dir(&theirs).unwrap_err();
            assert!(e.contains("belongs to uid 1000"), "{e}");
        } else {
            assert!(
                std::env::var_os("CI").is_none(),
                "the chown case needs root under CI"
            );
        }
    }

    #[test]
    fn job_ids_as_sbatch_parsable_prints_them() {
        assert_eq!(parse_job_id("1234\n").as_deref(), Some("1234"));
        assert_eq!(parse_job_id("77;cluster-a\n").as_deref(), Some("77"));
        assert_eq!(parse_job_id("Submitted batch job 5\n"), None);
        assert_eq!(parse_job_id(""), None);
    }
}
