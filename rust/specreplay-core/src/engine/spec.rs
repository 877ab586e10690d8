//! What one sweep point runs: the target, the load mode, the limits, and the
//! requests, already shaped by the Python layer. The spec is deserialised by
//! serde from the Python mapping typed `RunSpec` in `_core.pyi` (the binding
//! reads it with `pythonize`), so both sides share this one definition and
//! unknown keys fail. A new field is one line here (with a serde default) and
//! one key in that TypedDict.

use bytes::Bytes;
use serde::Deserialize;

use crate::decode::Dialect;
use crate::error::CoreError;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// Extra request headers, e.g. `Authorization`. Never recorded anywhere.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    pub load: LoadMode,
    /// Requests to send; defaults to the number of prepared requests. More than
    /// that loops over the trace.
    #[serde(default)]
    pub num_requests: Option<u64>,
    /// Stop scheduling new requests after this many seconds.
    #[serde(default)]
    pub duration_s: Option<f64>,
    /// Cap on requests in flight in the open-loop modes.
    #[serde(default)]
    pub max_concurrency: Option<usize>,
    /// The first `warmup` requests are flagged so summaries leave them out.
    #[serde(default)]
    pub warmup: u64,
    /// Whole-request timeout (retries included).
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// Fail a request when no bytes arrive for this long.
    #[serde(default)]
    pub stall_timeout_s: Option<f64>,
    /// Extra attempts after a connection failure, a 429 or a 5xx (0: none —
    /// a retry changes the load the server sees).
    #[serde(default)]
    pub retries: u32,
    /// Seeds the arrival process.
    #[serde(default)]
    pub seed: u64,
    /// Benchmarking aid, off by default: keep the `"sim_sent_us"` stamp that
    /// the simulator (with `send_timestamps` on) puts in every chunk, as a
    /// `chunk_server_ts_us` column appended to the batches (see
    /// `batch::Extras`). The results-file columns
    /// are unchanged; `bench/client_bench.py` compares the two clocks.
    #[serde(default)]
    pub server_stamps: bool,
    /// Keep every chunk's text for a tokenizer to count after the point
    /// (`replay --tokenizer`): the batches carry `chunk_text` and
    /// `chunk_text_chars` too (`batch::Extras`). Off, the engine keeps no
    /// text (memory per stream).
    #[serde(default)]
    pub chunk_text: bool,
    /// Open the connections before the clock starts, so the first requests
    /// do not pay for (or queue behind) a storm of handshakes. None: on for
    /// closed loop, and for a rate enough for its first arrivals; off for
    /// recorded timing (`RunSpec::preconnections`).
    #[serde(default)]
    pub preconnect: Option<bool>,
    /// How the turns of a session are sent (requests without a session are
    /// on their own either way).
    #[serde(default)]
    pub sessions: SessionMode,
    /// Dependent sessions only: each turn carries the answers the server
    /// generated for the session's earlier turns, in place of the recorded
    /// ones (at the places its `Turn::history_at` gives). The engine keeps
    /// answer text only then.
    #[serde(default)]
    pub live_history: bool,
    /// When the point's clock starts, in µs on this process's anchored clock
    /// (`clock::now_us`): a distributed replay gives every worker the same
    /// instant, corrected by its measured offset. None: as soon as the
    /// connections are open. An instant already past starts at once (the
    /// lateness shows as send lag).
    #[serde(default)]
    pub start_at_us: Option<i64>,
    /// This process's share of the point in a distributed replay: the full
    /// schedule is computed (same seed, same request indices) and only the
    /// units this worker owns are sent (`Share`).
    #[serde(default)]
    pub share: Option<Share>,
}

/// Whether a session's turns wait for each other.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SessionMode {
    /// A turn is sent when the turn before it in its session has ended, plus
    /// its think time; the load mode schedules sessions (their first turns).
    #[default]
    Dependent,
    /// Every request on its own, at its own place in the schedule, as if the
    /// trace had no sessions.
    Independent,
}

/// One worker's share of a point in a distributed replay: every worker
/// reads the same requests in the same order and computes the full schedule
/// (same seed, same request indices and due times); the feed keeps only the
/// units this worker owns (`share::Dealer`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Share {
    pub worker: u32,
    pub workers: u32,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum LoadMode {
    /// Open loop at `rate` requests/s.
    Rate {
        rate: f64,
        #[serde(default)]
        arrival: Arrival,
        /// Gamma shape; 1.0 is Poisson. Only read for `Arrival::Gamma`.
        #[serde(default = "one")]
        burstiness: f64,
    },
    /// Open loop at the trace's own arrival offsets divided by `speedup`.
    Speedup { speedup: f64 },
    /// Closed loop: `concurrency` requests in flight, each sent when one ends.
    Concurrency { concurrency: usize },
}

fn one() -> f64 {
    1.0
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Arrival {
    #[default]
    Poisson,
    Constant,
    Gamma,
}

/// One request as the engine sends it.
#[derive(Debug, Clone)]
pub struct PreparedRequest {
    pub trace_id: String,
    pub dialect: Dialect,
    pub uri: http::Uri,
    pub body: Bytes,
    /// Arrival offset in the trace, seconds from its start.
    pub arrival_s: f64,
    /// The session it belongs to, and its place there; None on its own.
    pub session: Option<Turn>,
    /// The model it asks for, copied to its row (`model` column).
    pub model: Option<std::sync::Arc<str>>,
    /// The media its body carries, copied to its row.
    pub media: Option<Media>,
}

/// The media parts of one request body (images, audio, video), as the
/// Python layer counted them when it shaped the request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Media {
    pub count: i32,
    pub bytes: i64,
    /// Images' (and videos' frames') width × height, summed.
    pub pixels: i64,
    /// Audio clips' length, summed.
    pub seconds: f64,
}

/// A request's place in its session.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub session_id: std::sync::Arc<str>,
    /// From 0, in trace order.
    pub index: i32,
    /// How long after the previous turn's end to send this one (None: at once).
    pub think_time_us: Option<i64>,
    /// With `live_history`: where in the body the answers the server
    /// generated for the session's earlier turns go, element j for turn j (a
    /// byte offset between the quotes of an empty JSON string: the recorded
    /// answer is not in the body then; None: that answer is not in it).
    pub history_at: Vec<Option<usize>>,
}

impl PreparedRequest {
    pub fn new(
        trace_id: String,
        api: &str,
        url: &str,
        body: Vec<u8>,
        arrival_s: f64,
    ) -> Result<Self, CoreError> {
        let dialect: Dialect = api
            .parse()
            .map_err(|e| CoreError::config(format!("request {trace_id}: api"), format!("{e}")))?;
        let uri: http::Uri = url.parse().map_err(|e| {
            CoreError::config(format!("request {trace_id}: url"), format!("{url:?}: {e}"))
        })?;
        match uri.scheme_str() {
            Some("http") | Some("https") => {}
            _ => {
                return Err(CoreError::config(
                    "url",
                    format!("{url:?}: only http:// and https:// targets are supported"),
                ))
            }
        }
        Ok(PreparedRequest {
            trace_id,
            dialect,
            uri,
            body: Bytes::from(body),
            arrival_s,
            session: None,
            model: None,
            media: None,
        })
    }

    /// The same request as turn `index` of `session_id`.
    pub fn in_session(mut self, session_id: &str, index: i32, think_time_us: Option<i64>) -> Self {
        self.session = Some(Turn {
            session_id: session_id.into(),
            index,
            think_time_us,
            history_at: Vec::new(),
        });
        self
    }
}

/// The arrivals a rate's default preconnections are sized for: the
/// connections they need if none of them has finished yet. A storm of
/// handshakes only hurts at thousands of requests per second, whose requests
/// are short: at 4,000/s the embedded simulator's 4-token answers took
/// 150 ms, so 50 ms of arrivals (200 connections) left 240 to open in the
/// run's first 0.2 s, with its send lag p99 there still 6.8 ms. A slow rate
/// opens one or a few (its first requests then hold no handshake, as a
/// closed loop's do not); an idle connection costs a socket on each side.
pub const WARM_WINDOW_S: f64 = 0.25;

/// The idle connections an open loop without `max_concurrency` keeps per
/// origin (a closed loop keeps one per worker).
pub const OPEN_LOOP_MAX_IDLE: usize = 1024;

/// Connections a rate opens before the clock by default (`preconnections`):
/// no more than the pool would keep idle.
fn warm_connections(rate: f64, max_concurrency: Option<usize>) -> usize {
    let cap = max_concurrency.unwrap_or(OPEN_LOOP_MAX_IDLE);
    ((rate * WARM_WINDOW_S).ceil() as usize).clamp(1, cap.max(1))
}

impl RunSpec {
    /// How many connections to open before the clock starts. Closed loop:
    /// one per concurrent request (on by default). Open loop, asked to: one
    /// per `max_concurrency`. A rate, by default: enough for the arrivals of
    /// its first [`WARM_WINDOW_S`] (at least one, at most the in-flight cap).
    /// Without them a high rate's first requests each open a connection, the
    /// handshakes slow the requests they should serve, so more requests find
    /// no idle connection and open one too: at 4,000/s of short requests the
    /// first 0.2 s opened about 680 connections (connect p99 5–24 ms), and
    /// the send lag of those 0.2 s made the whole point `client_saturated`
    /// (docs/benchmarks.md). Recorded
    /// timing (`speedup`) has no rate to size them by and connects as it
    /// arrives, as do rates asked not to (`--no-preconnect`).
    pub fn preconnections(&self) -> Result<usize, CoreError> {
        match (self.load, self.preconnect) {
            (_, Some(false)) => Ok(0),
            (LoadMode::Concurrency { concurrency }, _) => Ok(concurrency),
            (LoadMode::Rate { rate, .. }, None) => Ok(warm_connections(rate, self.max_concurrency)),
            (_, None) => Ok(0),
            (_, Some(true)) => self.max_concurrency.ok_or_else(|| {
                CoreError::config(
                    "preconnect",
                    "an open-loop run opens --max-concurrency connections before the clock: set --max-concurrency, or leave --preconnect off",
                )
            }),
        }
    }

    /// Checks ranges; errors name the field by its path in the spec
    /// (`load.rate`, `timeout_s`). `engine::start` calls it for every spec,
    /// however built.
    pub fn validate(&self) -> Result<(), CoreError> {
        let positive = |v: f64, field: &str| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(CoreError::config(
                    field,
                    format!("must be a positive number, got {v}"),
                ))
            }
        };
        match self.load {
            LoadMode::Rate {
                rate, burstiness, ..
            } => {
                positive(rate, "load.rate")?;
                positive(burstiness, "load.burstiness")?;
            }
            LoadMode::Speedup { speedup } => positive(speedup, "load.speedup")?,
            LoadMode::Concurrency { concurrency } => {
                if concurrency == 0 {
                    return Err(CoreError::config("load.concurrency", "must be at least 1"));
                }
            }
        }
        for (field, value) in [
            ("duration_s", self.duration_s),
            ("timeout_s", self.timeout_s),
            ("stall_timeout_s", self.stall_timeout_s),
        ] {
            if let Some(v) = value {
                positive(v, field)?;
            }
        }
        if self.max_concurrency == Some(0) {
            return Err(CoreError::config("max_concurrency", "must be at least 1"));
        }
        if let Some(share) = &self.share {
            if share.workers == 0 || share.worker >= share.workers {
                return Err(CoreError::config(
                    "share",
                    format!(
                        "worker {} of {}: must be below workers",
                        share.worker, share.workers
                    ),
                ));
            }
        }
        self.preconnections()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(load: serde_json::Value, extra: serde_json::Value) -> RunSpec {
        let mut json = serde_json::json!({"load": load});
        json.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(json).unwrap()
    }

    fn rate(rate: f64) -> serde_json::Value {
        serde_json::json!({"mode": "rate", "rate": rate})
    }

    #[test]
    fn a_rate_opens_its_first_arrivals_connections_unless_told_not_to() {
        let none = serde_json::json!({});
        // ceil(rate × 250 ms), at least one.
        assert_eq!(
            spec(rate(2000.0), none.clone()).preconnections().unwrap(),
            500
        );
        assert_eq!(spec(rate(8.0), none.clone()).preconnections().unwrap(), 2);
        assert_eq!(spec(rate(0.5), none.clone()).preconnections().unwrap(), 1);
        // No more than the point may have in flight, or the pool keeps idle.
        let capped = serde_json::json!({"max_concurrency": 64});
        assert_eq!(spec(rate(4000.0), capped).preconnections().unwrap(), 64);
        assert_eq!(
            spec(rate(1e6), none.clone()).preconnections().unwrap(),
            OPEN_LOOP_MAX_IDLE
        );
        let off = serde_json::json!({"preconnect": false});
        assert_eq!(spec(rate(4000.0), off).preconnections().unwrap(), 0);
        // Recorded timing has no rate to size them by.
        let speedup = serde_json::json!({"mode": "speedup", "speedup": 1.0});
        assert_eq!(spec(speedup, none).preconnections().unwrap(), 0);
    }

    #[test]
    fn asked_for_an_open_loop_opens_max_concurrency_and_needs_it() {
        let asked = serde_json::json!({"preconnect": true, "max_concurrency": 32});
        assert_eq!(spec(rate(4000.0), asked).preconnections().unwrap(), 32);
        let unset = serde_json::json!({"preconnect": true});
        let err = spec(rate(4.0), unset).preconnections().unwrap_err();
        assert!(err.to_string().contains("max-concurrency"), "{err}");
        let closed = serde_json::json!({"mode": "concurrency", "concurrency": 8});
        assert_eq!(
            spec(closed, serde_json::json!({}))
                .preconnections()
                .unwrap(),
            8
        );
    }
}
