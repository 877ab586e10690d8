//! The pacing thread: everything that must go out at a given moment goes
//! out from here, on an OS thread of its own (`pacing`), so every timed send
//! is equally punctual. Two kinds of moments:
//!
//! * open loop: each unit's due time from the schedule (`feed::Unit::offset_us`);
//! * dependent sessions (any load mode): a turn's predecessor end plus its
//!   think time. The turn's task registers that moment (`Releases::wait`)
//!   and the thread releases it then.
//!
//! The thread never waits for the Python layer: a unit that has not been
//! fed by its due time is started when it arrives, and its send lag says so.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use super::feed::{Feed, Popped, Unit};
use super::pacing::{self, Doorbell, Waited};
use super::priority;
use super::session::run_unit;
use super::stall_watch::StallWatch;
use super::Shared;
use crate::clock::instant_to_us;

/// A registered moment and whom to wake then.
struct Pending {
    at: Instant,
    seq: u64,
    go: oneshot::Sender<()>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    /// Reversed: `BinaryHeap` is a max-heap, the earliest moment comes first.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Moments tasks wait for, released by the pacing thread.
pub struct Releases {
    pending: Mutex<(BinaryHeap<Pending>, u64)>,
    bell: Arc<Doorbell>,
}

impl Releases {
    pub fn new(bell: Arc<Doorbell>) -> Releases {
        Releases {
            pending: Mutex::new((BinaryHeap::new(), 0)),
            bell,
        }
    }

    /// Resolves at `at`, released by the pacing thread (an `Err` when the
    /// thread is gone: the run was cancelled).
    pub async fn wait(&self, at: Instant) -> Result<(), oneshot::error::RecvError> {
        let (go, released) = oneshot::channel();
        {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            let seq = pending.1;
            pending.1 += 1;
            pending.0.push(Pending { at, seq, go });
        }
        self.bell.ring();
        released.await
    }

    fn next(&self) -> Option<Instant> {
        let pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.0.peek().map(|p| p.at)
    }

    /// Releases every moment that has come, earliest first.
    fn release_due(&self, now: Instant) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        while pending.0.peek().is_some_and(|p| p.at <= now) {
            if let Some(p) = pending.0.pop() {
                // The task may be gone (cancelled): nobody to wake.
                let _ = p.go.send(());
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .is_empty()
    }

    /// Drops every pending moment: their tasks see the thread gone.
    fn clear(&self) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clear();
    }
}

/// Starts `unit`, due at `at`, on a worker. Handed over early
/// (`pacing::spawn_lead`), its task, on a worker now awake, waits out the
/// rest (at most the lead: 250 µs). With `handover`, counts both steps.
fn hand_over(
    runtime: &Handle,
    shared: Arc<Shared>,
    unit: Unit,
    at: Instant,
    handover: Option<&Arc<pacing::HandoverStats>>,
) {
    let counted = handover.map(|stats| {
        let spawned = Instant::now();
        stats.spawned(spawned.saturating_duration_since(at));
        (stats.clone(), spawned)
    });
    runtime.spawn(async move {
        if let Some((stats, spawned)) = counted {
            stats.ran(spawned.elapsed());
        }
        pacing::spin_until(at);
        run_unit(shared, unit, instant_to_us(at)).await
    });
}

/// The pacing thread's loop: starts open-loop units at their due times
/// (`starts_units`), releases dependent turns, and ends when the feed is
/// over and nothing is pending, or when the run is cancelled.
pub fn pace(shared: Arc<Shared>, starts_units: bool, start_at: Instant, runtime: Handle) {
    pacing::tighten_timer_slack();
    let policy = priority::raise(priority::PACER);
    shared.progress.pacer.set(policy);
    // Every CPU watched for the machine's stalls, which the pacer alone
    // cannot see (`stall_watch`): only where its verdict is read, an open
    // loop with a real-time pacer (`checks_load.machine_hold`).
    let cpu_watch = (starts_units && matches!(policy, priority::Policy::Fifo(_)))
        .then(StallWatch::start)
        .flatten();
    let mut waits = pacing::WakeStats::default();
    // A benchmarking aid (bench/send_lag_profile.py): how the waits went.
    let stats_wanted = std::env::var_os("SPECREPLAY_PACER_STATS").is_some();
    let handover = stats_wanted.then(|| Arc::new(pacing::HandoverStats::default()));
    let feed: &Feed = &shared.feed;
    let releases = &shared.releases;
    let cancel = shared.ctx.cancel.clone();
    // The unit to start next, and how long before its due time to hand it
    // over (`pacing::spawn_lead`: at low rates the worker's wake-up).
    let mut next: Option<(Unit, Duration)> = None;
    let due = |u: &Unit| start_at + Duration::from_micros(u.offset_us.max(0) as u64);
    loop {
        if starts_units && next.is_none() {
            match feed.pop() {
                Popped::Unit(unit) => {
                    let gap = due(&unit).saturating_duration_since(Instant::now());
                    next = Some((unit, pacing::spawn_lead(gap)));
                }
                Popped::Empty | Popped::Ended => {}
            }
        }
        if next.is_none() && releases.is_empty() && feed.is_over() {
            break;
        }
        let unit_at = next.as_ref().map(|(u, _)| due(u));
        let spawn_at = next
            .as_ref()
            .zip(unit_at)
            .map(|((_, lead), at)| at.checked_sub(*lead).unwrap_or(at));
        let deadline = match (spawn_at, releases.next()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match waits.wait_until(deadline, &feed.bell, || cancel.is_cancelled()) {
            Waited::Stopped => break,
            Waited::Rung => continue,
            Waited::Due => {}
        }
        releases.release_due(Instant::now());
        if let (Some(at), Some(spawn_at)) = (unit_at, spawn_at) {
            if spawn_at <= Instant::now() {
                let (unit, _) = next.take().expect("checked");
                hand_over(&runtime, shared.clone(), unit, at, handover.as_ref());
            }
        }
    }
    // Cancelled: units not yet due are not sent (no row), and turns waiting
    // for their moment see the thread gone.
    if let Some((_unit, _)) = next.take() {
        feed.finished();
    }
    feed.stop();
    releases.clear();
    if let Some(p99) = waits.late_p99_under_us() {
        let progress = &shared.progress;
        progress.pacer_late_p99_us.store(p99, Ordering::Relaxed);
        progress
            .pacer_late_max_us
            .store(waits.late_max_us, Ordering::Relaxed);
    }
    let progress = &shared.progress;
    progress.pacer_held.set(&waits.held, waits.held_dropped);
    if let Some(cpu_watch) = cpu_watch {
        let seen = cpu_watch.stop();
        progress.cpu_held.set(&seen.spans, seen.dropped);
        progress
            .cpu_watched
            .store(seen.every_cpu, Ordering::Relaxed);
    }
    if stats_wanted {
        let st = &waits;
        eprintln!(
            "pacer-stats policy={policy:?} sleeps={} late_max_us={} spun_ms={} late_log2us={:?}",
            st.sleeps,
            st.late_max_us,
            st.spun.as_millis(),
            st.late_buckets
        );
        if let Some(h) = &handover {
            eprintln!(
                "handover-stats due_to_spawn_log2us={} spawn_to_run_log2us={} spawn_to_run_max_us={}",
                pacing::HandoverStats::counts(&h.due_to_spawn),
                pacing::HandoverStats::counts(&h.spawn_to_run),
                h.spawn_to_run_max_us.load(Ordering::Relaxed)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Yields until `done()`, at most 1000 times. The test's runtime is
    /// single-threaded: between two calls every task that can run has run.
    async fn yield_until(mut done: impl FnMut() -> bool) {
        for _ in 0..1000 {
            if done() {
                return;
            }
            tokio::task::yield_now().await;
        }
    }

    /// The tasks released so far, once `n` have been (or the yields ran
    /// out), with room for a wrong, early release to show.
    async fn released(order: &Mutex<Vec<usize>>, n: usize) -> Vec<usize> {
        yield_until(|| order.lock().unwrap().len() >= n).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        order.lock().unwrap().clone()
    }

    #[tokio::test]
    async fn releases_come_in_order_and_never_early() {
        // The moments are an hour away: only `release_due`'s `now` releases
        // them, so the test does not depend on when threads run.
        let releases = Arc::new(Releases::new(Arc::new(Doorbell::default())));
        let base = Instant::now() + Duration::from_secs(3600);
        let order = Arc::new(Mutex::new(Vec::new()));
        for (i, ms) in [30u64, 0, 10, 20].into_iter().enumerate() {
            let (releases, order) = (releases.clone(), order.clone());
            tokio::spawn(async move {
                releases
                    .wait(base + Duration::from_millis(ms))
                    .await
                    .unwrap();
                order.lock().unwrap().push(i);
            });
        }
        yield_until(|| releases.pending.lock().unwrap().0.len() == 4).await;
        assert_eq!(releases.next(), Some(base), "the earliest moment is next");
        assert_eq!(
            released(&order, 1).await,
            Vec::<usize>::new(),
            "nothing before its moment"
        );
        // Registered out of order, released in order of their moments, each
        // only once its moment has come.
        for (now_ms, want) in [
            (5, vec![1]),
            (15, vec![1, 2]),
            (25, vec![1, 2, 3]),
            (35, vec![1, 2, 3, 0]),
        ] {
            releases.release_due(base + Duration::from_millis(now_ms));
            assert_eq!(released(&order, want.len()).await, want, "at +{now_ms} ms");
        }
        assert!(releases.is_empty());
    }
}
