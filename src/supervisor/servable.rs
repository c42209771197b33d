//! The job's servable moment and what its frontend sees afterwards.
//!
//! A frontend whose readiness is a servable probe (the job's public endpoint: nginx, or the only
//! frontend) makes the job servable when it becomes ready: the frontend listed every expected
//! worker and a one-token completion through it answered. From then on the frontend's health
//! answer is read every [`WATCH_EVERY`]: a worker it no longer lists is an event
//! (`workers-lost`), not a teardown, and so is its return (`workers-back`); the status file
//! carries the current count. Pure parts ([`judge`], [`describe`]) apart from the poller
//! ([`watch`]).

use std::time::Duration;

pub use crate::engine::frontend::describe;
use crate::engine::frontend::{Expected, Seen};
use crate::plan::ServableProbe;
use crate::runfiles::ServableState;

use super::probes;

/// Between two reads of the frontend's health answer once the job is servable.
pub const WATCH_EVERY: Duration = Duration::from_secs(2);
/// One read may take this long.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The state a health read means.
pub fn judge(expected: &Expected, read: &Result<Seen, String>) -> ServableState {
    match read {
        Ok(seen) if seen.covers(expected) => ServableState::Servable,
        Ok(_) => ServableState::Degraded,
        Err(_) => ServableState::Unreachable,
    }
}

/// Read the frontend's health answer every [`WATCH_EVERY`] and hand each result to `send`, until
/// it returns false (the receiver is gone) or the task is aborted.
pub async fn watch(probe: ServableProbe, send: impl Fn(Result<Seen, String>) -> bool) {
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let read =
            probes::frontend_seen(probe.host.clone(), probe.port, probe.frontend, READ_TIMEOUT)
                .await;
        if !send(read) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_judged_against_the_expected_counts() {
        let e = Expected {
            prefill: 1,
            decode: 2,
        };
        let ok = Ok(Seen {
            prefill: 1,
            decode: 2,
        });
        let less = Ok(Seen {
            prefill: 1,
            decode: 1,
        });
        assert_eq!(judge(&e, &ok), ServableState::Servable);
        assert_eq!(judge(&e, &less), ServableState::Degraded);
        assert_eq!(
            judge(&e, &Err("refused".into())),
            ServableState::Unreachable
        );
        assert_eq!(
            describe(&e, less.as_ref().unwrap()),
            "2/3 workers (1 of 1 prefill, 1 of 2 decode)"
        );
        let agg = Expected {
            prefill: 0,
            decode: 2,
        };
        assert_eq!(
            describe(
                &agg,
                &Seen {
                    prefill: 0,
                    decode: 3
                }
            ),
            "2/2 workers"
        );
    }
}
