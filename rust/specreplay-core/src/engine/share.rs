//! A distributed point's share: which units of the point this worker's
//! engine sends (`RunSpec::share`, `distributed/split.py` on the Python side).

use std::collections::HashMap;
use std::sync::Arc;

/// Deals a distributed point's units out to its workers, the same on every
/// worker (each is fed the same requests in the same order): in turn, so
/// that each worker sees every Nth arrival and the same load shape, except
/// that every request of a session goes to the worker its session was
/// first dealt to (in either session mode, on every lap): a conversation is
/// never sent from two machines. `distributed/split.py` mirrors it for the
/// driver's accounting of a lost worker.
#[derive(Debug, Default)]
pub struct Dealer {
    sessions: HashMap<Arc<str>, u32>,
    dealt: u64,
}

impl Dealer {
    /// The worker (of `workers`) that sends the next unit, whose first
    /// request belongs to `session`.
    pub fn deal(&mut self, session: Option<&Arc<str>>, workers: u32) -> u32 {
        let mut next = || {
            let worker = (self.dealt % u64::from(workers)) as u32;
            self.dealt += 1;
            worker
        };
        match session {
            Some(id) => match self.sessions.get(id) {
                Some(&worker) => worker,
                None => {
                    let worker = next();
                    self.sessions.insert(id.clone(), worker);
                    worker
                }
            },
            None => next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::feed::tests::{drain, request};
    use super::super::feed::Feed;
    use super::super::spec::{PreparedRequest, SessionMode, Share};

    #[test]
    fn a_shared_point_keeps_its_workers_units_and_the_whole_points_indexes() {
        let requests = || {
            vec![
                request("a0", Some(("a", 0))),
                request("x", None),
                request("a1", Some(("a", 1))),
                request("b0", Some(("b", 0))),
                request("y", None),
            ]
        };
        // Independent mode, two laps: each request is a unit, dealt in turn,
        // but a session's requests go where the session was first dealt, on
        // every lap (a → 0, x → 1, b → 0, y → 1, x → 0, y → 1).
        let mine_of = |requests: Vec<PreparedRequest>, worker: u32, mode: SessionMode| {
            let share = Share { worker, workers: 2 };
            let feed = Feed::whole(requests, mode, Some(10), None, None, Some(share)).unwrap();
            drain(&feed)
                .into_iter()
                .map(|(t, lap, i, _)| (format!("{}#{lap}", t.join("+")), i))
                .collect::<Vec<_>>()
        };
        let mine = |worker: u32, mode: SessionMode| mine_of(requests(), worker, mode);
        let zero = mine(0, SessionMode::Independent);
        let one = mine(1, SessionMode::Independent);
        let names = |v: &[(String, u64)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(&zero),
            ["a0#0", "a1#0", "b0#0", "a0#1", "x#1", "a1#1", "b0#1"]
        );
        assert_eq!(names(&one), ["x#0", "y#0", "y#1"]);
        let mut indexes: Vec<u64> = zero.iter().chain(&one).map(|(_, i)| *i).collect();
        indexes.sort();
        assert_eq!(indexes, (0..10).collect::<Vec<_>>());
        // Dependent mode: a session (its turns fed together) is one unit,
        // dealt in turn with the others.
        let together = vec![
            request("a0", Some(("a", 0))),
            request("a1", Some(("a", 1))),
            request("x", None),
            request("b0", Some(("b", 0))),
            request("y", None),
        ];
        assert_eq!(
            names(&mine_of(together, 0, SessionMode::Dependent)),
            ["a0+a1#0", "b0#0", "a0+a1#1", "x#1", "b0#1"]
        );
        // A worker past the sessions there are ends instead of looking forever.
        let share = Share {
            worker: 1,
            workers: 2,
        };
        let feed = Feed::whole(
            vec![request("a0", Some(("a", 0)))],
            SessionMode::Dependent,
            None,
            None,
            Some(Duration::from_secs(1)),
            Some(share),
        )
        .unwrap();
        assert!(drain(&feed).is_empty() && feed.is_over());
    }
}
