//! What the recorder reads: each request as it arrived, then its response as
//! a finished record (status, times, the server's usage, finish reason,
//! error). The response bytes are decoded here, when the recorder takes them
//! ([`Captures::next`]), on its thread: the forwarding threads only keep the
//! frames they passed on.

use std::io::Read;
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use flate2::read::{MultiGzDecoder, ZlibDecoder};

use super::{ProxyEvent, RequestEvent, ResponseEvent};
use crate::decode::summary::{is_event_stream, summarize};
use crate::decode::Usage;

/// Largest inflated response decoded; a larger one is recorded without usage.
const MAX_INFLATED_BYTES: u64 = 256 << 20;

/// A request's response, finished and decoded: the `response` object of a
/// captured trace record (docs/trace-format.md).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CapturedResponse {
    /// The request's [`RequestEvent::seq`].
    pub seq: u64,
    /// The upstream's status, or the proxy's own (502, 400, 413).
    pub status: u16,
    /// Response head, µs after the request's arrival (None: no head was sent).
    pub ttfb_us: Option<i64>,
    /// Last byte, break or abandonment, µs after the request's arrival.
    pub end_us: i64,
    /// The server's usage reports, merged (None where never reported, and
    /// for a body that was not decoded: unknown API, cut, too large, an
    /// unknown encoding, or bytes that do not decode).
    pub usage: Usage,
    pub finish_reason: Option<String>,
    /// What went wrong: the forwarding's error (upstream unreachable, client
    /// gone, ...), else the error the response carried, else a stream that
    /// ended without its end marker.
    pub error: Option<String>,
    /// The answer's text ([`ResponseSummary::answer`]), by which the recorder
    /// finds the request that continues this conversation; never written.
    /// None when the body was not decoded.
    ///
    /// [`ResponseSummary::answer`]: crate::decode::summary::ResponseSummary::answer
    pub answer: Option<String>,
}

/// One report, in the order the proxy made them (a request's before its response's).
#[derive(Debug, Clone)]
pub enum Captured {
    Request(RequestEvent),
    Response(CapturedResponse),
}

/// The reading end of a proxy's reports.
pub struct Captures {
    rx: Mutex<mpsc::Receiver<ProxyEvent>>,
}

impl Captures {
    pub(crate) fn new(rx: mpsc::Receiver<ProxyEvent>) -> Self {
        Captures { rx: Mutex::new(rx) }
    }

    /// Waits up to `wait` for reports and returns up to `max` of them (maybe
    /// none), responses decoded; None once the proxy has stopped and every
    /// report was read.
    pub fn next(&self, max: usize, wait: Duration) -> Option<Vec<Captured>> {
        let rx = self.rx.lock().unwrap_or_else(|p| p.into_inner());
        let first = match rx.recv_timeout(wait) {
            Ok(first) => first,
            Err(mpsc::RecvTimeoutError::Timeout) => return Some(Vec::new()),
            Err(mpsc::RecvTimeoutError::Disconnected) => return None,
        };
        let mut raw = vec![first];
        while raw.len() < max.max(1) {
            match rx.try_recv() {
                Ok(event) => raw.push(event),
                Err(_) => break,
            }
        }
        drop(rx);
        Some(
            raw.into_iter()
                .map(|event| match event {
                    ProxyEvent::Request(r) => Captured::Request(r),
                    ProxyEvent::Response(r) => Captured::Response(decode(r)),
                })
                .collect(),
        )
    }
}

fn decode(r: ResponseEvent) -> CapturedResponse {
    let mut out = CapturedResponse {
        seq: r.seq,
        status: r.status,
        ttfb_us: r.ttfb_us,
        end_us: r.end_us,
        error: r.error,
        ..CapturedResponse::default()
    };
    let Some(api) = r.api else {
        return out;
    };
    if r.body.is_empty() || r.truncated {
        return out;
    }
    let Some(body) = inflate(r.body.concat(), &r.content_encoding) else {
        return out;
    };
    let Ok(summary) = summarize(api, &body, &r.content_type) else {
        // Not this API's format (an HTML error page, a broken stream): the
        // status and times still say what happened.
        return out;
    };
    out.usage = summary.usage;
    out.finish_reason = summary.finish_reason;
    out.answer = Some(summary.answer);
    if out.error.is_none() {
        out.error = summary.error.or_else(|| {
            (is_event_stream(&r.content_type) && !summary.complete)
                .then(|| "stream ended without its end marker".to_string())
        });
    }
    out
}

/// The body without its `Content-Encoding`: gzip or deflate (either header,
/// as servers mix them up), or None for an encoding we do not decode.
fn inflate(body: Vec<u8>, encoding: &str) -> Option<Vec<u8>> {
    let encoding = encoding.trim().to_ascii_lowercase();
    if encoding.is_empty() || encoding == "identity" {
        return Some(body);
    }
    if encoding != "gzip" && encoding != "deflate" {
        return None;
    }
    let mut out = Vec::new();
    let read = if body.starts_with(&[0x1f, 0x8b]) {
        MultiGzDecoder::new(&body[..])
            .take(MAX_INFLATED_BYTES + 1)
            .read_to_end(&mut out)
    } else {
        ZlibDecoder::new(&body[..])
            .take(MAX_INFLATED_BYTES + 1)
            .read_to_end(&mut out)
    };
    (read.is_ok() && out.len() as u64 <= MAX_INFLATED_BYTES).then_some(out)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use bytes::Bytes;
    use flate2::write::{GzEncoder, ZlibEncoder};
    use flate2::Compression;

    use super::*;
    use crate::decode::Dialect;

    const SSE: &[u8] =
        b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n";

    fn event(body: &[u8], encoding: &str, error: Option<&str>) -> ResponseEvent {
        ResponseEvent {
            seq: 7,
            api: Some(Dialect::Chat),
            status: 200,
            ttfb_us: Some(10),
            end_us: 20,
            content_type: "text/event-stream".into(),
            content_encoding: encoding.into(),
            // Split anywhere: the frames are joined before decoding.
            body: vec![
                Bytes::copy_from_slice(&body[..5]),
                Bytes::copy_from_slice(&body[5..]),
            ],
            truncated: false,
            error: error.map(str::to_string),
        }
    }

    #[test]
    fn a_stream_is_decoded_and_its_missing_end_marker_is_an_error() {
        let got = decode(event(SSE, "", None));
        assert_eq!(
            (got.seq, got.status, got.ttfb_us, got.end_us),
            (7, 200, Some(10), 20)
        );
        assert_eq!(got.usage.completion_tokens, Some(1));
        assert_eq!(got.finish_reason.as_deref(), Some("stop"));
        assert_eq!(got.answer.as_deref(), Some(""));
        assert_eq!(
            got.error.as_deref(),
            Some("stream ended without its end marker")
        );
        let done = [SSE, b"data: [DONE]\n\n"].concat();
        assert_eq!(decode(event(&done, "identity", None)).error, None);
        // The forwarding's own error wins.
        let cut = decode(event(SSE, "", Some("client disconnected")));
        assert_eq!(cut.error.as_deref(), Some("client disconnected"));
    }

    #[test]
    fn gzip_and_deflate_bodies_are_inflated() {
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(SSE).unwrap();
        let got = decode(event(&gz.finish().unwrap(), "gzip", None));
        assert_eq!(got.usage.prompt_tokens, Some(3));
        let mut zlib = ZlibEncoder::new(Vec::new(), Compression::default());
        zlib.write_all(SSE).unwrap();
        let got = decode(event(&zlib.finish().unwrap(), "deflate", None));
        assert_eq!(got.usage.prompt_tokens, Some(3));
    }

    #[test]
    fn what_cannot_be_decoded_keeps_status_and_times_only() {
        for (body, encoding) in [
            (SSE, "br"),
            (b"not gzip at all".as_ref(), "gzip"),
            (b"data: {not json}\n\n".as_ref(), ""),
        ] {
            let got = decode(event(body, encoding, None));
            assert_eq!(
                (got.status, got.usage.clone(), got.error, got.answer),
                (200, Usage::default(), None, None)
            );
        }
        let mut unknown = event(SSE, "", None);
        unknown.api = None;
        assert_eq!(decode(unknown).usage, Usage::default());
    }
}
