//! Slurm's kill deadline: `KillWait` (from `scontrol show config`) against mcsup's ordered
//! teardown.
//!
//! On `scancel`, a time limit or a failed step, slurmstepd sends the step's processes SIGTERM
//! and, `KillWait` seconds later, SIGKILL to every one of them (tests/slurm/FINDINGS.md). mcsup's
//! teardown deadline (`mcsup.shutdown.deadline_seconds`, default 25 s) must end before that, with
//! [`KILL_MARGIN`] left for its own SIGKILL of the stragglers and the reaping: otherwise Slurm
//! kills the stores and the master mid-teardown, and the job ends as "cancelled by KillWait"
//! instead of cleanly. The stop graces of the tiers add up to the worst case, which the deadline
//! cuts; that sum is shown, not enforced: a store only needs its long grace when the master is
//! already gone, and then the master's tier costs nothing.

use std::time::Duration;

use super::report::{Check, Report};
use crate::domain::show_secs as secs;
use crate::plan::{Plan, TeardownTier};

pub use crate::slurm::{DEFAULT_KILL_WAIT, KILL_MARGIN};

/// What the preflight knows about `KillWait`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillWait {
    /// Read from `scontrol show config`.
    Read(Duration),
    /// In a Slurm job, but `scontrol` could not say (why).
    Unknown(String),
    /// Not in a Slurm job (`SLURM_JOB_ID` unset).
    NotInSlurm,
}

/// `KillWait` from `scontrol show config` output (`KillWait                = 30 sec`).
pub fn parse_kill_wait(text: &str) -> Option<Duration> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        if key.trim() != "KillWait" {
            return None;
        }
        let number = value.split_whitespace().next()?;
        number.parse::<u64>().ok().map(Duration::from_secs)
    })
}

/// Ask the local Slurm: `scontrol show config`, bounded like every preflight helper.
pub fn read_kill_wait(in_slurm: bool, path_var: Option<&str>, wait: Duration) -> KillWait {
    if !in_slurm {
        return KillWait::NotInSlurm;
    }
    let Some(scontrol) = super::tools::find_program("scontrol", path_var, None) else {
        return KillWait::Unknown("`scontrol` is not on PATH".into());
    };
    let argv = [
        scontrol.display().to_string(),
        "show".into(),
        "config".into(),
    ];
    match super::tools::run_bounded(&argv, &[], wait) {
        None => KillWait::Unknown(format!(
            "`scontrol show config` did not answer in {} s",
            wait.as_secs_f64()
        )),
        Some(out) if !out.success => KillWait::Unknown(format!(
            "`scontrol show config` failed: {}",
            out.text.lines().next().unwrap_or("").trim()
        )),
        Some(out) => match parse_kill_wait(&out.text) {
            Some(d) => KillWait::Read(d),
            None => KillWait::Unknown("`scontrol show config` printed no KillWait".into()),
        },
    }
}

/// "worst case, every process using its whole stop grace: 10 s + 20 s + 5 s = 35 s; ..." when
/// there is more than one tier or the sum passes the deadline; `None` otherwise.
pub fn worst_case_text(tiers: &[TeardownTier], deadline: Duration) -> Option<String> {
    if tiers.is_empty() {
        return None;
    }
    let total: Duration = tiers.iter().map(|t| t.longest_grace).sum();
    let parts: Vec<String> = tiers.iter().map(|t| secs(t.longest_grace)).collect();
    let sum = if parts.len() > 1 {
        format!("{} = {}", parts.join(" + "), secs(total))
    } else {
        secs(total)
    };
    let cut = if total > deadline {
        format!(
            "; what still runs at the {} deadline is SIGKILLed",
            secs(deadline)
        )
    } else {
        String::new()
    };
    Some(format!(
        "worst case, every process using its whole stop grace: {sum}{cut}"
    ))
}

/// The latest deadline that fits `kill_wait`, or `None` when not even a zero deadline does.
fn fitting_deadline(kill_wait: Duration) -> Option<Duration> {
    kill_wait.checked_sub(KILL_MARGIN).filter(|d| !d.is_zero())
}

/// Does the teardown deadline fit Slurm's `KillWait`?
pub fn check(plan: &Plan, kill_wait: &KillWait, report: &mut Report) {
    let deadline = plan.shutdown.deadline;
    let (kw, source) = match kill_wait {
        KillWait::Read(d) => {
            report.facts.kill_wait = Some(secs(*d));
            (*d, format!("Slurm's KillWait {}", secs(*d)))
        }
        KillWait::Unknown(why) => {
            report.facts.kill_wait = Some(format!("unknown: {why}"));
            (
                DEFAULT_KILL_WAIT,
                format!(
                    "Slurm's default KillWait {} (assumed: {why})",
                    secs(DEFAULT_KILL_WAIT)
                ),
            )
        }
        KillWait::NotInSlurm => {
            report.push(Check::skip(
                "slurm",
                "kill wait",
                format!(
                    "not in a Slurm job: KillWait not read (teardown deadline {})",
                    secs(deadline)
                ),
            ));
            return;
        }
    };
    let worst = worst_case_text(&crate::plan::teardown_tiers(&plan.processes), deadline)
        .map(|w| format!("; {w}"))
        .unwrap_or_default();
    if deadline + KILL_MARGIN <= kw {
        report.push(Check::ok(
            "slurm",
            "kill wait",
            format!(
                "teardown deadline {} (+{} to kill and reap) fits {source}{worst}",
                secs(deadline),
                secs(KILL_MARGIN)
            ),
        ));
        return;
    }
    let fix = match fitting_deadline(kw) {
        Some(d) => format!(
            "set mcsup.shutdown.deadline_seconds to {} or less, or ask the cluster admins for KillWait >= {} in slurm.conf",
            d.as_secs(),
            (deadline + KILL_MARGIN).as_secs()
        ),
        None => format!(
            "KillWait {} leaves no time for an ordered teardown: ask the cluster admins for KillWait >= {} in slurm.conf",
            secs(kw),
            (deadline + KILL_MARGIN).as_secs()
        ),
    };
    report.push(Check::warn(
        "slurm",
        "kill wait",
        format!(
            "teardown deadline {} (+{} to kill and reap) does not fit {source}: on cancel, Slurm SIGKILLs every process of the step {} after its SIGTERM, in the middle of mcsup's teardown (stores and master killed, not stopped){worst}",
            secs(deadline),
            secs(KILL_MARGIN),
            secs(kw)
        ),
        fix,
    ));
}

/// Does each worker's engine stop within its grace, and each grace within the deadline? The
/// plan's warnings, restated where the preflight report shows them before anything starts.
pub fn check_stop_budgets(plan: &Plan, report: &mut Report) {
    let budgets: Vec<_> = plan
        .processes
        .iter()
        .filter_map(|p| p.stop.budget.as_ref().map(|b| (p, b)))
        .collect();
    if budgets.is_empty() {
        return;
    }
    let found = crate::plan::lints::stop_budget_findings(&plan.processes, plan.shutdown.deadline);
    if found.is_empty() {
        let worst = budgets
            .iter()
            .max_by_key(|(_, b)| b.total)
            .map(|(p, b)| {
                format!(
                    "; longest: {} ({}, grace {})",
                    p.name,
                    b.engine_line(),
                    secs(p.stop.grace)
                )
            })
            .unwrap_or_default();
        report.push(Check::ok(
            "slurm",
            "stop budgets",
            format!(
                "{} worker(s) stop within their grace (engine budget + {} margin){worst}",
                budgets.len(),
                secs(crate::engine::stop::MARGIN)
            ),
        ));
        return;
    }
    for (what, fix) in found {
        report.push(Check::warn("slurm", "stop budgets", what, fix));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines around `KillWait` as `scontrol show config` of Debian's Slurm 22.05 prints them.
    const SCONTROL: &str = "JobSubmitPlugins        = (null)\nKillOnBadExit           = 0\nKillWait                = 5 sec\nLaunchParameters        = (null)\n";

    #[test]
    fn kill_wait_is_read_from_its_own_line() {
        assert_eq!(parse_kill_wait(SCONTROL), Some(Duration::from_secs(5)));
        assert_eq!(
            parse_kill_wait("KillOnBadExit = 0\nKillWait = 30 sec\n"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(parse_kill_wait("KillOnBadExit = 0\n"), None);
        assert_eq!(parse_kill_wait("KillWait = soon\n"), None);
    }

    fn tier(tier: u8, grace_s: u64) -> TeardownTier {
        TeardownTier {
            tier,
            names: vec![format!("t{tier}")],
            longest_grace: Duration::from_secs(grace_s),
        }
    }

    #[test]
    fn worst_case_sums_the_tiers_and_says_when_the_deadline_cuts_it() {
        let t = [tier(1, 10), tier(2, 20), tier(3, 5)];
        assert_eq!(
            worst_case_text(&t, Duration::from_secs(25)).unwrap(),
            "worst case, every process using its whole stop grace: 10 s + 20 s + 5 s = 35 s; what still runs at the 25 s deadline is SIGKILLed"
        );
        assert_eq!(
            worst_case_text(&t[..1], Duration::from_secs(25)).unwrap(),
            "worst case, every process using its whole stop grace: 10 s"
        );
        assert_eq!(worst_case_text(&[], Duration::from_secs(25)), None);
    }

    #[test]
    fn a_kill_wait_that_leaves_nothing_names_the_slurm_fix_only() {
        assert_eq!(fitting_deadline(Duration::from_secs(2)), None);
        assert_eq!(
            fitting_deadline(Duration::from_secs(5)),
            Some(Duration::from_secs(3))
        );
    }
}
