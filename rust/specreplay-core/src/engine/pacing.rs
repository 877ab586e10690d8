//! Precise waits for the pacing thread.
//!
//! tokio's timer wheel has 1 ms granularity, which alone would put up to a
//! millisecond of lag on every send. The pacing thread therefore is an OS
//! thread of its own: it sleeps (with the kernel's timer slack lowered to
//! 1 µs) until shortly before the deadline and spins the rest of the way. It
//! can be woken early (`Doorbell`) when an earlier deadline comes up.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long before a deadline to stop sleeping and start spinning. Covers the
/// usual nanosleep overshoot on a loaded machine; measured in bench/.
fn spin_window() -> Duration {
    static WINDOW: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *WINDOW.get_or_init(|| {
        let us = experiment("SPECREPLAY_SPIN_US").and_then(|v| v.parse::<u64>().ok());
        Duration::from_micros(us.unwrap_or(150).min(1_000))
    })
}

/// TEMPORARY (issue 27's A/B bench): a pacing experiment's setting from the
/// environment, read once per name.
pub fn experiment(name: &'static str) -> Option<String> {
    static SET: std::sync::OnceLock<Vec<(&'static str, String)>> = std::sync::OnceLock::new();
    SET.get_or_init(|| {
        ["SPECREPLAY_SPIN_US", "SPECREPLAY_RING_EVERY_FINISH"]
            .into_iter()
            .filter_map(|n| {
                std::env::var(n)
                    .ok()
                    .filter(|v| !v.is_empty() && v != "0")
                    .map(|v| (n, v))
            })
            .collect()
    })
    .iter()
    .find(|(n, _)| *n == name)
    .map(|(_, v)| v.clone())
}

/// Lowers this thread's timer slack so `nanosleep` wakes within microseconds
/// instead of the default 50 µs. Best effort: ignored where unsupported.
pub fn tighten_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and only affects this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// How long before its due time the pacing thread starts an open-loop
/// unit's task, which then waits out the rest on its tokio worker
/// (`until`), so the time a parked worker takes to wake up (tens of µs on
/// an idle machine, far more on a loaded one) is not in the send lag. Zero
/// (the default): the task is started at its due time. Set from the
/// environment (`SPECREPLAY_SEND_LEAD_US`) for the A/B bench
/// (`bench/send_lag_profile.py`, docs/benchmarks.md) until it is measured
/// on a quiet machine.
pub fn send_lead() -> Duration {
    std::env::var("SPECREPLAY_SEND_LEAD_US")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|us| Duration::from_micros(us.min(10_000)))
        .unwrap_or(Duration::ZERO)
}

/// Waits on the current tokio worker until `at`, yielding to the worker's
/// other tasks meanwhile (a busy worker loses nothing; an idle one stays
/// awake, at the cost of up to the lead's CPU per unit).
pub async fn until(at: Instant) {
    while Instant::now() < at {
        tokio::task::yield_now().await;
    }
}

/// The engine's threads that may ask to run above the process's priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The pacing thread: asleep but for the moments it sends. Raised by 10
    /// nice steps with `SPECREPLAY_THREAD_BOOST=pacer` or `all`.
    Pacer,
    /// The engine's tokio workers (they take the send stamps). Raised by 5
    /// steps with `SPECREPLAY_THREAD_BOOST=all`.
    Worker,
}

/// Raises the calling thread's priority above the process's, by its role's
/// nice steps, best effort (Linux only). On a shared 2-core machine a woken
/// thread otherwise waits for a CPU behind every other runnable thread of the
/// machine: that run-queue wait, not the timer, made the pacing thread's
/// share of the send lag (`bench/send_lag_profile.py`). Where lowering a
/// niceness is not allowed (not root, no `CAP_SYS_NICE`, `RLIMIT_NICE`), the
/// thread keeps the process's. Off unless asked: `SPECREPLAY_THREAD_BOOST`
/// = `pacer` (the pacing thread), `all` (the workers too). Measured at load
/// 5–10 it helped in one run and hurt in the next (a boosted pacer spinning
/// out its last 150 µs takes the CPU from a single worker; boosted workers
/// take it from the Python feeder), so it stays an experiment until a quiet
/// machine says otherwise (docs/benchmarks.md). Returns whether the
/// priority was raised.
pub fn boost_this_thread(role: Role) -> bool {
    let setting = std::env::var("SPECREPLAY_THREAD_BOOST").unwrap_or_default();
    let steps = match (setting.trim(), role) {
        ("pacer" | "all", Role::Pacer) => 10,
        ("all", Role::Worker) => 5,
        _ => return false,
    };
    raise_nice(steps)
}

fn raise_nice(steps: i32) -> bool {
    #[cfg(target_os = "linux")]
    // SAFETY: getpriority/setpriority take plain integers; a thread id as
    // PRIO_PROCESS's `who` changes that thread only (Linux semantics).
    unsafe {
        let process = libc::getpriority(libc::PRIO_PROCESS, 0);
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        let target = (process - steps).max(-20);
        libc::setpriority(libc::PRIO_PROCESS, tid, target) == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = steps;
        false
    }
}

/// Longest sleep between two looks at `stop()`.
const STOP_POLL: Duration = Duration::from_millis(50);

/// Rung by other threads when what the pacing thread waits for may have
/// changed (a unit was fed, a turn became due).
#[derive(Debug, Default)]
pub struct Doorbell {
    rung: Mutex<bool>,
    bell: Condvar,
}

impl Doorbell {
    pub fn ring(&self) {
        *self.rung.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.bell.notify_one();
    }

    /// Sleeps up to `timeout` or until rung (a ring before the call counts);
    /// returns whether it was rung, and clears it.
    fn wait(&self, timeout: Duration) -> bool {
        let rung = self.rung.lock().unwrap_or_else(|p| p.into_inner());
        let (mut rung, _) = self
            .bell
            .wait_timeout_while(rung, timeout, |rung| !*rung)
            .unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *rung)
    }
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The deadline has passed.
    Due,
    /// The doorbell rang first.
    Rung,
    /// `stop()` turned true.
    Stopped,
}

/// Blocks the current OS thread until `deadline` (None: until rung or
/// stopped), returning early when `bell` rings or `stop()` becomes true
/// (checked at least every 50 ms).
pub fn wait_until(deadline: Option<Instant>, bell: &Doorbell, stop: impl Fn() -> bool) -> Waited {
    loop {
        if stop() {
            return Waited::Stopped;
        }
        let now = Instant::now();
        let left = match deadline {
            Some(d) if now >= d => return Waited::Due,
            Some(d) => d - now,
            None => STOP_POLL + spin_window(),
        };
        if left > spin_window() {
            if bell.wait((left - spin_window()).min(STOP_POLL)) {
                return Waited::Rung;
            }
        } else if let Some(d) = deadline {
            while Instant::now() < d {
                std::hint::spin_loop();
            }
            return Waited::Due;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_returns_before_the_deadline() {
        tighten_timer_slack();
        let bell = Doorbell::default();
        for _ in 0..20 {
            let deadline = Instant::now() + Duration::from_micros(700);
            assert_eq!(wait_until(Some(deadline), &bell, || false), Waited::Due);
            assert!(Instant::now() >= deadline);
        }
    }

    #[tokio::test]
    async fn until_never_returns_early() {
        for us in [0u64, 50, 300] {
            let at = Instant::now() + Duration::from_micros(us);
            until(at).await;
            assert!(Instant::now() >= at);
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_boost_that_takes_raises_only_the_calling_thread() {
        // SAFETY: plain integer queries of this thread's and another's nice.
        let nice_of = |tid: libc::id_t| unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) };
        let before = nice_of(0);
        let (took, boosted) = std::thread::spawn(move || {
            let took = raise_nice(3);
            (took, nice_of(0))
        })
        .join()
        .unwrap();
        if took {
            assert_eq!(boosted, (before - 3).max(-20));
        } else {
            assert_eq!(boosted, before);
        }
        assert_eq!(nice_of(0), before, "the calling thread only");
    }

    #[test]
    fn stops_when_asked() {
        let deadline = Instant::now() + Duration::from_secs(3600);
        let bell = Doorbell::default();
        assert_eq!(wait_until(Some(deadline), &bell, || true), Waited::Stopped);
        assert_eq!(wait_until(None, &bell, || true), Waited::Stopped);
    }

    #[test]
    fn a_ring_wakes_the_wait_once() {
        let bell = std::sync::Arc::new(Doorbell::default());
        let ringer = bell.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            ringer.ring();
        });
        let deadline = Instant::now() + Duration::from_secs(3600);
        assert_eq!(wait_until(Some(deadline), &bell, || false), Waited::Rung);
        t.join().unwrap();
        // Cleared: the next wait runs to its deadline.
        let soon = Instant::now() + Duration::from_millis(2);
        assert_eq!(wait_until(Some(soon), &bell, || false), Waited::Due);
        // A ring before the wait counts.
        bell.ring();
        assert_eq!(wait_until(None, &bell, || false), Waited::Rung);
    }
}
