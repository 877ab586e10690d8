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

static ANCHOR: LazyLock<Anchor> = LazyLock::new(|| tightest_anchor(ANCHOR_TRIES, wall_us));

/// How many (monotonic, wall, monotonic) readings the anchor chooses from.
/// A vCPU stall between a monotonic and a wall reading shifts every stamp
/// the process takes by the stall (26 ms seen on this project's CI hosts,
/// which put two Ray workers' clocks 23 ms apart); bracketing the wall
/// reading and keeping the tightest bracket bounds the error by its width.
const ANCHOR_TRIES: usize = 8;

/// A bracket this narrow cannot hide a stall: stop looking.
const GOOD_ENOUGH_NS: i64 = 2_000;

fn wall_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// The anchor from the tightest of `tries` brackets: the wall reading is
/// taken to belong to the bracket's midpoint, so the error is at most half
/// its width.
fn tightest_anchor(tries: usize, mut wall: impl FnMut() -> i64) -> Anchor {
    let mut best: Option<(i64, Anchor)> = None;
    for _ in 0..tries.max(1) {
        let before = Instant::now();
        let epoch_us = wall();
        let after = Instant::now();
        let width = duration_ns(after.duration_since(before));
        if best.as_ref().is_none_or(|(w, _)| width < *w) {
            let instant = before + (after.duration_since(before) / 2);
            best = Some((width, Anchor { instant, epoch_us }));
        }
        if width <= GOOD_ENOUGH_NS {
            break;
        }
    }
    best.expect("at least one try").1
}

/// Microseconds since the Unix epoch, measured on the monotonic clock.
#[inline]
pub fn now_us() -> i64 {
    instant_to_us(Instant::now())
}

/// Converts an `Instant` taken in this process into anchored epoch µs,
/// rounding down on both sides of the anchor, so that a whole number of µs
/// between two instants stays exactly that (the anchor is taken lazily, and
/// a schedule's first deadline may come before it).
#[inline]
pub fn instant_to_us(at: Instant) -> i64 {
    let anchor = &*ANCHOR;
    // i64 nanoseconds span ±292 years around the anchor. In i128 the division
    // below was a call into compiler_builtins (`__divti3`, `__modti3`) at
    // every chunk stamp: about 2 % of the engine's instructions (callgrind,
    // docs/benchmarks.md, "CPU per chunk, head against `d96c860`").
    let ns = match at.checked_duration_since(anchor.instant) {
        Some(d) => duration_ns(d),
        None => -duration_ns(anchor.instant.duration_since(at)),
    };
    anchor.epoch_us + ns.div_euclid(1000)
}

#[inline]
fn duration_ns(d: std::time::Duration) -> i64 {
    d.as_secs() as i64 * 1_000_000_000 + i64::from(d.subsec_nanos())
}

/// The `Instant` of anchored epoch µs: the inverse of `instant_to_us`
/// (for a moment computed from stored timestamps, such as a turn's due time
/// or a distributed point's start instant).
pub fn us_to_instant(us: i64) -> Instant {
    let anchor = &*ANCHOR;
    let delta = us - anchor.epoch_us;
    if delta >= 0 {
        anchor.instant + std::time::Duration::from_micros(delta as u64)
    } else {
        anchor
            .instant
            .checked_sub(std::time::Duration::from_micros(delta.unsigned_abs()))
            .unwrap_or(anchor.instant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_anchor_keeps_the_tightest_bracket_around_the_wall_reading() {
        // The first two wall readings stall for 30 ms (as a descheduled vCPU
        // would); the third does not. The anchor must come from the third.
        let mut calls = 0;
        let start = Instant::now();
        let anchor = tightest_anchor(3, || {
            calls += 1;
            if calls <= 2 {
                std::thread::sleep(std::time::Duration::from_millis(30));
            }
            calls * 1_000_000
        });
        assert_eq!(anchor.epoch_us, 3_000_000, "took a stalled bracket");
        // Its instant lies after the two stalls.
        assert!(anchor.instant.duration_since(start) >= std::time::Duration::from_millis(60));
        // Brackets that all stall: every try is made, none more.
        let mut tries = 0;
        tightest_anchor(4, || {
            tries += 1;
            std::thread::sleep(std::time::Duration::from_millis(1));
            0
        });
        assert_eq!(tries, 4);
    }

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
        // process) maps exactly 1 s lower: both sides round down.
        let earlier = at - std::time::Duration::from_secs(1);
        assert_eq!(us - instant_to_us(earlier), 1_000_000);
        let odd = std::time::Duration::from_nanos(1_234_567_891);
        assert_eq!(
            instant_to_us(at + odd) - instant_to_us(at + odd - std::time::Duration::from_secs(3)),
            3_000_000
        );
    }

    #[test]
    fn us_map_back_to_instants() {
        let at = Instant::now() + std::time::Duration::from_millis(1500);
        let back = us_to_instant(instant_to_us(at));
        // Within the µs truncation.
        let diff = if back > at { back - at } else { at - back };
        assert!(diff < std::time::Duration::from_micros(2), "{diff:?}");
    }

    #[test]
    fn us_to_instant_inverts_instant_to_us() {
        let at = Instant::now() + std::time::Duration::from_millis(1500);
        let us = instant_to_us(at);
        assert_eq!(instant_to_us(us_to_instant(us)), us);
        assert!(us_to_instant(us) <= at);
    }
}
