//! The event loop's deadline timer, kept to the microsecond.
//!
//! tokio's timer wheel has a resolution of one millisecond and rounds every sleep up to the next
//! tick, so the 1 ms probe interval of a readiness wait's first seconds
//! ([`super::machine::FAST_WINDOW`]) became 1 to 2 ms, and every stage of a gated chain lost
//! about a millisecond to it. This timer is a `timerfd` (CLOCK_MONOTONIC, the clock of
//! [`Instant`]) registered with the runtime's reactor: one fd, re-armed only when the machine's
//! next deadline changes, no thread.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::Instant;

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// `AsyncFd` needs `AsRawFd`; nix's `TimerFd` offers `AsFd`.
struct Fd(TimerFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// One deadline at a time: [`DeadlineTimer::wait`] returns when it has passed.
pub struct DeadlineTimer {
    fd: AsyncFd<Fd>,
    /// The deadline the timerfd is armed for, if any.
    armed: Option<Instant>,
}

impl DeadlineTimer {
    /// A disarmed timer, registered with the current runtime.
    pub fn new() -> io::Result<Self> {
        let fd = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        // SAFETY: `Fd` owns the timerfd (an `OwnedFd` inside nix's `TimerFd`) for as long as the
        // `AsyncFd` lives and always returns that same fd.
        let fd = unsafe { AsyncFd::register_with_interest(Fd(fd), Interest::READABLE) }?;
        Ok(DeadlineTimer { fd, armed: None })
    }

    /// Wait until `deadline` (forever for `None`). Cancel-safe: dropped before it fires (another
    /// event woke the loop), the timer stays armed, and the next call with the same deadline
    /// waits for the same expiry; a different deadline re-arms it.
    pub async fn wait(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        let Some(deadline) = deadline else {
            return std::future::pending().await;
        };
        if self.armed != Some(deadline) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.armed = None;
                return Ok(());
            }
            // A zero expiration would disarm it: `left` is at least 1 ns here.
            self.fd
                .get_ref()
                .0
                .set(
                    Expiration::OneShot(TimeSpec::from_duration(left)),
                    TimerSetTimeFlags::empty(),
                )
                .map_err(io::Error::from)?;
            self.armed = Some(deadline);
        }
        loop {
            let mut ready = self.fd.readable().await?;
            let mut ticks = [0u8; 8];
            match ready.try_io(|fd| {
                nix::unistd::read(fd.get_ref().0.as_fd(), &mut ticks).map_err(io::Error::from)
            }) {
                Ok(Ok(_)) => {
                    self.armed = None;
                    return Ok(());
                }
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::supervisor::test_runtime as rt;

    #[test]
    fn it_fires_at_the_deadline_not_at_the_next_millisecond() {
        rt().block_on(async {
            let mut t = DeadlineTimer::new().unwrap();
            for us in [200u64, 1_000, 1_300] {
                let start = Instant::now();
                t.wait(Some(start + Duration::from_micros(us)))
                    .await
                    .unwrap();
                let took = start.elapsed();
                assert!(
                    took >= Duration::from_micros(us),
                    "{us} µs: woke early, {took:?}"
                );
            }
            // A deadline already passed returns at once; None never does.
            t.wait(Some(Instant::now() - Duration::from_millis(1)))
                .await
                .unwrap();
            let never = tokio::time::timeout(Duration::from_millis(20), t.wait(None)).await;
            assert!(never.is_err());
        });
    }

    #[test]
    fn a_wait_dropped_before_expiry_keeps_the_deadline() {
        rt().block_on(async {
            let mut t = DeadlineTimer::new().unwrap();
            let deadline = Instant::now() + Duration::from_millis(30);
            let early =
                tokio::time::timeout(Duration::from_millis(5), t.wait(Some(deadline))).await;
            assert!(early.is_err(), "fired before its deadline");
            t.wait(Some(deadline)).await.unwrap();
            assert!(Instant::now() >= deadline);
            // Re-armed for an earlier deadline than the one pending: the earlier one wins.
            let far = Instant::now() + Duration::from_secs(60);
            let _ = tokio::time::timeout(Duration::from_millis(1), t.wait(Some(far))).await;
            let near = Instant::now() + Duration::from_millis(2);
            tokio::time::timeout(Duration::from_secs(5), t.wait(Some(near)))
                .await
                .expect("the nearer deadline was not kept")
                .unwrap();
        });
    }
}
