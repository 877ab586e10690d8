//! A panic in a request's task must not lose its row. Request tasks are
//! spawned detached, so a panic would otherwise vanish with the task: no row,
//! and the feed's count of units in flight never reaching zero (the point
//! would never end). Each send is run under `catch_unwind`; a panic becomes
//! an `engine_panic` row carrying the panic's message, and the unit goes on
//! to report its other turns. A panic outside a send (building a row,
//! splicing history) is caught around the whole unit: its unreported turns
//! become `engine_panic` rows too, and the unit is counted finished.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;

use super::record::{ErrorKind, RequestRecord};
use crate::clock::now_us;

/// Runs `fut`; a panic inside it comes back as its message.
///
/// A combinator, not an `async fn`: an `async fn` keeps its argument in its
/// state beside the future it awaits, so every request's state machine was
/// held twice at each of the two nestings (per unit and per send). That
/// cost about 10 KiB per stream in flight (bench/client_bench.py's memory
/// part: 23.5 to 35 KiB at 1,024 streams, found by bisection).
pub fn caught<F: Future>(fut: F) -> impl Future<Output = Result<F::Output, String>> {
    // Unwind safety: on a panic the only state the caller reads again is
    // the row being filled, which it then marks as failed.
    AssertUnwindSafe(fut)
        .catch_unwind()
        .map(|outcome| outcome.map_err(|payload| message(payload.as_ref())))
}

/// The text of a panic payload (`panic!` gives a `&str` or a `String`).
pub fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// Marks `rec` as the row of a request whose task panicked.
pub fn mark(rec: &mut RequestRecord, message: &str) {
    rec.end_us = Some(now_us());
    rec.error = Some((
        ErrorKind::EnginePanic,
        format!("the engine panicked while running this request: {message}"),
    ));
}

/// The trace id that makes a request's task panic, in the crate's own tests
/// only (there is no way to ask for it in a build that users run).
#[cfg(test)]
pub const PANIC_TRACE_ID: &str = "__specreplay_test_panic__";

/// Test builds: panics when asked to by the request's trace id.
#[cfg(test)]
pub fn panic_if_asked(trace_id: &str) {
    if trace_id == PANIC_TRACE_ID {
        panic!("test-asked panic in request {trace_id}");
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use super::*;
    use crate::engine::{self, LoadMode, PreparedRequest, RunSpec, SessionMode};
    use crate::sim::{SimConfig, SimServer};

    fn spec(load: LoadMode) -> RunSpec {
        RunSpec {
            headers: vec![],
            load,
            num_requests: None,
            duration_s: None,
            max_concurrency: None,
            warmup: 0,
            timeout_s: Some(30.0),
            stall_timeout_s: None,
            retries: 0,
            seed: 1,
            server_stamps: false,
            chunk_text: false,
            preconnect: None,
            sessions: SessionMode::Dependent,
            live_history: false,
            start_at_us: None,
            share: None,
        }
    }

    fn request(url: &str, id: &str) -> PreparedRequest {
        let body = serde_json::json!({
            "model": "m",
            "stream": true,
            "messages": [{"role": "user", "content": id}],
        });
        PreparedRequest::new(
            id.to_string(),
            "chat",
            url,
            body.to_string().into_bytes(),
            0.0,
        )
        .unwrap()
    }

    async fn drain(mut run: engine::EngineRun) -> Vec<RequestRecord> {
        let mut out = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while let Some(batch) = run.next_records(64, Duration::from_millis(50)).await {
            out.extend(batch);
            assert!(
                tokio::time::Instant::now() < deadline,
                "the run did not end"
            );
        }
        out
    }

    #[test]
    fn catching_a_panic_does_not_hold_the_future_twice() {
        // A request's state machine is kilobytes; as an `async fn`, `caught`
        // kept its argument beside the future it awaited (twice the size).
        let request = async {
            let buffer = [7u8; 4096];
            std::future::ready(()).await;
            std::hint::black_box(&buffer);
        };
        let alone = std::mem::size_of_val(&request);
        let wrapped = caught(request);
        assert!(
            std::mem::size_of_val(&wrapped) < alone + 64,
            "{} bytes caught, {alone} alone",
            std::mem::size_of_val(&wrapped)
        );
    }

    #[test]
    fn a_payloads_text_is_its_message() {
        let text = std::panic::catch_unwind(|| panic!("boom {}", 7)).unwrap_err();
        assert_eq!(message(text.as_ref()), "boom 7");
        let literal = std::panic::catch_unwind(|| panic!("plain")).unwrap_err();
        assert_eq!(message(literal.as_ref()), "plain");
        let other = std::panic::catch_unwind(|| std::panic::panic_any(3_u8)).unwrap_err();
        assert_eq!(message(other.as_ref()), "a panic without a message");
    }

    /// Open and closed loop: the panicking request is one `engine_panic`
    /// row with the panic's message, the others are served, and the point
    /// ends (the feed counted the unit finished).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_request_task_still_yields_its_row() {
        let config = SimConfig {
            ttft_ms: 1.0,
            tpot_ms: 0.5,
            reasoning_tokens: [2, 3],
            content_tokens: [2, 3],
            ..SimConfig::default()
        };
        let sim = SimServer::start(config, SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let url = format!("http://{}/v1/chat/completions", sim.local_addr());
        let loads = [
            LoadMode::Concurrency { concurrency: 2 },
            LoadMode::Rate {
                rate: 200.0,
                arrival: engine::Arrival::Constant,
                burstiness: 1.0,
            },
        ];
        for load in loads {
            let requests: Vec<_> = ["a", PANIC_TRACE_ID, "b", "c"]
                .iter()
                .map(|id| request(&url, id))
                .collect();
            let run =
                engine::start(spec(load), requests, &tokio::runtime::Handle::current()).unwrap();
            let records = drain(run).await;
            assert_eq!(records.len(), 4, "{load:?}");
            for r in &records {
                if r.trace_id == PANIC_TRACE_ID {
                    let (kind, msg) = r.error.as_ref().expect("the panicked row is an error");
                    assert_eq!(*kind, ErrorKind::EnginePanic);
                    assert!(msg.contains("test-asked panic"), "{msg}");
                    assert_eq!(r.request_index, 1);
                    assert!(r.end_us.is_some());
                } else {
                    assert!(r.error.is_none(), "{:?}", r.error);
                }
            }
        }
        sim.shutdown().await;
    }
}
