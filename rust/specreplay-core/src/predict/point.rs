//! One sweep point predicted on a virtual clock. The client side schedules
//! as the engine does (the same `Schedule` for open loop, N units in flight
//! for closed loop, a dependent session's next turn at its predecessor's end
//! plus its think time); the server side is `des` (the simulator's capacity
//! model with the calibrated costs). Nothing sleeps: an hour of traffic takes
//! as long as its iterations take to compute (bench/predict_speed.rs).

use super::des::{Des, PredictStats};
use super::model::ServerModel;
use super::plan::plan;
use crate::engine::record::RequestRecord;
use crate::engine::schedule::Schedule;
use crate::engine::{LoadMode, PreparedRequest, RunSpec, SessionMode};
use crate::error::CoreError;

/// Predicts one point: one `RequestRecord` per request (timestamps from
/// `start_us` on the virtual clock), in the order they were sent.
pub fn predict_point(
    model: &ServerModel,
    spec: &RunSpec,
    requests: &[(PreparedRequest, u64)],
    start_us: i64,
) -> Result<(Vec<RequestRecord>, PredictStats), CoreError> {
    model.validate()?;
    let dependent = spec.sessions == SessionMode::Dependent;
    let mut planned = Vec::with_capacity(requests.len());
    for (req, lap) in requests {
        planned.push(plan(model, req, *lap)?);
    }
    // Units: a request, or a dependent session's turns (fed together, in order).
    let mut units: Vec<Vec<usize>> = Vec::new();
    for (i, (req, _)) in requests.iter().enumerate() {
        let same_session = dependent
            && i > 0
            && req.session.is_some()
            && planned[i].session.as_ref().map(|s| &s.0)
                == planned[i - 1].session.as_ref().map(|s| &s.0);
        match units.last_mut() {
            Some(unit) if same_session => unit.push(i),
            _ => units.push(vec![i]),
        }
    }
    if dependent {
        for unit in &units {
            if planned[unit[0]].session.is_some() {
                let turns = unit.len() as i32;
                for &r in unit {
                    planned[r].session_turns = Some(turns);
                }
            }
        }
    } else {
        for p in &mut planned {
            p.think_us = None;
        }
    }
    let mut sim = Des::new(model, planned, spec);
    if model.usage_probe && !requests.is_empty() {
        sim.warm_prefix(0);
    }
    match spec.load {
        LoadMode::Concurrency { concurrency } => {
            for u in 0..concurrency.min(units.len()) {
                sim.send_unit(&units, u, 0);
            }
            sim.next_unit = concurrency.min(units.len());
            sim.closed_loop = true;
        }
        load => {
            let mut schedule = Schedule::open_loop(load, spec.seed)
                .ok_or_else(|| CoreError::config("load", "no open-loop schedule"))?;
            for (u, unit) in units.iter().enumerate() {
                let (first, lap) = (&requests[unit[0]].0, requests[unit[0]].1);
                let at = schedule.next_offset_us(first.arrival_s, lap);
                sim.send_unit(&units, u, at);
            }
        }
    }
    sim.run(&units);
    let Des {
        mut records,
        sent_order,
        stats,
        ..
    } = sim;
    let mut out = Vec::with_capacity(sent_order.len());
    let first_send = sent_order
        .first()
        .and_then(|&i| records[i].sent_us)
        .unwrap_or(0);
    let mut last_end = first_send;
    for (index, &i) in sent_order.iter().enumerate() {
        let mut record = std::mem::take(&mut records[i]);
        record.request_index = index as i64;
        record.warmup = (index as u64) < spec.warmup;
        last_end = last_end.max(record.end_us.unwrap_or(first_send));
        shift(&mut record, start_us);
        out.push(record);
    }
    let stats = PredictStats {
        span_us: last_end - first_send,
        ..stats
    };
    Ok((out, stats))
}

/// Moves a record's virtual timestamps to start at `start_us`.
fn shift(record: &mut RequestRecord, start_us: i64) {
    record.scheduled_us += start_us;
    for ts in [
        &mut record.sent_us,
        &mut record.first_byte_us,
        &mut record.first_token_us,
        &mut record.first_reasoning_us,
        &mut record.first_content_us,
        &mut record.last_token_us,
        &mut record.end_us,
        &mut record.predecessor_end_us,
    ]
    .into_iter()
    .flatten()
    {
        *ts += start_us;
    }
    for chunk in &mut record.chunks {
        chunk.ts_us += start_us;
    }
}
