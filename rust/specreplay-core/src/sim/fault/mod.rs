//! Fault injection: the kinds of failure the simulator can imitate and the
//! seeded draw that picks at most one per request. What acts on them lives
//! beside this file, one job each: `stats` (the per-server counters),
//! `conn` (the per-connection kill switch that ends a TCP connection with an
//! RST, as a crashed server or a load balancer would), `corrupt` (the byte
//! surgery on payloads) and `staged` (a plain JSON answer sent in timed
//! pieces). See "Fault injection" in `docs/simulator.md`.

mod conn;
mod corrupt;
mod staged;
mod stats;

pub use conn::{ConnControl, SimIo};
pub use corrupt::{half_on_char, poison_utf8, truncated_event, INVALID_UTF8, SENTINEL};
pub use staged::{StagedBody, StagedEnd};
pub use stats::FaultStats;

use std::collections::BTreeMap;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

/// How long a resetting body waits after its last piece was handed to hyper
/// before it pulls the switch (so the piece is flushed first), and how long
/// the dead body lingers before it ends (the connection is long gone by then;
/// this only frees an h2 stream task).
pub(super) const RESET_FLUSH: Duration = Duration::from_millis(10);
pub(super) const DEAD_LINGER: Duration = Duration::from_secs(1);

/// The request header that forces a fault (or `none`) on one request.
pub const FAULT_HEADER: &str = "x-specreplay-fault";

/// One kind of failure, as it looks on the wire. The declaration order is the
/// order of the cumulative draw, so it is part of what a seed reproduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// The request is read, then the connection is reset; no status line.
    ResetBeforeHeaders,
    /// Headers and half the tokens, then the connection is reset.
    ResetMidStream,
    /// 429 with `Retry-After` and a JSON error body.
    #[serde(rename = "http_429")]
    Http429,
    /// 500 with a JSON error body.
    #[serde(rename = "http_500")]
    Http500,
    /// 503 with a JSON error body.
    #[serde(rename = "http_503")]
    Http503,
    /// Headers, then `fault_stall_ms` more silence before the first token.
    StallBeforeFirstToken,
    /// A silent gap of `fault_stall_ms` halfway through the stream.
    StallBetweenTokens,
    /// One extra `data:` event halfway whose payload is truncated JSON.
    MalformedJson,
    /// The event halfway has the bytes `\xff\xfe` at the end of its text.
    InvalidUtf8,
    /// The stream ends cleanly without `data: [DONE]`.
    MissingDone,
    /// Halfway, a `data: {"error": ...}` event and `[DONE]` (as vLLM does).
    ErrorEvent,
    /// 200 with `content-type: text/html` and an HTML page.
    NonSseBody,
    /// The event halfway is padded to `fault_oversized_bytes`.
    OversizedEvent,
    /// `fault_slow_headers_ms` before the status line, then a normal answer.
    SlowHeaders,
}

impl FaultKind {
    pub const ALL: [FaultKind; 14] = [
        FaultKind::ResetBeforeHeaders,
        FaultKind::ResetMidStream,
        FaultKind::Http429,
        FaultKind::Http500,
        FaultKind::Http503,
        FaultKind::StallBeforeFirstToken,
        FaultKind::StallBetweenTokens,
        FaultKind::MalformedJson,
        FaultKind::InvalidUtf8,
        FaultKind::MissingDone,
        FaultKind::ErrorEvent,
        FaultKind::NonSseBody,
        FaultKind::OversizedEvent,
        FaultKind::SlowHeaders,
    ];

    /// The snake_case name used in configs, the header and the stats.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::ResetBeforeHeaders => "reset_before_headers",
            FaultKind::ResetMidStream => "reset_mid_stream",
            FaultKind::Http429 => "http_429",
            FaultKind::Http500 => "http_500",
            FaultKind::Http503 => "http_503",
            FaultKind::StallBeforeFirstToken => "stall_before_first_token",
            FaultKind::StallBetweenTokens => "stall_between_tokens",
            FaultKind::MalformedJson => "malformed_json",
            FaultKind::InvalidUtf8 => "invalid_utf8",
            FaultKind::MissingDone => "missing_done",
            FaultKind::ErrorEvent => "error_event",
            FaultKind::NonSseBody => "non_sse_body",
            FaultKind::OversizedEvent => "oversized_event",
            FaultKind::SlowHeaders => "slow_headers",
        }
    }

    pub fn parse(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// `a, b, c`: for error messages.
    pub fn names() -> String {
        FaultKind::ALL.map(FaultKind::as_str).join(", ")
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What the fault header asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forced {
    /// `none`: a clean answer whatever the configured fractions.
    None,
    Kind(FaultKind),
}

impl Forced {
    /// Parses the header value; `Err` is the 400 message.
    pub fn parse(value: &[u8]) -> Result<Forced, String> {
        let name = std::str::from_utf8(value).unwrap_or("").trim();
        if name == "none" {
            return Ok(Forced::None);
        }
        FaultKind::parse(name).map(Forced::Kind).ok_or_else(|| {
            format!(
                "{FAULT_HEADER}: unknown fault kind {name:?}; valid kinds: none, {}",
                FaultKind::names()
            )
        })
    }
}

/// Salt of the fault stream, so it is independent of the per-request length draws.
const FAULT_SALT: u64 = 0xFA17_5EED_0BAD_C0DE;

/// The fault of request number `seq` under `seed`: one uniform draw from a
/// ChaCha8 stream keyed by (seed, seq), compared with the cumulative
/// fractions in `FaultKind` order. Independent of timing and concurrency.
pub fn draw(seed: u64, seq: u64, fractions: &BTreeMap<FaultKind, f64>) -> Option<FaultKind> {
    if fractions.values().all(|&f| f <= 0.0) {
        return None;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ FAULT_SALT);
    rng.set_stream(seq);
    let u: f64 = rng.random();
    let mut acc = 0.0;
    for (&kind, &fraction) in fractions {
        acc += fraction;
        if u < acc {
            return Some(kind);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_serde() {
        for kind in FaultKind::ALL {
            assert_eq!(FaultKind::parse(kind.as_str()), Some(kind));
            let de: FaultKind = serde_json::from_value(kind.as_str().into()).unwrap();
            assert_eq!(de, kind);
            assert_eq!(FaultKind::ALL[kind.index()], kind);
        }
        assert_eq!(Forced::parse(b" none "), Ok(Forced::None));
        assert_eq!(
            Forced::parse(b"http_503"),
            Ok(Forced::Kind(FaultKind::Http503))
        );
        let e = Forced::parse(b"http_504").unwrap_err();
        assert!(
            e.contains("http_504") && e.contains("reset_mid_stream"),
            "{e}"
        );
    }

    #[test]
    fn draw_is_seeded_and_follows_the_fractions() {
        let fractions = BTreeMap::from([(FaultKind::Http503, 0.25), (FaultKind::MissingDone, 0.5)]);
        let seq = |seed| {
            (0..4000)
                .map(|n| draw(seed, n, &fractions))
                .collect::<Vec<_>>()
        };
        let a = seq(1);
        assert_eq!(a, seq(1));
        assert_ne!(a, seq(2));
        let count = |k| a.iter().filter(|f| **f == Some(k)).count();
        // 4000 draws: sd of a 0.25 count is ~27, of 0.5 ~32; 5 sd bounds.
        assert!((865..=1135).contains(&count(FaultKind::Http503)));
        assert!((1840..=2160).contains(&count(FaultKind::MissingDone)));
        assert!(draw(1, 0, &BTreeMap::new()).is_none());
        let all = BTreeMap::from([(FaultKind::NonSseBody, 1.0)]);
        assert!((0..100).all(|n| draw(3, n, &all) == Some(FaultKind::NonSseBody)));
    }
}
