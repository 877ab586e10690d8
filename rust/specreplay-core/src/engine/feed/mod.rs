//! The requests of a point as the engine takes them: a queue of units (a
//! request on its own, or the turns of a session) in the order they start.
//!
//! Two sources fill it. A streamed trace is fed by the Python layer as it
//! reads the file (`EngineRun::feed`), a little ahead of the schedule: the
//! queue says when it wants more (`wants_more`), so memory is bounded by
//! what is in flight and the look-ahead, not by the trace. A point given
//! whole at the start (`engine::start`: tests, benchmarks, the capacity
//! search's probes) is kept, and looped over when the point asks for more
//! requests than it has.
//!
//! Whoever starts units takes them from here: the pacing thread in open
//! loop (each unit has its due time, computed when it was queued), the
//! closed-loop workers otherwise. Nothing here waits for Python: an empty
//! queue is a late unit (send lag), never a blocked thread.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::pacing::Doorbell;
use super::schedule::Schedule;
use super::share::Dealer;
use super::spec::{PreparedRequest, SessionMode, Share};
use crate::error::CoreError;

#[cfg(test)]
pub(crate) mod tests;
mod units;

pub use units::{group, Unit};

/// The look-ahead a streamed feed keeps queued: this much of the schedule
/// (open loop), or this long at the rate units have been taken so far
/// (closed loop)...
const LOOKAHEAD: Duration = Duration::from_secs(2);
/// ...and at least this many requests, whatever the rate...
const MIN_QUEUED: usize = 64;
/// ...but never more than this many requests or body bytes.
const MAX_QUEUED: usize = 100_000;
const MAX_QUEUED_BYTES: usize = 256 << 20;

/// What `Feed::pop` found.
pub enum Popped {
    Unit(Unit),
    /// Nothing queued yet; more is coming.
    Empty,
    /// Nothing queued, and nothing more will come.
    Ended,
}

/// A point given whole: its units, looped over.
struct Whole {
    units: Vec<Arc<[PreparedRequest]>>,
    next: usize,
}

struct State {
    queue: VecDeque<Unit>,
    queued_requests: usize,
    queued_bytes: usize,
    /// Requests queued so far: the next unit's first index.
    queued_total: u64,
    /// Requests taken so far (closed loop: the rate of the look-ahead).
    taken_total: u64,
    /// The lap new units belong to.
    lap: u64,
    /// No unit will be queued any more (the feed ended, the request limit or
    /// the duration was reached, the run stopped).
    ended: bool,
    whole: Option<Whole>,
    schedule: Option<Schedule>,
    last_offset_us: i64,
    dealer: Dealer,
}

pub struct Feed {
    state: Mutex<State>,
    mode: SessionMode,
    /// The most requests the point sends.
    limit: Option<u64>,
    /// Open loop: units due at or after this many µs are not sent.
    duration_us: Option<i64>,
    /// A distributed point: only this worker's units are queued.
    share: Option<Share>,
    start: OnceLock<Instant>,
    /// Units taken and not finished (see `pop`).
    live: AtomicUsize,
    /// Rung when a unit is queued or finishes: the pacing thread waits on it.
    pub bell: Arc<Doorbell>,
    /// Closed-loop workers waiting for a unit.
    queued: Notify,
}

impl Feed {
    fn new(
        mode: SessionMode,
        limit: Option<u64>,
        schedule: Option<Schedule>,
        duration: Option<Duration>,
        whole: Option<Whole>,
        share: Option<Share>,
    ) -> Feed {
        Feed {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                queued_requests: 0,
                queued_bytes: 0,
                queued_total: 0,
                taken_total: 0,
                lap: 0,
                ended: false,
                whole,
                schedule,
                last_offset_us: 0,
                dealer: Dealer::default(),
            }),
            mode,
            limit,
            duration_us: duration.map(|d| d.as_micros() as i64),
            share,
            start: OnceLock::new(),
            live: AtomicUsize::new(0),
            bell: Arc::new(Doorbell::default()),
            queued: Notify::new(),
        }
    }

    /// A point whose requests are all here: looped over up to `limit`
    /// requests (default: once through; with a duration and no limit,
    /// until the duration is over).
    pub fn whole(
        requests: Vec<PreparedRequest>,
        mode: SessionMode,
        limit: Option<u64>,
        schedule: Option<Schedule>,
        duration: Option<Duration>,
        share: Option<Share>,
    ) -> Result<Feed, CoreError> {
        let limit = limit.or(if duration.is_some() {
            None
        } else {
            Some(requests.len() as u64)
        });
        let units = group(requests, mode)?;
        // Time zero of speedup mode: the earliest arrival, wherever it is.
        let zero = units
            .iter()
            .map(|u| u[0].arrival_s)
            .fold(f64::INFINITY, f64::min);
        let schedule = schedule.map(|s| s.with_time_zero(zero));
        Ok(Feed::new(
            mode,
            limit,
            schedule,
            duration,
            Some(Whole {
                units: units.into_iter().map(Arc::from).collect(),
                next: 0,
            }),
            share,
        ))
    }

    /// A point fed as the trace is read: `push` more, `end_lap` after each
    /// pass over the trace, `end` after the last.
    pub fn streamed(
        mode: SessionMode,
        limit: Option<u64>,
        schedule: Option<Schedule>,
        duration: Option<Duration>,
        share: Option<Share>,
    ) -> Feed {
        Feed::new(mode, limit, schedule, duration, None, share)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The clock starts: due times and the look-ahead count from here.
    pub fn set_start(&self, at: Instant) {
        let _ = self.start.set(at);
    }

    fn elapsed_us(&self) -> i64 {
        self.start
            .get()
            .map_or(0, |s| s.elapsed().as_micros() as i64)
    }

    /// Queues more of a streamed point (in order; a session's turns together).
    pub fn push(&self, requests: Vec<PreparedRequest>) -> Result<(), CoreError> {
        let units = group(requests, self.mode)?;
        let mut state = self.lock();
        if state.whole.is_some() {
            return Err(CoreError::config(
                "feed",
                "this point was given whole at its start",
            ));
        }
        for turns in units {
            if state.ended {
                break;
            }
            self.enqueue(&mut state, Arc::from(turns));
        }
        drop(state);
        self.wake();
        Ok(())
    }

    /// The trace's next pass begins: units fed from now on are of the next lap.
    pub fn end_lap(&self) {
        self.lock().lap += 1;
    }

    /// Nothing more will be fed.
    pub fn end(&self) {
        self.lock().ended = true;
        self.wake();
    }

    /// The run stops taking units (its duration is over, or it was
    /// cancelled): what is queued is dropped, and nothing more is wanted.
    pub fn stop(&self) {
        let mut state = self.lock();
        state.ended = true;
        state.queue.clear();
        state.queued_requests = 0;
        state.queued_bytes = 0;
        drop(state);
        self.wake();
    }

    fn wake(&self) {
        self.bell.ring();
        self.queued.notify_waiters();
    }

    /// Whether a streamed point wants more requests fed now.
    pub fn wants_more(&self) -> bool {
        let state = self.lock();
        if state.ended || state.whole.is_some() {
            return false;
        }
        if state.queued_requests < MIN_QUEUED {
            return true;
        }
        if state.queued_requests >= MAX_QUEUED || state.queued_bytes >= MAX_QUEUED_BYTES {
            return false;
        }
        let elapsed_us = self.elapsed_us();
        let lookahead_us = LOOKAHEAD.as_micros() as i64;
        if state.schedule.is_some() {
            return state.last_offset_us - elapsed_us < lookahead_us;
        }
        // Over a second at least: the first units are all taken at once.
        let per_s = state.taken_total as f64 * 1e6 / elapsed_us.max(1_000_000) as f64;
        (state.queued_requests as f64) < per_s * LOOKAHEAD.as_secs_f64()
    }

    /// Gives `turns` their indexes, lap and due time and queues them, unless
    /// the limit or the duration ends the point first.
    fn enqueue(&self, state: &mut State, mut turns: Arc<[PreparedRequest]>) {
        if let Some(limit) = self.limit {
            let left = limit.saturating_sub(state.queued_total);
            if left < turns.len() as u64 {
                turns = turns[..left as usize].to_vec().into();
            }
            if turns.is_empty() {
                state.ended = true;
                return;
            }
        }
        let lap = state.lap;
        let offset_us = match &mut state.schedule {
            Some(schedule) => schedule.next_offset_us(turns[0].arrival_s, lap),
            None => 0,
        };
        if self
            .duration_us
            .is_some_and(|d| state.schedule.is_some() && offset_us >= d)
        {
            state.ended = true;
            return;
        }
        state.last_offset_us = offset_us;
        let first_index = state.queued_total;
        state.queued_total += turns.len() as u64;
        if self.limit.is_some_and(|l| state.queued_total >= l) {
            state.ended = true;
        }
        if let Some(share) = self.share {
            // Every unit is counted above (indexes, due times and the limit
            // are the whole point's); only this worker's are queued.
            let session = turns[0].session.as_ref().map(|t| &t.session_id);
            if state.dealer.deal(session, share.workers) != share.worker {
                return;
            }
        }
        let dependent = self.mode == SessionMode::Dependent && turns[0].session.is_some();
        state.queued_requests += turns.len();
        state.queued_bytes += turns.iter().map(|t| t.body.len()).sum::<usize>();
        state.queue.push_back(Unit {
            first_index,
            turns,
            lap,
            offset_us,
            dependent,
        });
    }

    /// A point given whole queues its next unit (looping) when its queue runs out.
    fn refill(&self, state: &mut State) {
        let Some(units) = state.whole.as_ref().map(|w| w.units.len()) else {
            return;
        };
        // A shared point skips the other workers' units; a worker that owns
        // none of a full round of them (fewer sessions than workers) never will.
        let workers = self.share.map_or(1, |s| s.workers as usize);
        for _ in 0..units * workers + 1 {
            if !state.queue.is_empty() || state.ended {
                return;
            }
            let Some(whole) = state.whole.as_mut() else {
                return;
            };
            if whole.next == whole.units.len() {
                whole.next = 0;
                state.lap += 1;
            }
            let turns = whole.units[whole.next].clone();
            whole.next += 1;
            self.enqueue(state, turns);
        }
        state.ended = state.ended || state.queue.is_empty();
    }

    /// Takes the next unit. A unit taken counts as live until `finished`.
    pub fn pop(&self) -> Popped {
        let mut state = self.lock();
        self.refill(&mut state);
        match state.queue.pop_front() {
            Some(unit) => {
                state.queued_requests -= unit.turns.len();
                state.queued_bytes -= unit.turns.iter().map(|t| t.body.len()).sum::<usize>();
                state.taken_total += unit.turns.len() as u64;
                // Under the lock: whoever sees the queue ended and drained
                // also sees this unit live.
                self.live.fetch_add(1, Ordering::SeqCst);
                Popped::Unit(unit)
            }
            None if state.ended => Popped::Ended,
            None => Popped::Empty,
        }
    }

    /// `pop` for a closed-loop worker: waits while the queue is empty.
    pub async fn next(&self) -> Option<Unit> {
        loop {
            let queued = self.queued.notified();
            tokio::pin!(queued);
            // Registered before looking, so a push in between is not missed.
            queued.as_mut().enable();
            match self.pop() {
                Popped::Unit(unit) => return Some(unit),
                Popped::Ended => return None,
                Popped::Empty => queued.await,
            }
        }
    }

    /// A unit taken with `pop` is over. The pacing thread hears of it only
    /// when nothing is live any more (all `is_over` waits for): at thousands
    /// of requests per second a ring per finish doubled its wake-ups.
    pub fn finished(&self) {
        let was = self.live.fetch_sub(1, Ordering::SeqCst);
        if was == 1 {
            self.bell.ring();
        }
    }

    /// No unit is queued or running, and none will come.
    pub fn is_over(&self) -> bool {
        let mut state = self.lock();
        self.refill(&mut state);
        state.ended && state.queue.is_empty() && self.live.load(Ordering::SeqCst) == 0
    }
}
