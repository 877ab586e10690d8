//! The feed's own tests; `request` and `drain` serve the engine's other tests too.

use super::*;
use crate::engine::spec::LoadMode;

pub(crate) fn request(id: &str, session: Option<(&str, i32)>) -> PreparedRequest {
    let r = PreparedRequest::new(
        id.into(),
        "chat",
        "http://h/v1/chat/completions",
        b"{}".to_vec(),
        0.0,
    )
    .unwrap();
    match session {
        Some((s, i)) => r.in_session(s, i, None),
        None => r,
    }
}

pub(crate) fn drain(feed: &Feed) -> Vec<(Vec<String>, u64, u64, i64)> {
    let mut out = Vec::new();
    while let Popped::Unit(u) = feed.pop() {
        out.push((
            u.turns.iter().map(|r| r.trace_id.clone()).collect(),
            u.lap,
            u.first_index,
            u.offset_us,
        ));
        feed.finished();
    }
    out
}

/// A closed-loop point of sessionless requests `ids`, sent once through.
fn once_through(ids: &[&str]) -> Feed {
    let requests = ids.iter().map(|id| request(id, None)).collect();
    Feed::whole(requests, SessionMode::Dependent, None, None, None, None).unwrap()
}

#[test]
fn a_whole_point_loops_up_to_its_limit_and_cuts_the_last_session() {
    let requests = vec![
        request("a0", Some(("a", 0))),
        request("a1", Some(("a", 1))),
        request("x", None),
    ];
    let feed = Feed::whole(requests, SessionMode::Dependent, Some(5), None, None, None).unwrap();
    let got = drain(&feed);
    let units: Vec<(Vec<&str>, u64, u64)> = got
        .iter()
        .map(|(t, l, i, _)| (t.iter().map(|s| s.as_str()).collect(), *l, *i))
        .collect();
    assert_eq!(
        units,
        vec![
            (vec!["a0", "a1"], 0, 0),
            (vec!["x"], 0, 2),
            (vec!["a0", "a1"], 1, 3)
        ]
    );
    assert!(feed.is_over());
    // Without a limit: once through.
    let feed = once_through(&["x", "y"]);
    assert_eq!(drain(&feed).len(), 2);
}

/// A streamed point sending at a constant `rate`.
fn open_loop(rate: f64, duration: Option<Duration>) -> Feed {
    let load = LoadMode::Rate {
        rate,
        arrival: crate::engine::Arrival::Constant,
        burstiness: 1.0,
    };
    Feed::streamed(
        SessionMode::Dependent,
        None,
        Schedule::open_loop(load, 0),
        duration,
        None,
    )
}

#[test]
fn a_streamed_point_takes_what_is_fed_by_lap_and_wants_a_lookahead() {
    let feed = open_loop(100.0, None);
    assert!(feed.wants_more());
    assert!(matches!(feed.pop(), Popped::Empty));
    feed.push(
        (0..MIN_QUEUED)
            .map(|i| request(&format!("r{i}"), None))
            .collect(),
    )
    .unwrap();
    // 64 units at 100/s cover 0.63 s of the schedule: less than the look-ahead.
    assert!(feed.wants_more());
    feed.end_lap();
    feed.push((0..200).map(|i| request(&format!("r{i}"), None)).collect())
        .unwrap();
    // 264 units cover 2.63 s.
    assert!(!feed.wants_more());
    feed.end();
    assert!(!feed.wants_more());
    let got = drain(&feed);
    assert_eq!(got.len(), 264);
    assert_eq!(
        (got[63].1, got[64].1, got[64].2, got[64].3),
        (0, 1, 64, 640_000)
    );
    assert!(feed.is_over());
}

#[test]
fn a_closed_loop_feed_looks_ahead_by_the_rate_units_are_taken() {
    let feed = Feed::streamed(SessionMode::Dependent, None, None, None, None);
    let some = |n: usize| (0..n).map(|i| request(&format!("r{i}"), None)).collect();
    feed.push(some(MIN_QUEUED)).unwrap();
    assert_eq!(drain(&feed).len(), MIN_QUEUED);
    // 64 taken within the first second: 2 s ahead is 128 queued.
    feed.push(some(100)).unwrap();
    assert!(feed.wants_more());
    feed.push(some(30)).unwrap();
    assert!(!feed.wants_more());
}

#[test]
fn the_duration_ends_an_open_loop_feed() {
    let feed = open_loop(10.0, Some(Duration::from_millis(250)));
    feed.push((0..5).map(|i| request(&format!("r{i}"), None)).collect())
        .unwrap();
    // Due at 0, 100 and 200 ms; the one at 300 ms ends the point.
    assert!(!feed.wants_more());
    assert_eq!(drain(&feed).len(), 3);
    assert!(feed.is_over());
}

#[test]
fn a_live_unit_keeps_the_feed_from_being_over() {
    let feed = once_through(&["x"]);
    let Popped::Unit(_unit) = feed.pop() else {
        panic!()
    };
    assert!(!feed.is_over());
    feed.finished();
    assert!(feed.is_over());
}

#[test]
fn the_pacing_thread_hears_only_of_the_last_live_unit_finishing() {
    use crate::engine::pacing::{wait_until, Waited};
    let feed = once_through(&["x", "y"]);
    let (Popped::Unit(_x), Popped::Unit(_y)) = (feed.pop(), feed.pop()) else {
        panic!()
    };
    let soon = || Some(Instant::now() + Duration::from_millis(2));
    // Queueing rang it: clear that first.
    let _ = wait_until(soon(), &feed.bell, || false);
    feed.finished();
    assert_eq!(wait_until(soon(), &feed.bell, || false), Waited::Due);
    feed.finished();
    assert_eq!(wait_until(soon(), &feed.bell, || false), Waited::Rung);
    assert!(feed.is_over());
}
