//! A restart's wait for its GPUs. A restarted worker fails its start-up memory check when the
//! previous run's CUDA context is not gone yet (smg-project/smg #2464; the driver frees it some
//! time after the process ends), and a member of its group that outlived the leader still holds
//! it. So before a process placed on GPUs is spawned again, its previous run's process group
//! must be empty and each of its GPUs' memory back near what it was before mcsup started
//! anything. The machine asks ([`crate::supervisor::machine::Action::AwaitRelease`]) as the process exits,
//! in parallel with its backoff; [`wait`] answers once both hold, or when the wait runs out,
//! naming what still holds the GPUs.
//!
//! NVML is read on a thread of its own, with a bound: a GPU in a bad state can hang the driver's
//! calls, and such a read must hold neither the loop nor mcsup's exit (the thread is left
//! behind, never joined). After a read that did not answer, a wait reads no more.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::{Answer, Effect, Input, Now, Task, Watcher};
use crate::domain::show_secs;
use crate::plan::Plan;
use crate::preflight::residue::{self, gib, Gpu};
use crate::preflight::tools::process_summary;
use crate::supervisor::machine::{Event, Pid};
use crate::supervisor::{signals, spawn};

/// How often the group and the memory are looked at.
const POLL: Duration = Duration::from_millis(250);
/// The most one NVML read may take.
const READ_BOUND: Duration = Duration::from_secs(10);
/// "Near its level before the run": within this much, or 1 % of the GPU when that is more.
const MIN_SLACK: u64 = 512 << 20;

/// Each GPU's memory in use before mcsup started anything, by index, or why it is not known.
pub type Baseline = Result<BTreeMap<u32, u64>, String>;

/// The release watcher: each restart's wait for its GPUs, against their memory before the run.
pub struct Release {
    /// Read before anything started, when a restart may have to wait for it.
    baseline: Option<Baseline>,
}

impl Release {
    /// Read the memory in use on the GPUs of the processes that may restart (before anything
    /// starts; nothing is read when none may).
    pub async fn read(plan: &Plan) -> Self {
        let gpus = super::restart_gpus(plan);
        if gpus.is_empty() {
            return Release { baseline: None };
        }
        let read = baseline(&gpus).await;
        match &read {
            Ok(b) => tracing::debug!(?b, "GPU memory in use before the run"),
            Err(why) => tracing::info!(
                "GPU memory before the run not read ({why}): a restart on GPUs waits for its process group only"
            ),
        }
        Release {
            baseline: Some(read),
        }
    }
}

impl Watcher for Release {
    fn on(&mut self, _plan: &Plan, input: &Input<'_>, _now: Now<'_>) -> Vec<Effect> {
        match input {
            Input::Release {
                attempt,
                pgid,
                gpus,
                within,
            } => vec![Effect::Run {
                key: None,
                task: Task::GpuRelease {
                    attempt: *attempt,
                    pgid: *pgid,
                    gpus: gpus.to_vec(),
                    baseline: self
                        .baseline
                        .clone()
                        .unwrap_or_else(|| Err("not read before the run".into())),
                    within: *within,
                },
            }],
            Input::Answer(Answer::Released { attempt, result }) => {
                vec![Effect::Feed(Event::Released {
                    attempt: *attempt,
                    result: result.clone(),
                })]
            }
            _ => Vec::new(),
        }
    }
}

/// One NVML read, on a thread of its own, within [`READ_BOUND`].
async fn read() -> Result<Vec<Gpu>, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let builder = std::thread::Builder::new().name("mcsup-nvml".into());
    signals::spawn_thread(builder, move || {
        let _ = tx.send(residue::read_nvml());
    })
    .map_err(|e| format!("cannot start a thread to read NVML: {e}"))?;
    match tokio::time::timeout(READ_BOUND, rx).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => Err("the NVML read ended without an answer".into()),
        Err(_) => Err(format!(
            "NVML did not answer within {}",
            show_secs(READ_BOUND)
        )),
    }
}

/// The memory in use on `gpus` now: taken before anything starts.
pub async fn baseline(gpus: &BTreeSet<u32>) -> Baseline {
    let seen = read().await?;
    gpus.iter()
        .map(|i| match seen.get(*i as usize) {
            Some(g) => Ok((*i, g.used())),
            None => Err(format!("NVML lists {} GPU(s), not GPU {i}", seen.len())),
        })
        .collect()
}

/// How far above its level before the run a GPU's memory may stay and count as released.
fn slack(total: u64) -> u64 {
    MIN_SLACK.max(total / 100)
}

/// The processes left in group `pgid`, described (empty when /proc cannot say).
fn members(pgid: Pid) -> Vec<String> {
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    all.flatten()
        .filter(|p| p.stat().is_ok_and(|s| s.pgrp == pgid))
        .map(|p| process_summary(&p))
        .collect()
}

/// Wait until group `pgid` is empty and the memory of `gpus` is back near `baseline`, at most
/// `within`: `Ok` says what was seen and how long it took, `Err` what still held them.
pub async fn wait(
    pgid: Pid,
    gpus: Vec<u32>,
    baseline: Baseline,
    within: Duration,
) -> Result<String, String> {
    let start = Instant::now();
    let mut unread = baseline.as_ref().err().cloned();
    let which = crate::domain::gpu_list(&gpus);
    loop {
        let group_left = spawn::signal_group(pgid, None).unwrap_or(false);
        // (GPU, in use, before, its holders) of each GPU still above its level; and each GPU's
        // use as last read.
        let mut over = Vec::new();
        let mut now_used = Vec::new();
        if unread.is_none() {
            match read().await {
                Ok(seen) => {
                    for i in &gpus {
                        let before = baseline.as_ref().ok().and_then(|b| b.get(i)).copied();
                        let (Some(g), Some(before)) = (seen.get(*i as usize), before) else {
                            unread = Some(format!("NVML lists {} GPU(s), not GPU {i}", seen.len()));
                            break;
                        };
                        now_used.push(format!(
                            "GPU {i} uses {} ({} before the run)",
                            gib(g.used()),
                            gib(before)
                        ));
                        if g.used() > before.saturating_add(slack(g.total)) {
                            over.push((*i, g.used(), before, residue::nvml_holders(g)));
                        }
                    }
                }
                Err(why) => unread = Some(why),
            }
        }
        let took = start.elapsed();
        if !group_left && (over.is_empty() || unread.is_some()) {
            let memory = match &unread {
                None => now_used.join(", "),
                Some(why) => format!("GPU memory not checked ({why})"),
            };
            return Ok(format!(
                "GPU {which} released {} after the previous run exited: its process group is empty; {memory}",
                show_secs(round(took))
            ));
        }
        if took >= within {
            let mut held = Vec::new();
            if group_left {
                let left = members(pgid);
                held.push(if left.is_empty() {
                    format!("its process group {pgid} still has processes")
                } else {
                    format!("its process group still has {}", left.join("; "))
                });
            }
            for (i, used, before, holders) in over {
                let by = if holders.is_empty() {
                    "by no process NVML lists: a context the driver has not freed yet".to_string()
                } else {
                    holders.join("; ")
                };
                held.push(format!(
                    "GPU {i} uses {}, {} before the run (held {by})",
                    gib(used),
                    gib(before)
                ));
            }
            return Err(format!(
                "GPU {which} not released {} after the previous run exited: {}; starting anyway (the engine may fail its start-up memory check)",
                show_secs(round(took)),
                held.join("; ")
            ));
        }
        tokio::time::sleep(POLL.min(within - took)).await;
    }
}

/// To a tenth of a second, as the events say it.
fn round(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64 / 100 * 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_is_half_a_gib_or_one_percent() {
        assert_eq!(slack(16 << 30), 512 << 20);
        assert_eq!(slack(80 << 30), (80u64 << 30) / 100);
    }
}
