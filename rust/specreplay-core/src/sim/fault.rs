//! Fault injection: the kinds of failure the simulator can imitate, the
//! seeded draw that picks at most one per request, the per-server counters,
//! and the per-connection kill switch that lets a handler (or a body) close
//! its TCP connection abruptly — with an RST, as a crashed server or a load
//! balancer would. See "Fault injection" in `docs/simulator.md`.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;

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

/// Per-server counters, served as JSON by `GET /sim/stats`.
#[derive(Default)]
pub struct FaultStats {
    /// Generation requests that got a sequence number (valid requests).
    requests: AtomicU64,
    /// Generation requests answered 400 before that.
    rejected: AtomicU64,
    /// Requests whose fault (or `none`) came from the header.
    forced: AtomicU64,
    injected: [AtomicU64; FaultKind::ALL.len()],
}

impl FaultStats {
    pub fn count_request(&self, fault: Option<FaultKind>, forced: bool) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if forced {
            self.forced.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(kind) = fault {
            self.injected[kind.index()].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn count_rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// `{"requests", "rejected", "forced", "faults_total", "faults": {kind: n, ...}}`.
    pub fn to_json(&self) -> Vec<u8> {
        let mut faults = serde_json::Map::new();
        let mut total = 0;
        for kind in FaultKind::ALL {
            let n = self.injected[kind.index()].load(Ordering::Relaxed);
            total += n;
            faults.insert(kind.as_str().into(), n.into());
        }
        let body = serde_json::json!({
            "requests": self.requests.load(Ordering::Relaxed),
            "rejected": self.rejected.load(Ordering::Relaxed),
            "forced": self.forced.load(Ordering::Relaxed),
            "faults_total": total,
            "faults": faults,
        });
        serde_json::to_vec(&body).expect("serializing stats into memory cannot fail")
    }
}

/// A connection's kill switch, shared by its handlers, bodies and the task
/// that drives it. `reset()` ends the connection with an RST, `close()` with
/// a plain FIN; either way the server drops the connection at once.
#[derive(Default)]
pub struct ConnControl {
    reset: AtomicBool,
    notify: Notify,
}

impl ConnControl {
    /// Drop the connection with `SO_LINGER` 0: the peer gets an RST.
    pub fn reset(&self) {
        self.reset.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// Drop the connection with an ordinary close (FIN).
    pub fn close(&self) {
        self.notify.notify_one();
    }

    /// Resolves once `reset()` or `close()` was called.
    pub async fn killed(&self) {
        self.notify.notified().await;
    }
}

/// The accepted socket as hyper sees it: a `TcpStream` that, when dropped
/// after `ConnControl::reset`, sets `SO_LINGER` 0 first so the kernel sends
/// an RST instead of a FIN.
pub struct SimIo {
    stream: TcpStream,
    control: std::sync::Arc<ConnControl>,
}

impl SimIo {
    pub fn new(stream: TcpStream, control: std::sync::Arc<ConnControl>) -> SimIo {
        SimIo { stream, control }
    }
}

impl Drop for SimIo {
    fn drop(&mut self) {
        if self.control.reset.load(Ordering::SeqCst) {
            // Linger 0 with a non-blocking close: no wait, an RST.
            let _ = socket2::SockRef::from(&self.stream).set_linger(Some(Duration::ZERO));
        }
    }
}

impl AsyncRead for SimIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for SimIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// Appended to a text before rendering; its JSON escape `\u0001` is then
/// replaced by the invalid bytes (model text never holds a control character).
pub const SENTINEL: char = '\u{1}';
const SENTINEL_JSON: &[u8] = b"\\u0001";
/// What `invalid_utf8` puts inside the JSON string.
pub const INVALID_UTF8: &[u8] = b"\xff\xfe";

/// The text a fault decorates: the content if there is any, else the reasoning.
pub fn last_text<'a>(reasoning: &'a mut String, content: &'a mut String) -> &'a mut String {
    if content.is_empty() && !reasoning.is_empty() {
        reasoning
    } else {
        content
    }
}

/// `json` with each escaped `SENTINEL` replaced by `\xff\xfe`.
pub fn poison_utf8(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len());
    let mut rest = json;
    while let Some(i) = memchr::memmem::find(rest, SENTINEL_JSON) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(INVALID_UTF8);
        rest = &rest[i + SENTINEL_JSON.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// About half of `text`'s length, backed off to the start of a UTF-8
/// character, so a cut there breaks the JSON and nothing else.
pub fn half_on_char(text: &[u8]) -> usize {
    let mut cut = text.len() / 2;
    // UTF-8 continuation bytes are 0b10xxxxxx.
    while cut > 0 && (text[cut] & 0xC0) == 0x80 {
        cut -= 1;
    }
    cut
}

/// A `data: {...}\n\n` event cut inside its JSON: `data: ` and the first
/// half of the payload (on a character boundary), then the blank line.
pub fn truncated_event(event: &[u8]) -> Vec<u8> {
    let payload = event
        .strip_prefix(b"data: ")
        .unwrap_or(event)
        .strip_suffix(b"\n\n")
        .unwrap_or(event);
    let cut = half_on_char(payload);
    let mut out = b"data: ".to_vec();
    out.extend_from_slice(&payload[..cut]);
    out.extend_from_slice(b"\n\n");
    out
}

/// How a `StagedBody` ends after its last piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StagedEnd {
    /// The body ends as usual.
    Complete,
    /// The connection is reset (RST).
    Reset,
    /// The connection is closed (FIN), short of the declared length.
    Close,
}

/// A non-streaming answer sent in timed pieces, for the faults that act on
/// the body of a plain JSON answer: each piece waits for its instant, and
/// the end may kill the connection.
pub struct StagedBody {
    pieces: std::collections::VecDeque<(tokio::time::Instant, bytes::Bytes)>,
    end: StagedEnd,
    control: std::sync::Arc<ConnControl>,
    sleep: Pin<Box<tokio::time::Sleep>>,
    /// Set once the switch is pulled; the body then ends at `sleep`.
    killed: bool,
    done: bool,
}

impl StagedBody {
    pub fn new(
        pieces: Vec<(tokio::time::Instant, bytes::Bytes)>,
        end: StagedEnd,
        control: std::sync::Arc<ConnControl>,
    ) -> StagedBody {
        StagedBody {
            pieces: pieces.into(),
            end,
            control,
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            killed: false,
            done: false,
        }
    }
}

impl hyper::body::Body for StagedBody {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if this.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if this.killed {
                this.done = true;
                continue;
            }
            if let Some((at, _)) = this.pieces.front() {
                if *at > tokio::time::Instant::now() {
                    let at = *at;
                    this.sleep.as_mut().reset(at);
                    continue;
                }
                let (_, bytes) = this.pieces.pop_front().expect("front exists");
                if this.pieces.is_empty() && this.end != StagedEnd::Complete {
                    // Let hyper flush this piece before the switch is pulled.
                    let at = tokio::time::Instant::now() + RESET_FLUSH;
                    this.sleep.as_mut().reset(at);
                }
                return Poll::Ready(Some(Ok(hyper::body::Frame::data(bytes))));
            }
            match this.end {
                StagedEnd::Complete => this.done = true,
                StagedEnd::Reset | StagedEnd::Close => {
                    if this.end == StagedEnd::Reset {
                        this.control.reset();
                    } else {
                        this.control.close();
                    }
                    // The connection goes now; end the body later (h2's stream task).
                    this.killed = true;
                    let at = tokio::time::Instant::now() + DEAD_LINGER;
                    this.sleep.as_mut().reset(at);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
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

    #[test]
    fn byte_surgery() {
        let json =
            serde_json::to_vec(&serde_json::json!({"content": format!(" hmm{SENTINEL}")})).unwrap();
        assert_eq!(
            poison_utf8(&json),
            b"{\"content\":\" hmm\xff\xfe\"}".to_vec()
        );
        let cut = truncated_event(b"data: {\"a\":\"\xc3\xa9\xc3\xa9\"}\n\n");
        assert!(cut.starts_with(b"data: {") && cut.ends_with(b"\n\n"));
        let payload = &cut[6..cut.len() - 2];
        assert!(std::str::from_utf8(payload).is_ok());
        assert!(serde_json::from_slice::<serde_json::Value>(payload).is_err());
    }
}
