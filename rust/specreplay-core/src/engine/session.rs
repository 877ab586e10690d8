//! Running a unit: one request, or the turns of a session one after the
//! other. A dependent turn is due when the turn before it has ended plus its
//! think time; the pacing thread releases it then, so its `scheduled_us` is
//! that moment and its send lag means what it means for any request. A
//! session whose turn failed ends there: its later turns become rows that
//! say so (`skipped_after_failure`), and are never sent.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::body;
use super::feed::Unit;
use super::panics;
use super::record::{ErrorKind, RequestRecord};
use super::request::execute;
use super::spec::PreparedRequest;
use super::Shared;
use crate::clock::{now_us, us_to_instant};

/// How the previous turn of a session went.
enum Before {
    Ended {
        end_us: i64,
    },
    Failed {
        at_us: i64,
        what: String,
    },
    /// Cancelled, or the point's duration is over: the session stops, and
    /// its remaining turns get no row (like requests the schedule had not
    /// reached).
    Stopped,
}

/// Runs `unit`: its first turn due at `first_scheduled_us`, each later one
/// after the one before it. Reports a row per turn sent or skipped; a panic
/// while running it still leaves a row for every turn it had not reported
/// (`panics`), and the unit is counted finished either way.
pub async fn run_unit(shared: Arc<Shared>, unit: Unit, first_scheduled_us: i64) {
    let reported = AtomicUsize::new(0);
    // The future built in the call, not bound first: a named future is kept
    // in this state machine beside the one awaited (`panics::caught`).
    if let Err(message) =
        panics::caught(run_turns(&shared, &unit, first_scheduled_us, &reported)).await
    {
        for (k, request) in unit.turns.iter().enumerate() {
            if k < reported.load(Ordering::SeqCst) {
                continue;
            }
            let mut rec = record_for(&shared, &unit, k, request);
            rec.scheduled_us = first_scheduled_us;
            panics::mark(&mut rec, &message);
            shared.progress.scheduled.fetch_add(1, Ordering::Relaxed);
            report(&shared, rec);
        }
    }
    shared.feed.finished();
}

/// The turns of `unit`, counting in `reported` the rows reported so far.
async fn run_turns(
    shared: &Arc<Shared>,
    unit: &Unit,
    first_scheduled_us: i64,
    reported: &AtomicUsize,
) {
    let shared = shared.as_ref();
    let mut before: Option<Before> = None;
    // Live history: the answers generated so far, turn by turn.
    let mut answers: Vec<Option<String>> = Vec::new();
    for (k, request) in unit.turns.iter().enumerate() {
        let mut rec = record_for(shared, unit, k, request);
        let mut spliced: Option<PreparedRequest> = None;
        rec.scheduled_us = match before.take() {
            None => first_scheduled_us,
            Some(Before::Stopped) => break,
            Some(Before::Failed { at_us, what }) => {
                skip_rest(shared, unit, k, at_us, &what);
                reported.store(unit.turns.len(), Ordering::SeqCst);
                break;
            }
            Some(Before::Ended { end_us }) => {
                let turn = request
                    .session
                    .as_ref()
                    .expect("a dependent unit's turns have sessions");
                let think_us = turn.think_time_us.unwrap_or(0);
                let due_us = end_us + think_us;
                let due = us_to_instant(due_us);
                if shared.end_at.is_some_and(|end| due >= end) {
                    break;
                }
                // Built before the wait, so the send is as punctual as any.
                // (The slots were checked when the request was fed.)
                if !turn.history_at.is_empty() {
                    if let Ok(body) = body::with_history(&request.body, &turn.history_at, &answers)
                    {
                        spliced = Some(PreparedRequest {
                            body,
                            ..request.clone()
                        });
                    }
                }
                // Due already (no think time): no hop through the pacing thread.
                let released = due <= Instant::now()
                    || tokio::select! {
                        r = shared.releases.wait(due) => r.is_ok(),
                        _ = shared.ctx.cancel.cancelled() => false,
                    };
                if !released || shared.ctx.cancel.is_cancelled() {
                    break;
                }
                rec.predecessor_end_us = Some(end_us);
                rec.think_time_us = Some(think_us);
                due_us
            }
        };
        send(shared, spliced.as_ref().unwrap_or(request), &mut rec).await;
        if unit.dependent {
            answers.push(rec.answer.take());
            before = Some(match &rec.error {
                None => Before::Ended {
                    end_us: rec.end_us.unwrap_or_else(now_us),
                },
                Some((ErrorKind::Cancelled, _)) => Before::Stopped,
                Some((kind, _)) => Before::Failed {
                    at_us: rec.end_us.unwrap_or_else(now_us),
                    what: format!("turn {} ({}) failed: {}", k, rec.trace_id, kind.as_str()),
                },
            });
        }
        report(shared, rec);
        reported.fetch_add(1, Ordering::SeqCst);
    }
}

/// The row of turn `k` of `unit`, before it is sent.
fn record_for(shared: &Shared, unit: &Unit, k: usize, request: &PreparedRequest) -> RequestRecord {
    let index = unit.first_index + k as u64;
    let turn = request.session.as_ref();
    // A later pass over the trace is named by its lap: `id#k`, for the
    // request and its session alike.
    let lapped = |id: &str| match unit.lap {
        0 => id.to_string(),
        lap => format!("{id}#{lap}"),
    };
    RequestRecord {
        request_index: index as i64,
        trace_id: lapped(&request.trace_id),
        api: request.dialect.as_str(),
        warmup: index < shared.warmup,
        session_id: turn.map(|t| match unit.lap {
            0 => t.session_id.clone(),
            _ => lapped(&t.session_id).into(),
        }),
        turn_index: turn.map(|t| t.index),
        session_turns: unit.dependent.then_some(unit.turns.len() as i32),
        model: request.model.clone(),
        media: request.media,
        ..Default::default()
    }
}

/// Sends one request (after a free slot under `--max-concurrency`) and fills its row.
async fn send(shared: &Shared, request: &PreparedRequest, rec: &mut RequestRecord) {
    shared.progress.scheduled.fetch_add(1, Ordering::Relaxed);
    let _permit = match &shared.permits {
        Some(permits) => tokio::select! {
            p = permits.acquire() => p.ok(),
            _ = shared.ctx.cancel.cancelled() => None,
        },
        None => None,
    };
    if shared.ctx.cancel.is_cancelled() {
        rec.end_us = Some(now_us());
        rec.error = Some((
            ErrorKind::Cancelled,
            "run cancelled before the request was sent".into(),
        ));
    } else {
        shared.progress.sent.fetch_add(1, Ordering::Relaxed);
        let outcome = panics::caught(async {
            #[cfg(test)]
            panics::panic_if_asked(&request.trace_id);
            execute(&shared.ctx, request, rec).await
        })
        .await;
        if let Err(message) = outcome {
            panics::mark(rec, &message);
        }
    }
}

/// Rows for the turns of `unit` from `k` on, never sent because a turn
/// before them failed at `at_us`.
fn skip_rest(shared: &Shared, unit: &Unit, k: usize, at_us: i64, what: &str) {
    for (j, request) in unit.turns.iter().enumerate().skip(k) {
        let mut rec = record_for(shared, unit, j, request);
        rec.scheduled_us = at_us;
        rec.predecessor_end_us = (j == k).then_some(at_us);
        rec.error = Some((
            ErrorKind::SkippedAfterFailure,
            format!("not sent: {what}; the session ends there"),
        ));
        shared.progress.scheduled.fetch_add(1, Ordering::Relaxed);
        report(shared, rec);
    }
}

fn report(shared: &Shared, mut rec: RequestRecord) {
    let progress = &shared.progress;
    progress.finished.fetch_add(1, Ordering::Relaxed);
    if rec.error.is_some() {
        progress.failed.fetch_add(1, Ordering::Relaxed);
    }
    progress.output_tokens.fetch_add(
        rec.output_tokens.unwrap_or(0).max(0) as u64,
        Ordering::Relaxed,
    );
    rec.answer = None;
    // The receiver only goes away when the run is dropped; nothing to report to then.
    let _ = shared.results.send(rec);
}
