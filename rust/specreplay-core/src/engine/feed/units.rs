//! A point's requests cut into what starts together (`Unit`s).

use std::sync::Arc;

use super::super::spec::{PreparedRequest, SessionMode};
use crate::error::CoreError;

/// What starts together: one request, or a session's turns (dependent mode).
#[derive(Debug)]
pub struct Unit {
    /// Shared with the point's other laps over the same turns (a point
    /// given whole): taking a unit allocates nothing.
    pub turns: Arc<[PreparedRequest]>,
    /// How many times the trace was looped before this unit (0: first pass).
    pub lap: u64,
    /// `request_index` of its first turn; the others follow.
    pub first_index: u64,
    /// Open loop: when it is due, µs after the point's start.
    pub offset_us: i64,
    /// Its turns wait for each other (a session, in dependent mode).
    pub dependent: bool,
}

/// Splits requests, in feed order, into units. In dependent mode a
/// session's turns come together and in order (turn 0, 1, …): a turn must
/// directly follow the one before it, in the same batch.
pub fn group(
    requests: Vec<PreparedRequest>,
    mode: SessionMode,
) -> Result<Vec<Vec<PreparedRequest>>, CoreError> {
    let mut units: Vec<Vec<PreparedRequest>> = Vec::new();
    for request in requests {
        let turn = match (&request.session, mode) {
            (Some(turn), SessionMode::Dependent) => turn,
            _ => {
                units.push(vec![request]);
                continue;
            }
        };
        if turn.index == 0 {
            units.push(vec![request]);
            continue;
        }
        let previous = units.last_mut().filter(|u| {
            u.last()
                .and_then(|r| r.session.as_ref())
                .is_some_and(|t| t.session_id == turn.session_id && t.index + 1 == turn.index)
        });
        match previous {
            Some(unit) => unit.push(request),
            None => {
                return Err(CoreError::config(
                    format!("request {}: turn_index", request.trace_id),
                    format!(
                        "turn {} of session {:?} does not follow its turn {} (a session's turns are fed together, in order)",
                        turn.index,
                        &*turn.session_id,
                        turn.index - 1
                    ),
                ))
            }
        }
    }
    Ok(units)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::feed::tests::request;

    fn ids(units: &[Vec<PreparedRequest>]) -> Vec<Vec<&str>> {
        units
            .iter()
            .map(|u| u.iter().map(|r| r.trace_id.as_str()).collect())
            .collect()
    }
    #[test]
    fn dependent_mode_groups_a_sessions_turns() {
        let requests = || {
            vec![
                request("a0", Some(("a", 0))),
                request("a1", Some(("a", 1))),
                request("x", None),
                request("b0", Some(("b", 0))),
                request("b1", Some(("b", 1))),
                request("b2", Some(("b", 2))),
            ]
        };
        let units = group(requests(), SessionMode::Dependent).unwrap();
        assert_eq!(
            ids(&units),
            vec![vec!["a0", "a1"], vec!["x"], vec!["b0", "b1", "b2"]]
        );
        let units = group(requests(), SessionMode::Independent).unwrap();
        assert_eq!(units.len(), 6);
    }

    #[test]
    fn a_turn_out_of_place_is_refused() {
        for requests in [
            vec![request("a1", Some(("a", 1)))],
            vec![request("a0", Some(("a", 0))), request("b1", Some(("b", 1)))],
            vec![request("a0", Some(("a", 0))), request("a2", Some(("a", 2)))],
            vec![
                request("a0", Some(("a", 0))),
                request("x", None),
                request("a1", Some(("a", 1))),
            ],
        ] {
            let err = group(requests, SessionMode::Dependent)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("turn_index") && err.contains("does not follow"),
                "{err}"
            );
        }
    }
}
