//! Sessions and the streamed feed, against the simulator and a recording
//! server, in Rust alone: a dependent turn waits for its predecessor and its
//! think time and is released on time, a slower server stretches a session,
//! independent mode keeps the schedule of requests on their own, a failed
//! turn ends its session, live history sends the answer the server gave, and
//! a streamed point runs what it is fed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use specreplay_core::engine::{
    self, record::ErrorKind, Arrival, LoadMode, PreparedRequest, RequestRecord, RunSpec,
    SessionMode,
};
use specreplay_core::sim::{SimConfig, SimServer};

fn spec(load: LoadMode, sessions: SessionMode) -> RunSpec {
    serde_json::from_value(
        json!({"load": {"mode": "concurrency", "concurrency": 1}, "timeout_s": 30.0}),
    )
    .map(|s: RunSpec| RunSpec {
        load,
        sessions,
        ..s
    })
    .unwrap()
}

fn constant(rate: f64) -> LoadMode {
    LoadMode::Rate {
        rate,
        arrival: Arrival::Constant,
        burstiness: 1.0,
    }
}

fn body(i: usize) -> Vec<u8> {
    json!({
        "model": "m", "stream": true,
        "stream_options": {"include_usage": true, "continuous_usage_stats": true},
        "messages": [{"role": "user", "content": format!("question {i}")}],
    })
    .to_string()
    .into_bytes()
}

/// `sessions` sessions of `turns` turns, `think_ms` apart, in feed order
/// (a session's turns together); session s starts at arrival s seconds.
fn sessions(url: &str, sessions: usize, turns: usize, think_ms: i64) -> Vec<PreparedRequest> {
    let mut out = Vec::new();
    for s in 0..sessions {
        for t in 0..turns {
            let id = format!("s{s}t{t}");
            let r =
                PreparedRequest::new(id, "chat", url, body(s * turns + t), (s + t) as f64).unwrap();
            let think = (t > 0).then_some(think_ms * 1000);
            out.push(r.in_session(&format!("s{s}"), t as i32, think));
        }
    }
    out
}

mod common;

/// Every record of `run`, by request index.
async fn drain(run: engine::EngineRun) -> Vec<RequestRecord> {
    let mut out = common::drain(run).await;
    out.sort_by_key(|r| r.request_index);
    out
}

async fn run(spec: RunSpec, requests: Vec<PreparedRequest>) -> Vec<RequestRecord> {
    drain(engine::start(spec, requests, &tokio::runtime::Handle::current()).unwrap()).await
}

async fn sim(tpot_ms: f64) -> SimServer {
    let config = SimConfig {
        ttft_ms: 10.0,
        prefill_us_per_token: 0.0,
        tpot_ms,
        reasoning_tokens: [4, 4],
        content_tokens: [4, 4],
        ..SimConfig::default()
    };
    SimServer::start(config, SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap()
}

fn by_session(records: &[RequestRecord]) -> BTreeMap<String, Vec<&RequestRecord>> {
    let mut out: BTreeMap<String, Vec<&RequestRecord>> = BTreeMap::new();
    for r in records {
        out.entry(r.session_id.as_deref().unwrap().to_string())
            .or_default()
            .push(r);
    }
    for turns in out.values_mut() {
        turns.sort_by_key(|r| r.turn_index);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_waits_for_its_predecessor_and_its_think_time() {
    let sim = sim(3.0).await;
    let url = format!("http://{}/v1/chat/completions", sim.local_addr());
    let records = run(
        spec(constant(20.0), SessionMode::Dependent),
        sessions(&url, 3, 3, 30),
    )
    .await;
    assert_eq!(records.len(), 9);
    let sessions = by_session(&records);
    let firsts: Vec<i64> = sessions.values().map(|t| t[0].scheduled_us).collect();
    // Sessions start on the rate schedule: 20/s, 50 ms apart.
    assert_eq!(
        firsts.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>(),
        vec![50_000, 50_000]
    );
    for turns in sessions.values() {
        assert_eq!(turns[0].predecessor_end_us, None);
        assert_eq!(turns[0].think_time_us, None);
        for w in turns.windows(2) {
            let (before, r) = (w[0], w[1]);
            assert_eq!(r.error, None);
            assert_eq!(r.predecessor_end_us, before.end_us);
            assert_eq!(r.think_time_us, Some(30_000));
            assert_eq!(r.scheduled_us, before.end_us.unwrap() + 30_000);
            assert!(r.sent_us.unwrap() >= r.scheduled_us, "sent before its time");
        }
        assert!(turns.iter().all(|r| r.session_turns == Some(3)));
    }
    sim.shutdown().await;
}

/// How long each session took, first send to last end, µs.
fn session_spans(records: &[RequestRecord]) -> Vec<i64> {
    by_session(records)
        .values()
        .map(|t| t.last().unwrap().end_us.unwrap() - t[0].sent_us.unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slower_server_stretches_sessions_and_a_faster_one_shrinks_them() {
    // Turns recorded 100 ms apart (speedup 10 of 1 s); a turn streams 8
    // tokens after 10 ms: 17 ms on the fast server, 185 ms on the slow one.
    let (fast, slow) = (sim(1.0).await, sim(25.0).await);
    let load = LoadMode::Speedup { speedup: 10.0 };
    let mut spans = Vec::new();
    for server in [&fast, &slow] {
        let url = format!("http://{}/v1/chat/completions", server.local_addr());
        let records = run(spec(load, SessionMode::Dependent), sessions(&url, 2, 4, 10)).await;
        assert!(records.iter().all(|r| r.error.is_none()));
        spans.push(session_spans(&records));
    }
    for (f, s) in spans[0].iter().zip(&spans[1]) {
        // Slow: at least its 4 turns of 185 ms, longer than the 300 ms recorded.
        assert!(*s >= 4 * 185_000, "slow session {s} µs");
        // Fast: well inside it (the recording's turns are 100 ms apart).
        assert!(s - f >= 300_000, "fast {f} µs, slow {s} µs");
    }
    // Independent, the same trace on the slow server sends turns at their
    // recorded times, before the turn they follow has ended.
    let url = format!("http://{}/v1/chat/completions", slow.local_addr());
    let records = run(
        spec(load, SessionMode::Independent),
        sessions(&url, 2, 4, 10),
    )
    .await;
    let early = by_session(&records)
        .values()
        .flat_map(|t| {
            t.windows(2)
                .map(|w| w[1].sent_us < w[0].end_us)
                .collect::<Vec<_>>()
        })
        .filter(|&e| e)
        .count();
    assert_eq!(early, 6, "turns sent before their predecessor ended");
    fast.shutdown().await;
    slow.shutdown().await;
}

/// Each row's `scheduled_us` after the point's first.
fn offsets(records: &[RequestRecord]) -> Vec<i64> {
    let zero = records.iter().map(|r| r.scheduled_us).min().unwrap();
    records.iter().map(|r| r.scheduled_us - zero).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn independent_mode_keeps_the_schedule_of_requests_on_their_own() {
    let sim = sim(1.0).await;
    let url = format!("http://{}/v1/chat/completions", sim.local_addr());
    let alone = |requests: Vec<PreparedRequest>| {
        requests
            .into_iter()
            .map(|r| PreparedRequest { session: None, ..r })
            .collect::<Vec<_>>()
    };
    for load in [
        LoadMode::Speedup { speedup: 50.0 },
        LoadMode::Rate {
            rate: 200.0,
            arrival: Arrival::Poisson,
            burstiness: 1.0,
        },
    ] {
        let independent = run(
            spec(load, SessionMode::Independent),
            sessions(&url, 3, 3, 5),
        )
        .await;
        let on_their_own = run(
            spec(load, SessionMode::Dependent),
            alone(sessions(&url, 3, 3, 5)),
        )
        .await;
        assert_eq!(offsets(&independent), offsets(&on_their_own), "{load:?}");
        assert!(independent.iter().all(|r| r.predecessor_end_us.is_none()
            && r.think_time_us.is_none()
            && r.session_turns.is_none()
            && r.session_id.is_some()));
    }
    // Speedup 50: the trace's arrivals (s + t seconds) over 50, in feed order.
    let independent = run(
        spec(
            LoadMode::Speedup { speedup: 50.0 },
            SessionMode::Independent,
        ),
        sessions(&url, 3, 3, 5),
    )
    .await;
    let want: Vec<i64> = (0..3)
        .flat_map(|s| (0..3).map(move |t| (s + t) * 20_000))
        .collect();
    assert_eq!(offsets(&independent), want);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_keeps_n_sessions_going() {
    let sim = sim(1.0).await;
    let url = format!("http://{}/v1/chat/completions", sim.local_addr());
    let load = LoadMode::Concurrency { concurrency: 2 };
    let records = run(spec(load, SessionMode::Dependent), sessions(&url, 5, 3, 5)).await;
    assert_eq!(records.len(), 15);
    // A user runs a session's turns in turn, then takes the next session:
    // never more than two sessions between their first send and last end.
    let spans: Vec<(i64, i64)> = by_session(&records)
        .values()
        .map(|t| (t[0].sent_us.unwrap(), t.last().unwrap().end_us.unwrap()))
        .collect();
    for &(start, _) in &spans {
        let open = spans
            .iter()
            .filter(|&&(s, e)| s <= start && start < e)
            .count();
        assert!(open <= 2, "{open} sessions going at once");
    }
    sim.shutdown().await;
}

/// A chat server that answers request n (from 0) with the content
/// `answer n`, 404s any other path, and keeps every body it received.
async fn recording_server() -> (SocketAddr, Arc<Mutex<Vec<Value>>>) {
    use http_body_util::{BodyExt, Full};
    use hyper::service::service_fn;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let bodies: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = bodies.clone();
    tokio::spawn(async move {
        loop {
            let (sock, _) = listener.accept().await.unwrap();
            let seen = seen.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let chat = req.uri().path() == "/v1/chat/completions";
                        let bytes = req.into_body().collect().await.unwrap().to_bytes();
                        if !chat {
                            return hyper::Response::builder()
                                .status(404)
                                .body(Full::<bytes::Bytes>::from("no such path"));
                        }
                        let n = {
                            let mut seen = seen.lock().unwrap();
                            seen.push(serde_json::from_slice(&bytes).unwrap());
                            seen.len() - 1
                        };
                        let chunk = json!({"choices": [{"index": 0, "delta": {"content": format!("answer {n}")}}]});
                        let usage = json!({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}});
                        let sse = format!("data: {chunk}\n\ndata: {usage}\n\ndata: [DONE]\n\n");
                        hyper::Response::builder()
                            .header("content-type", "text/event-stream")
                            .body(Full::<bytes::Bytes>::from(sse))
                    }
                });
                let io = hyper_util::rt::TokioIo::new(sock);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    (addr, bodies)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_ends_its_session_and_the_rest_are_never_sent() {
    let (addr, bodies) = recording_server().await;
    let url = format!("http://{addr}/v1/chat/completions");
    let mut requests = sessions(&url, 2, 4, 5);
    // Session 0's turn 1 goes to a path the server does not have.
    requests[1].uri = format!("http://{addr}/v1/nope").parse().unwrap();
    let records = run(
        spec(
            LoadMode::Concurrency { concurrency: 2 },
            SessionMode::Dependent,
        ),
        requests,
    )
    .await;
    assert_eq!(records.len(), 8);
    let sessions = by_session(&records);
    let failed = &sessions["s0"];
    assert!(matches!(failed[1].error, Some((ErrorKind::Http, _))));
    let failed_at = failed[1].end_us.unwrap();
    for (k, r) in failed.iter().enumerate().skip(2) {
        let (kind, message) = r.error.as_ref().unwrap();
        assert_eq!(*kind, ErrorKind::SkippedAfterFailure);
        assert!(message.contains("turn 1 (s0t1) failed: http"), "{message}");
        assert_eq!(
            (r.sent_us, r.end_us, r.scheduled_us),
            (None, None, failed_at)
        );
        assert_eq!(r.predecessor_end_us, (k == 2).then_some(failed_at));
    }
    assert!(sessions["s1"].iter().all(|r| r.error.is_none()));
    // Sent: s0's first two turns, and all of s1.
    assert_eq!(bodies.lock().unwrap().len(), 5);
}

/// A three-turn chat whose later turns carry the recorded answers `r0`, `r1`
/// (or, for live history, empty strings where the answers go, and their places).
fn conversation(url: &str, live: bool) -> Vec<PreparedRequest> {
    let answer = |k: usize| if live { String::new() } else { format!("r{k}") };
    let mut messages = Vec::new();
    let mut turns = Vec::new();
    for k in 0..3 {
        if k > 0 {
            messages.push(json!({"role": "assistant", "content": answer(k - 1)}));
        }
        messages.push(json!({"role": "user", "content": format!("q{k}")}));
        let body = json!({"model": "m", "stream": true, "messages": messages}).to_string();
        // Each empty string in the body is an earlier answer's place, in order.
        let history_at: Vec<Option<usize>> = body
            .match_indices(r#""content":"""#)
            .map(|(i, m)| Some(i + m.len() - 1))
            .collect();
        let mut turn =
            PreparedRequest::new(format!("t{k}"), "chat", url, body.into_bytes(), k as f64)
                .unwrap()
                .in_session("s", k as i32, (k > 0).then_some(1000));
        turn.session.as_mut().unwrap().history_at = history_at;
        turns.push(turn);
    }
    turns
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_history_sends_the_answers_the_server_gave() {
    for live in [true, false] {
        let (addr, bodies) = recording_server().await;
        let url = format!("http://{addr}/v1/chat/completions");
        let spec = RunSpec {
            live_history: live,
            ..spec(
                LoadMode::Concurrency { concurrency: 1 },
                SessionMode::Dependent,
            )
        };
        let records = run(spec, conversation(&url, live)).await;
        assert!(records
            .iter()
            .all(|r| r.error.is_none() && r.answer.is_none()));
        let bodies = bodies.lock().unwrap();
        let contents: Vec<&str> = bodies[2]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        // The server answered request n with "answer n".
        let want = if live {
            ["q0", "answer 0", "q1", "answer 1", "q2"]
        } else {
            ["q0", "r0", "q1", "r1", "q2"]
        };
        assert_eq!(contents, want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_point_runs_what_it_is_fed_lap_by_lap() {
    let sim = sim(1.0).await;
    let url = format!("http://{}/v1/chat/completions", sim.local_addr());
    let trace = || sessions(&url, 2, 2, 1);
    let load = LoadMode::Concurrency { concurrency: 2 };
    let run = engine::start_streamed(
        spec(load, SessionMode::Dependent),
        trace()[..2].to_vec(),
        &tokio::runtime::Handle::current(),
    )
    .unwrap();
    let feed = run.feed_handle();
    assert!(feed.wants_more());
    tokio::time::sleep(Duration::from_millis(50)).await;
    feed.push(trace()[2..].to_vec()).unwrap();
    feed.end_lap();
    feed.push(trace()).unwrap();
    feed.end();
    assert!(!feed.wants_more());
    let records = drain(run).await;
    let ids: Vec<&str> = records.iter().map(|r| r.trace_id.as_str()).collect();
    assert_eq!(
        ids,
        ["s0t0", "s0t1", "s1t0", "s1t1", "s0t0#1", "s0t1#1", "s1t0#1", "s1t1#1"]
    );
    // A session replayed again is another session: named by its lap.
    let sessions: Vec<&str> = records
        .iter()
        .map(|r| r.session_id.as_deref().unwrap())
        .collect();
    assert_eq!(
        sessions,
        ["s0", "s0", "s1", "s1", "s0#1", "s0#1", "s1#1", "s1#1"]
    );
    assert!(records.iter().all(|r| r.error.is_none()));
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_that_falls_behind_shows_as_send_lag() {
    let sim = sim(1.0).await;
    let url = format!("http://{}/v1/chat/completions", sim.local_addr());
    let one = |i: usize| PreparedRequest::new(format!("r{i}"), "chat", &url, body(i), 0.0).unwrap();
    let run = engine::start_streamed(
        spec(constant(100.0), SessionMode::Dependent),
        vec![one(0)],
        &tokio::runtime::Handle::current(),
    )
    .unwrap();
    let feed = run.feed_handle();
    // Nothing more for 300 ms: the units due at 10, 20, … ms are late.
    tokio::time::sleep(Duration::from_millis(300)).await;
    feed.push((1..5).map(one).collect()).unwrap();
    feed.end();
    let records = drain(run).await;
    assert_eq!(records.len(), 5);
    assert_eq!(offsets(&records), vec![0, 10_000, 20_000, 30_000, 40_000]);
    for r in &records[1..] {
        let lag = r.sent_us.unwrap() - r.scheduled_us;
        assert!(lag > 200_000, "lag {lag} µs");
    }
    sim.shutdown().await;
}
