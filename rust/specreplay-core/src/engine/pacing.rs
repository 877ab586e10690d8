//! Precise waits for the pacing thread.
//!
//! tokio's timer wheel has 1 ms granularity, which alone would put up to a
//! millisecond of lag on every send. The pacing thread therefore is an OS
//! thread of its own: it sleeps (with the kernel's timer slack lowered to
//! 1 µs) until shortly before the deadline and spins the rest of the way. It
//! can be woken early (`Doorbell`) when an earlier deadline comes up. (std's
//! `Condvar::wait_timeout` is a futex wait to an absolute CLOCK_MONOTONIC
//! time in ns: no rounding; what overshoots is the wake-up.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long before a deadline to stop sleeping and start spinning, at
/// least. Under `SCHED_FIFO` (`priority`) 99 % of wake-ups here came within
/// 64–128 µs of the sleep's end at thousands of sends a second; a longer
/// window there only burns CPU the workers and the server need (150 µs:
/// 0.5–2 s of a core per 3 s point at 2,000–5,000/s), and one that follows
/// the overshoots seen grew to a millisecond on a loaded box and spun most
/// of a core (docs/benchmarks.md, issue 27).
const SPIN_WINDOW: Duration = Duration::from_micros(50);

/// The longest window (`spin_window`). A sleep of a second ends 64–128 µs
/// late on this VM (an idle vCPU's wake-up: `bench/send_lag_profile.py`'s
/// overshoot buckets at a few sends a second), later than the floor covers.
const SPIN_WINDOW_MAX: Duration = Duration::from_micros(250);

/// The spin window for a wait of `gap` in all: 1/50 of it between the floor
/// and the cap, so that spinning never takes more than 2 % of the time
/// between two sends beyond the floor's, and the long waits of a low rate,
/// whose wake-ups overshoot most, end spinning instead of late.
fn spin_window(gap: Duration) -> Duration {
    (gap / 50).clamp(SPIN_WINDOW, SPIN_WINDOW_MAX)
}

/// How long before a unit's due time the pacing thread hands it to a
/// worker, for a wait of `gap`: nothing at high rates, where a worker is
/// awake (16–64 µs from the spawn to the task running, typically); the spin
/// window at low rates, where a parked worker on this VM took 64–256 µs to
/// wake and the task then spins until the due time (`spin_until`) on a
/// worker that is already running. Bounded like the window: at most 2 % of
/// the time between two sends.
pub fn spawn_lead(gap: Duration) -> Duration {
    let window = spin_window(gap);
    if window > SPIN_WINDOW {
        window
    } else {
        Duration::ZERO
    }
}

/// Spins until `at` (returns at once when it has passed): the last
/// microseconds of an early hand-over, on the worker that runs the send.
pub fn spin_until(at: Instant) {
    while Instant::now() < at {
        std::hint::spin_loop();
    }
}

/// What the waits of one thread cost: wake-up overshoots (log2 µs buckets)
/// and time spent spinning (read by bench/send_lag_profile.py), and when the
/// thread was held up: each wait that ended at least `HELD_MIN` later than
/// planned, as the span it lost (`checks_load.machine_hold` tells a
/// real-time pacer held up by the machine from a client that fell behind).
#[derive(Debug, Clone, Default)]
pub struct WakeStats {
    pub sleeps: u64,
    pub late_buckets: [u64; 16],
    pub late_max_us: u64,
    pub spun: Duration,
    /// (planned end, actual end) of each wait held up by `HELD_MIN` or more,
    /// the first `HELD_KEPT`; `held_dropped` counts the rest.
    pub held: Vec<(Instant, Instant)>,
    pub held_dropped: u64,
}

/// A wait that ends this much later than planned was held up: the pacer's
/// own wake-ups end within 128 µs at p99 on this VM, and the send lag's
/// tightest target is 200 µs.
pub const HELD_MIN: Duration = Duration::from_micros(250);
/// At most this many held-up spans are kept per point (a machine that holds
/// a pacer up more often than that is reported by the count).
pub const HELD_KEPT: usize = 1024;

/// The log2 µs bucket of a duration: [0], [1], [2, 4), … [2^14, ∞).
fn log2_bucket(d: Duration) -> usize {
    (64 - (d.as_micros() as u64).leading_zeros() as usize).min(15)
}

impl WakeStats {
    fn add(&mut self, late: Duration) {
        self.sleeps += 1;
        self.late_max_us = self.late_max_us.max(late.as_micros() as u64);
        self.late_buckets[log2_bucket(late)] += 1;
    }

    /// Notes a wait planned to end at `planned` that ended at `ended`, when
    /// it was held up (`HELD_MIN`).
    pub(crate) fn ended(&mut self, planned: Instant, ended: Instant) {
        if ended.saturating_duration_since(planned) < HELD_MIN {
            return;
        }
        if self.held.len() < HELD_KEPT {
            self.held.push((planned, ended));
        } else {
            self.held_dropped += 1;
        }
    }

    /// The upper edge (µs) of the log2 bucket holding the 99th percentile of
    /// the wake-up overshoots; None before the first sleep.
    pub fn late_p99_under_us(&self) -> Option<u64> {
        let mut below = 0;
        for (k, count) in self.late_buckets.iter().enumerate() {
            below += count;
            if below > 0 && below * 100 >= self.sleeps * 99 {
                return Some(1 << k);
            }
        }
        None
    }
}

/// Where a send's lag goes after the pacer's wake-up, for
/// bench/send_lag_profile.py (SPECREPLAY_PACER_STATS): from the due time to
/// the pacer's hand-over (`runtime.spawn`), and from the hand-over to the
/// unit's task first running on a worker. log2 µs buckets; shared by the
/// workers, so atomics.
#[derive(Debug, Default)]
pub struct HandoverStats {
    pub due_to_spawn: [AtomicU64; 16],
    pub spawn_to_run: [AtomicU64; 16],
    pub spawn_to_run_max_us: AtomicU64,
}

impl HandoverStats {
    pub fn spawned(&self, late: Duration) {
        self.due_to_spawn[log2_bucket(late)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn ran(&self, waited: Duration) {
        self.spawn_to_run[log2_bucket(waited)].fetch_add(1, Ordering::Relaxed);
        self.spawn_to_run_max_us
            .fetch_max(waited.as_micros() as u64, Ordering::Relaxed);
    }

    /// `[c0,c1,…]`: a JSON list with no spaces (one `key=value` field).
    pub fn counts(buckets: &[AtomicU64; 16]) -> String {
        let counts: Vec<String> = buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed).to_string())
            .collect();
        format!("[{}]", counts.join(","))
    }
}

impl WakeStats {
    /// [`wait_until`], counting each sleep's overshoot and each spin.
    pub fn wait_until(
        &mut self,
        deadline: Option<Instant>,
        bell: &Doorbell,
        stop: impl Fn() -> bool,
    ) -> Waited {
        let window = deadline.map_or(SPIN_WINDOW, |d| {
            spin_window(d.saturating_duration_since(Instant::now()))
        });
        loop {
            if stop() {
                return Waited::Stopped;
            }
            let now = Instant::now();
            let left = match deadline {
                Some(d) if now >= d => return Waited::Due,
                Some(d) => d - now,
                None => STOP_POLL + window,
            };
            if left > window {
                let nap = (left - window).min(STOP_POLL);
                if bell.wait(nap) {
                    return Waited::Rung;
                }
                let woke = Instant::now();
                self.add(woke.saturating_duration_since(now + nap));
                self.ended(now + nap, woke);
            } else if let Some(d) = deadline {
                while Instant::now() < d {
                    std::hint::spin_loop();
                }
                let done = Instant::now();
                self.spun += done - now;
                self.ended(d, done);
                return Waited::Due;
            }
        }
    }
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
    WakeStats::default().wait_until(deadline, bell, stop)
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

    #[test]
    fn overshoots_fall_in_log2_buckets() {
        let mut st = WakeStats::default();
        for us in [0, 1, 3, 64, 127, 900, 1 << 20] {
            st.add(Duration::from_micros(us));
        }
        // [0], [1], [2, 4), [64, 128) twice, [512, 1024), the last bucket.
        let mut want = [0u64; 16];
        want[0] = 1;
        want[1] = 1;
        want[2] = 1;
        want[7] = 2;
        want[10] = 1;
        want[15] = 1;
        assert_eq!(st.late_buckets, want);
        assert_eq!((st.sleeps, st.late_max_us), (7, 1 << 20));
        // 7 sleeps: the 99th percentile is the largest, in the last bucket.
        assert_eq!(st.late_p99_under_us(), Some(1 << 15));
    }

    #[test]
    fn the_p99_overshoot_is_the_bucket_holding_it() {
        let mut st = WakeStats::default();
        assert_eq!(st.late_p99_under_us(), None);
        for _ in 0..990 {
            st.add(Duration::from_micros(50)); // [32, 64)
        }
        for _ in 0..10 {
            st.add(Duration::from_micros(5000)); // [4096, 8192)
        }
        assert_eq!(st.late_p99_under_us(), Some(64));
        st.add(Duration::from_micros(5000));
        assert_eq!(st.late_p99_under_us(), Some(8192));
    }

    #[test]
    fn only_waits_held_up_by_the_threshold_are_kept_and_the_rest_counted() {
        let mut st = WakeStats::default();
        let t0 = Instant::now();
        st.ended(t0, t0 + HELD_MIN - Duration::from_micros(1));
        assert!(st.held.is_empty());
        st.ended(t0, t0 + HELD_MIN);
        assert_eq!(st.held, vec![(t0, t0 + HELD_MIN)]);
        for _ in 0..HELD_KEPT + 5 {
            st.ended(t0, t0 + Duration::from_millis(3));
        }
        assert_eq!((st.held.len(), st.held_dropped), (HELD_KEPT, 6));
    }

    #[test]
    fn the_spin_window_is_a_fiftieth_of_the_wait_between_its_bounds() {
        assert_eq!(spin_window(Duration::from_micros(250)), SPIN_WINDOW); // 4,000/s
        assert_eq!(
            spin_window(Duration::from_millis(5)),
            Duration::from_micros(100)
        ); // 200/s
        assert_eq!(spin_window(Duration::from_secs(1)), SPIN_WINDOW_MAX); // 1/s
    }

    #[test]
    fn units_are_handed_over_early_only_at_low_rates() {
        assert_eq!(spawn_lead(Duration::from_micros(250)), Duration::ZERO); // 4,000/s
        assert_eq!(spawn_lead(Duration::from_millis(2)), Duration::ZERO); // 500/s: the floor
        assert_eq!(
            spawn_lead(Duration::from_millis(5)),
            Duration::from_micros(100)
        );
        assert_eq!(spawn_lead(Duration::from_secs(1)), SPIN_WINDOW_MAX);
        let at = Instant::now() + Duration::from_micros(300);
        spin_until(at);
        assert!(Instant::now() >= at);
    }

    #[test]
    fn a_counted_wait_never_returns_before_the_deadline() {
        tighten_timer_slack();
        let bell = Doorbell::default();
        let mut st = WakeStats::default();
        // A high rate's short waits (the floor's window), a low rate's long ones (a wider window).
        for (wait, times) in [
            (Duration::from_micros(700), 20),
            (Duration::from_millis(30), 3),
        ] {
            for _ in 0..times {
                let deadline = Instant::now() + wait;
                assert_eq!(st.wait_until(Some(deadline), &bell, || false), Waited::Due);
                assert!(Instant::now() >= deadline);
            }
        }
        assert!(st.sleeps >= 23);
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
