//! Many jobs: `mcsup jobs` (one line per job under an output directory) and `mcsup wait` (block
//! until jobs end, then exit with their outcome). A job is what `mcsup submit` made:
//! `<output dir>/<job id>/` with its `sbatch_script.sh` and `logs/`, where each node's mcsup
//! writes its status and events. Slurm says whether a job still runs (`scontrol show job`, else
//! `squeue`, else `sacct`); the job's own files say how it went: when it became servable, its
//! benchmark's judged result, each node's exit code, the first failure (`mcsup why`'s headline).
//! A job that left the queue without a final status on every node did not succeed: an empty
//! queue never counts as success (upstream srt-slurm #476).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::runfiles::StatusRead;

/// Slurm's states of a job that has ended.
const TERMINAL: &[&str] = &[
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "SPECIAL_EXIT",
    "REVOKED",
];

/// One job as `mcsup jobs` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: String,
    pub dir: PathBuf,
    /// The script's `#SBATCH --job-name`.
    pub name: String,
    /// Slurm's state, `None` when Slurm no longer knows the job.
    pub state: Option<String>,
    /// Seconds from the first node's start to servable.
    pub servable_s: Option<f64>,
    pub outcome: Outcome,
}

/// How a job went, from its files (and Slurm's final state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Still queued or running: what it does now.
    Running(String),
    /// Ended, every node's mcsup exited 0 and its result (if any) stands.
    Succeeded(String),
    /// Ended otherwise: mcsup's exit code (1 when no node left a final status) and why.
    Failed(i32, String),
}

impl Outcome {
    pub fn words(&self) -> String {
        match self {
            Outcome::Running(w) => w.clone(),
            Outcome::Succeeded(w) => format!("ok: {w}"),
            Outcome::Failed(code, w) => format!("FAILED (exit {code}): {w}"),
        }
    }
}

/// Whether Slurm's state is one of an ended job.
pub fn ended(state: Option<&str>) -> bool {
    state.is_none_or(|s| TERMINAL.iter().any(|t| s.starts_with(t)))
}

/// The jobs under `base`: each directory named by a job id that holds a `sbatch_script.sh`, by id.
pub fn list(base: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let entries =
        std::fs::read_dir(base).map_err(|e| format!("cannot read {}: {e}", base.display()))?;
    let mut out: Vec<(String, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let id = e.file_name().to_string_lossy().into_owned();
            let dir = e.path();
            (!id.is_empty()
                && id.chars().all(|c| c.is_ascii_digit())
                && dir.join("sbatch_script.sh").is_file())
            .then_some((id, dir))
        })
        .collect();
    out.sort_by_key(|(id, _)| id.parse::<u64>().unwrap_or(u64::MAX));
    Ok(out)
}

/// Slurm's state of job `id`: `scontrol show job` (it keeps an ended job for MinJobAge), else
/// `squeue`, else `sacct`; `None` when none of them knows it.
pub fn slurm_state(id: &str) -> Option<String> {
    let run = |program: &str, args: &[&str]| crate::launch::submit::run(program, args).ok();
    if let Some(s) = run("scontrol", &["show", "job", "-o", id])
        .and_then(|text| crate::launch::check::field(&text, "JobState"))
    {
        return Some(s);
    }
    if let Some(text) = run("squeue", &["-h", "-j", id, "-o", "%T"]) {
        if let Some(s) = text.lines().next().map(str::trim).filter(|s| !s.is_empty()) {
            return Some(s.to_string());
        }
    }
    run("sacct", &["-n", "-X", "-P", "-o", "State", "-j", id])
        .and_then(|t| t.lines().next().map(|l| l.trim().to_string()))
        .filter(|s| !s.is_empty())
}

/// The job in `dir` with Slurm's `state`: its name and how it went.
pub fn describe(id: &str, dir: &Path, state: Option<String>) -> Job {
    let name = job_name(&dir.join("sbatch_script.sh")).unwrap_or_default();
    let logs = dir.join("logs");
    let nodes: Vec<(String, StatusRead)> = crate::supervisor::read_job(&logs)
        .map(|(n, _)| n)
        .unwrap_or_default();
    let headline = crate::supervisor::read_job_events(&logs)
        .ok()
        .and_then(|(evs, _)| crate::render::why::story(&evs).headline());
    let servable_s = servable_after(&nodes);
    let outcome = outcome(state.as_deref(), &nodes, headline, servable_s);
    Job {
        id: id.to_string(),
        dir: dir.to_path_buf(),
        name,
        state,
        servable_s,
        outcome,
    }
}

/// The `#SBATCH --job-name=` of a script `mcsup render` wrote.
fn job_name(script: &Path) -> Option<String> {
    use std::io::Read as _;
    // A regular file, at most 1 MiB: the output directory may be shared.
    if !std::fs::symlink_metadata(script).ok()?.is_file() {
        return None;
    }
    let mut text = Vec::new();
    std::fs::File::open(script)
        .ok()?
        .take(1 << 20)
        .read_to_end(&mut text)
        .ok()?;
    String::from_utf8_lossy(&text).lines().find_map(|l| {
        l.strip_prefix("#SBATCH --job-name=")
            .or_else(|| l.strip_prefix("#SBATCH -J "))
            .map(str::to_string)
    })
}

/// From the first node's start to the job's servable moment.
fn servable_after(nodes: &[(String, StatusRead)]) -> Option<f64> {
    let started = nodes.iter().map(|(_, r)| r.status.started_ts_ms).min()?;
    let servable = nodes
        .iter()
        .filter_map(|(_, r)| r.status.servable.as_ref())
        .map(|s| s.servable_ts_ms)
        .min()?;
    Some(servable.saturating_sub(started) as f64 / 1000.0)
}

/// How the job went: Slurm's state says whether it ended; its nodes' files say how.
pub fn outcome(
    state: Option<&str>,
    nodes: &[(String, StatusRead)],
    headline: Option<String>,
    servable_s: Option<f64>,
) -> Outcome {
    let benchmark = nodes.iter().find_map(|(_, r)| r.status.benchmark.as_ref());
    if !ended(state) {
        let state = state.unwrap_or("?");
        let doing = match (servable_s, nodes.is_empty()) {
            (_, true) => format!("{state}: no node has started"),
            (Some(s), _) => format!("{state}: servable after {s:.1} s"),
            (None, _) => format!("{state}: starting"),
        };
        return Outcome::Running(doing);
    }
    let why = |fallback: String| headline.clone().unwrap_or(fallback);
    if nodes.is_empty() {
        return Outcome::Failed(
            1,
            format!(
                "ended ({}) without a status from any node: it never ran, or its files are gone",
                state.unwrap_or("no longer known to Slurm")
            ),
        );
    }
    let unfinished: Vec<&str> = nodes
        .iter()
        .filter(|(_, r)| r.status.exit_code.is_none())
        .map(|(n, _)| n.as_str())
        .collect();
    if !unfinished.is_empty() {
        return Outcome::Failed(
            1,
            why(format!(
                "ended ({}) without a final status from {}",
                state.unwrap_or("no longer known to Slurm"),
                unfinished.join(", ")
            )),
        );
    }
    if let Some((node, code)) = nodes
        .iter()
        .filter_map(|(n, r)| r.status.exit_code.filter(|c| *c != 0).map(|c| (n, c)))
        .next()
    {
        let said = match benchmark {
            Some(b) if !b.valid => b.said.clone(),
            _ => why(format!("{node}'s mcsup exited {code}")),
        };
        return Outcome::Failed(code, said);
    }
    if let Some(b) = benchmark.filter(|b| !b.valid) {
        return Outcome::Failed(9, b.said.clone());
    }
    match state {
        Some(s) if !s.starts_with("COMPLETED") => {
            Outcome::Failed(1, why(format!("Slurm says {s}")))
        }
        _ => Outcome::Succeeded(match benchmark {
            Some(b) => b.said.clone(),
            None => "every node's mcsup exited 0".into(),
        }),
    }
}

/// `mcsup jobs`'s table.
pub fn table(jobs: &[Job]) -> String {
    let rows: Vec<[String; 5]> = jobs
        .iter()
        .map(|j| {
            [
                j.id.clone(),
                j.name.clone(),
                j.state.clone().unwrap_or_else(|| "-".into()),
                j.servable_s.map_or("-".into(), |s| format!("{s:.1} s")),
                j.outcome.words(),
            ]
        })
        .collect();
    crate::render::text_table(["JOB", "NAME", "SLURM", "SERVABLE AFTER", "OUTCOME"], &rows)
}

/// `mcsup wait`: poll every job until it ends (or `timeout` passes), then each one's outcome.
/// `Err` lists the jobs still running at the timeout.
pub fn wait(
    jobs: &[(String, PathBuf)],
    every: Duration,
    timeout: Option<Duration>,
    state: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Job>, Vec<Job>> {
    let start = Instant::now();
    loop {
        let now: Vec<Job> = jobs
            .iter()
            .map(|(id, dir)| describe(id, dir, state(id)))
            .collect();
        if now
            .iter()
            .all(|j| !matches!(j.outcome, Outcome::Running(_)))
        {
            return Ok(now);
        }
        if timeout.is_some_and(|t| start.elapsed() >= t) {
            return Err(now);
        }
        std::thread::sleep(every);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_queue_is_an_ended_job_and_never_a_success_without_statuses() {
        assert!(ended(None));
        assert!(ended(Some("COMPLETED")));
        assert!(ended(Some("CANCELLED+")));
        assert!(!ended(Some("RUNNING")));
        assert!(!ended(Some("PENDING")));
        assert!(!ended(Some("COMPLETING")));
        match outcome(None, &[], None, None) {
            Outcome::Failed(1, w) => assert!(w.contains("without a status from any node"), "{w}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            outcome(Some("RUNNING"), &[], None, None),
            Outcome::Running(_)
        ));
    }
}
