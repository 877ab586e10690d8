//! The server's one lane of pooling forwards (embeddings, rerank, score),
//! shared by every connection (`Shared::pool_lane`) and booked by `embed.rs`.
//! Its own module so that the state every handler shares needs no handler.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The server's pooling forwards, run one after another: a request's
/// prefill starts when it is ready or when the one before it ends, so
/// concurrent pooling requests wait for each other (a batched forward of
/// several costs the sum of their prefills, as it does on a GPU).
#[derive(Default)]
pub(crate) struct PoolLane {
    /// When the last booked forward ends.
    free_at: Mutex<Option<Instant>>,
}

impl PoolLane {
    /// Books a forward of `compute_us` for a request ready at `ready`;
    /// returns when it ends.
    pub(super) fn book(&self, ready: Instant, compute_us: u64) -> Instant {
        let mut free_at = self.free_at.lock().unwrap_or_else(|e| e.into_inner());
        let start = free_at.map_or(ready, |free| free.max(ready));
        let end = start + Duration::from_micros(compute_us);
        *free_at = Some(end);
        end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_pooling_requests_wait_for_each_other() {
        let lane = PoolLane::default();
        let t0 = Instant::now();
        // Alone: ready + its own prefill.
        let alone = lane.book(t0, 1_000) - t0;
        assert_eq!(alone, Duration::from_micros(1_000));
        // Three more ready at the same instant, after the first ended.
        let t1 = t0 + Duration::from_secs(1);
        let ends: Vec<Duration> = (0..3).map(|_| lane.book(t1, 1_000) - t1).collect();
        assert_eq!(
            ends,
            [1_000, 2_000, 3_000].map(Duration::from_micros).to_vec()
        );
        // One ready after the lane went idle runs alone again.
        let t2 = t1 + Duration::from_secs(1);
        assert_eq!(lane.book(t2, 500) - t2, Duration::from_micros(500));
    }
}
