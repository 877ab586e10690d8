//! Timestamps: a monotonic clock anchored once to wall-clock time.
//!
//! Every timestamp specreplay stores is integer microseconds since the Unix
//! epoch, but it is *measured* with `Instant` (monotonic): wall-clock time is
//! read exactly once per process, so an NTP step in the middle of a run cannot
//! bend a latency. All timestamps in one process share the same anchor, which
//! makes a client read time and an in-process server send time comparable.

use std::sync::LazyLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

struct Anchor {
    instant: Instant,
    epoch_us: i64,
}

static ANCHOR: LazyLock<Anchor> = LazyLock::new(|| {
    let instant = Instant::now();
    let epoch_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    Anchor { instant, epoch_us }
});

/// Microseconds since the Unix epoch, measured on the monotonic clock.
#[inline]
pub fn now_us() -> i64 {
    instant_to_us(Instant::now())
}

/// Converts an `Instant` taken in this process into anchored epoch µs.
#[inline]
pub fn instant_to_us(at: Instant) -> i64 {
    let anchor = &*ANCHOR;
    match at.checked_duration_since(anchor.instant) {
        Some(d) => anchor.epoch_us + d.as_micros() as i64,
        None => anchor.epoch_us - anchor.instant.duration_since(at).as_micros() as i64,
    }
}

/// The `Instant` of anchored epoch µs `us` (the inverse of [`instant_to_us`]).
pub fn us_to_instant(us: i64) -> Instant {
    let anchor = &*ANCHOR;
    let delta = us - anchor.epoch_us;
    let d = std::time::Duration::from_micros(delta.unsigned_abs());
    if delta >= 0 {
        anchor.instant + d
    } else {
        anchor.instant.checked_sub(d).unwrap_or(anchor.instant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_and_close_to_wall_clock() {
        let a = now_us();
        let b = now_us();
        assert!(b >= a);
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64;
        // Anchored a moment ago in this process: within a second of the wall clock.
        assert!((wall - b).abs() < 1_000_000, "anchored {b} vs wall {wall}");
    }

    #[test]
    fn instants_map_to_the_anchored_clock() {
        let before = now_us();
        let at = Instant::now();
        let after = now_us();
        let us = instant_to_us(at);
        assert!(before <= us && us <= after, "{before} <= {us} <= {after}");
        // An instant 1 s earlier (before the anchor, in a fresh test
        // process) maps 1 s lower; each side truncates to whole µs.
        let earlier = at - std::time::Duration::from_secs(1);
        let gap = us - instant_to_us(earlier);
        assert!((999_999..=1_000_001).contains(&gap), "{gap}");
    }

    #[test]
    fn us_to_instant_inverts_instant_to_us() {
        let at = Instant::now() + std::time::Duration::from_millis(1500);
        let us = instant_to_us(at);
        assert_eq!(instant_to_us(us_to_instant(us)), us);
        assert!(us_to_instant(us) <= at);
    }
}
