//! Precise waits for the open-loop dispatcher thread.
//!
//! tokio's timer wheel has 1 ms granularity, which alone would put up to a
//! millisecond of lag on every send. The dispatcher therefore runs on its own
//! OS thread: it sleeps (with the kernel's timer slack lowered to 1 µs) until
//! shortly before the deadline and spins the rest of the way.

use std::time::{Duration, Instant};

/// How long before a deadline to stop sleeping and start spinning. Covers the
/// usual nanosleep overshoot on a loaded machine; measured in bench/.
const SPIN_WINDOW: Duration = Duration::from_micros(150);

/// Lowers this thread's timer slack so `nanosleep` wakes within microseconds
/// instead of the default 50 µs. Best effort: ignored where unsupported.
pub fn tighten_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and only affects this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Blocks the current OS thread until `deadline`, returning early if
/// `stop()` becomes true (checked at least every 50 ms).
pub fn wait_until(deadline: Instant, stop: impl Fn() -> bool) -> bool {
    loop {
        if stop() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        let left = deadline - now;
        if left > SPIN_WINDOW {
            std::thread::sleep((left - SPIN_WINDOW).min(Duration::from_millis(50)));
        } else {
            while Instant::now() < deadline {
                std::hint::spin_loop();
            }
            return true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_returns_before_the_deadline() {
        tighten_timer_slack();
        for _ in 0..20 {
            let deadline = Instant::now() + Duration::from_micros(700);
            assert!(wait_until(deadline, || false));
            assert!(Instant::now() >= deadline);
        }
    }

    #[test]
    fn stops_when_asked() {
        let deadline = Instant::now() + Duration::from_secs(3600);
        assert!(!wait_until(deadline, || true));
    }
}
