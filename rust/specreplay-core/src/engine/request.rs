//! Sends one request and reads its response, timestamping every read.
//!
//! A body frame's stamp is the kernel's receive stamp of the socket read that
//! completed it (`net`), found the moment hyper hands the frame over and
//! before any parsing; the engine's own stamp, taken at that moment too, is
//! kept as the delay between the two, and is the stamp itself where the
//! kernel gave none.

use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderMap, ACCEPT, CONTENT_TYPE};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio_util::sync::CancellationToken;

use crate::clock::now_us;
use crate::decode::{decode_body, decoder_for, Record};
use crate::error::error_chain;
use crate::sse::{SseEvent, SseParser};

use super::accounting::StreamAccount;
use super::http::{send_resending_stale, HttpClient};
use super::interrupt::unless;
use super::net::{ConnLog, FrameClock};
use super::record::{ErrorKind, RequestRecord, Stamp};
use super::spec::PreparedRequest;

/// Most of an error body worth keeping in a message.
const ERROR_BODY_LIMIT: usize = 2048;
/// A non-streaming answer larger than this is refused rather than buffered.
const JSON_BODY_LIMIT: usize = 64 << 20;

pub struct RequestContext {
    pub client: HttpClient,
    pub headers: HeaderMap,
    /// Whole-request limit, retries included.
    pub timeout: Option<Duration>,
    /// Longest wait for the next bytes (response head or body).
    pub stall_timeout: Option<Duration>,
    /// Extra attempts after a connection failure, a 429 or a 5xx before any body.
    pub retries: u32,
    /// Header values that must never appear in a recorded message.
    pub secrets: Vec<String>,
    pub cancel: CancellationToken,
    /// Keep each chunk's `sim_sent_us` (`RunSpec::server_stamps`).
    pub server_stamps: bool,
    /// Keep the answer's text in the record (`RunSpec::live_history`).
    pub keep_answer: bool,
    /// Keep each chunk's text (`RunSpec::chunk_text`).
    pub chunk_text: bool,
}

type Failure = (ErrorKind, String);

/// First retry after half a second, doubling; a server's Retry-After wins up to this cap.
const RETRY_BASE: Duration = Duration::from_millis(500);
const RETRY_AFTER_CAP: Duration = Duration::from_secs(60);

/// What one attempt left behind, beyond the record's fields.
#[derive(Default)]
struct Attempt {
    account: StreamAccount,
    decode_error: Option<String>,
    retry_after: Option<Duration>,
}

/// Runs `req` to completion, timeout or cancellation, filling `rec`. With
/// retries, `sent_us` is the first attempt's send (latencies then include the
/// failed attempts, as a user would wait through them) and `attempts` says
/// how many were made.
pub async fn execute(ctx: &RequestContext, req: &PreparedRequest, rec: &mut RequestRecord) {
    let deadline = ctx.timeout.map(|t| tokio::time::Instant::now() + t);
    let (outcome, attempt, attempts) = attempt_with_retries(ctx, req, rec, deadline).await;
    rec.end_us = Some(now_us());
    rec.attempts = attempts as i32;
    let Attempt {
        mut account,
        decode_error,
        ..
    } = attempt;
    let done = account.done;
    let stream_error = account.stream_error.take();
    account.finish_into(rec);
    // The head precedes the first chunk on the wire, so the first chunk's
    // kernel stamp bounds it too (over HTTP/2 the head's own stamp is the
    // engine's, possibly taken after that chunk arrived).
    if let (Some(head), Some(first)) = (rec.first_byte_us, rec.first_token_us) {
        rec.first_byte_us = Some(head.min(first));
    }
    rec.error = request_error(outcome, stream_error, decode_error, done);
    if let Some((_, message)) = &mut rec.error {
        scrub(message, &ctx.secrets);
    }
}

/// Sends `req` until an attempt is not worth repeating or the retries are
/// spent, backing off in between. Returns the last attempt's outcome, what
/// it left behind, and how many attempts were made.
async fn attempt_with_retries(
    ctx: &RequestContext,
    req: &PreparedRequest,
    rec: &mut RequestRecord,
    deadline: Option<tokio::time::Instant>,
) -> (Result<(), Failure>, Attempt, u32) {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut attempt = Attempt {
            account: StreamAccount::new(ctx.keep_answer, ctx.chunk_text),
            ..Attempt::default()
        };
        let outcome = unless(
            exchange(ctx, req, rec, &mut attempt),
            interrupted(ctx, deadline),
        )
        .await
        .unwrap_or_else(Err);
        if !worth_retrying(&outcome, rec) || attempts > ctx.retries {
            return (outcome, attempt, attempts);
        }
        let backoff = attempt
            .retry_after
            .unwrap_or(RETRY_BASE * 2u32.saturating_pow(attempts - 1))
            .min(RETRY_AFTER_CAP);
        if let Err(failure) = unless(tokio::time::sleep(backoff), interrupted(ctx, deadline)).await
        {
            return (Err(failure), attempt, attempts);
        }
        rec.first_byte_us = None;
        rec.http_status = None;
    }
}

/// What ends an attempt or a backoff early: the whole-request deadline or
/// the run's cancellation (polled only when it fires: `interrupt`).
async fn interrupted(ctx: &RequestContext, deadline: Option<tokio::time::Instant>) -> Failure {
    let expired = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = expired => (
            ErrorKind::Timeout,
            format!(
                "no complete response within {:.1} s",
                ctx.timeout.unwrap_or_default().as_secs_f64()
            ),
        ),
        _ = ctx.cancel.cancelled() => (ErrorKind::Cancelled, "run cancelled".to_string()),
    }
}

/// A connection failure, a 429 or a 5xx that may pass: worth another attempt.
fn worth_retrying(outcome: &Result<(), Failure>, rec: &RequestRecord) -> bool {
    match outcome {
        Err((ErrorKind::Connect, _)) => true,
        Err((ErrorKind::Http, _)) => matches!(rec.http_status, Some(429 | 500 | 502 | 503 | 504)),
        _ => false,
    }
}

/// The request's error: the attempt's failure first, then an error event in
/// the stream, a payload that would not decode, and a stream cut before its
/// terminal event.
fn request_error(
    outcome: Result<(), Failure>,
    stream_error: Option<String>,
    decode_error: Option<String>,
    done: bool,
) -> Option<Failure> {
    match (outcome, stream_error, decode_error) {
        (Err(failure), _, _) => Some(failure),
        (Ok(()), Some(msg), _) => Some((ErrorKind::StreamError, msg)),
        (Ok(()), None, Some(msg)) => Some((ErrorKind::Decode, msg)),
        (Ok(()), None, None) if !done => Some((
            ErrorKind::Truncated,
            "the stream ended without its terminal event ([DONE], message_stop or response.completed)".to_string(),
        )),
        (Ok(()), None, None) => None,
    }
}

/// Servers echo credentials in error bodies ("invalid key sk-…"): a recorded
/// message never carries one.
fn scrub(message: &mut String, secrets: &[String]) {
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        if message.contains(secret.as_str()) {
            *message = message.replace(secret.as_str(), "<redacted>");
        }
    }
}

/// `fut`, or a `stall` failure if it takes longer than the stall timeout.
async fn unless_stalled<T>(
    stall: Option<Duration>,
    fut: impl std::future::Future<Output = T>,
) -> Result<T, Failure> {
    match stall {
        None => Ok(fut.await),
        Some(limit) => tokio::time::timeout(limit, fut).await.map_err(|_| {
            (
                ErrorKind::Stall,
                format!("no bytes from the server for {:.1} s", limit.as_secs_f64()),
            )
        }),
    }
}

/// One attempt: send, read the head, then the body the head announces.
async fn exchange(
    ctx: &RequestContext,
    req: &PreparedRequest,
    rec: &mut RequestRecord,
    attempt: &mut Attempt,
) -> Result<(), Failure> {
    let response = send(ctx, req, rec).await?;
    let Head {
        status,
        content_type,
        mut clock,
        mut body,
    } = read_head(response, rec, &mut attempt.retry_after);
    if !status.is_success() {
        let snippet = error_snippet(&mut body, &mut clock).await;
        return Err((ErrorKind::Http, format!("HTTP {status}: {snippet}")));
    }
    if content_type.starts_with("application/json") {
        read_json_body(req, body, clock, attempt).await;
        return Ok(());
    }
    if !content_type.starts_with("text/event-stream") {
        let snippet = error_snippet(&mut body, &mut clock).await;
        return Err((
            ErrorKind::Decode,
            format!("expected an event stream, got content-type {content_type:?}: {snippet}"),
        ));
    }
    read_sse_body(ctx, req, body, clock, attempt).await
}

/// Sends the request, again on a fresh connection when a pooled one turns
/// out to have been closed by the server (`http::send_resending_stale`).
/// `sent_us` is the first send's.
async fn send(
    ctx: &RequestContext,
    req: &PreparedRequest,
    rec: &mut RequestRecord,
) -> Result<http::Response<Incoming>, Failure> {
    let mut builder = http::Request::post(req.uri.clone())
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "text/event-stream, application/json");
    for (name, value) in &ctx.headers {
        builder = builder.header(name, value);
    }
    let (head, ()) = builder
        .body(())
        .map_err(|e| {
            (
                ErrorKind::Connect,
                format!("could not build the request: {e}"),
            )
        })?
        .into_parts();
    rec.sent_us.get_or_insert_with(now_us);
    let sent = send_resending_stale(&ctx.client, &head, &req.body);
    unless_stalled(ctx.stall_timeout, sent)
        .await?
        .map_err(|e| (ErrorKind::Connect, e))
}

/// What the response head says, and the body to read.
struct Head {
    status: http::StatusCode,
    /// Lowercased, "" when absent.
    content_type: String,
    clock: FrameClock,
    body: Incoming,
}

/// Records the head's time, status and (for a request that opened its
/// connection) the connection's set-up time; keeps `Retry-After`. The head's
/// time is the kernel stamp of the response's first byte over HTTP/1.1 (the
/// first read after the request was written), else the engine's stamp now.
fn read_head(
    response: http::Response<Incoming>,
    rec: &mut RequestRecord,
    retry_after: &mut Option<Duration>,
) -> Head {
    // The connection's log, put in the response by hyper-util (`Connected::extra`).
    let log = response.extensions().get::<Arc<ConnLog>>().cloned();
    rec.first_byte_us = Some(
        log.as_ref()
            .and_then(|log| log.response_start())
            .unwrap_or_else(now_us),
    );
    let status = response.status();
    rec.http_status = Some(i32::from(status.as_u16()));
    let headers = response.headers();
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    *retry_after = headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64);
    if let Some(connect_us) = log.as_ref().and_then(|log| log.claim_connect_us()) {
        // Every connection this request had to open (a retry may open another).
        rec.connect_us = Some(rec.connect_us.unwrap_or(0) + connect_us);
    }
    Head {
        status,
        content_type,
        clock: FrameClock::new(log),
        body: response.into_body(),
    }
}

/// A whole JSON answer (`stream: false`): decoded once complete, stamped
/// with the read that completed it.
async fn read_json_body(
    req: &PreparedRequest,
    mut body: Incoming,
    mut clock: FrameClock,
    attempt: &mut Attempt,
) {
    let (bytes, stamp) = read_limited(&mut body, JSON_BODY_LIMIT, &mut clock).await;
    match decode_body(req.dialect, &bytes) {
        Ok(records) => {
            attempt.account.on_event(stamp, &records);
            attempt.account.done = true;
        }
        Err(e) => attempt.decode_error = Some(e.to_string()),
    }
}

/// An event stream: every event completed by a frame gets that frame's stamp.
async fn read_sse_body(
    ctx: &RequestContext,
    req: &PreparedRequest,
    mut body: Incoming,
    mut clock: FrameClock,
    attempt: &mut Attempt,
) -> Result<(), Failure> {
    let Attempt {
        account,
        decode_error,
        ..
    } = attempt;
    let mut parser = SseParser::new();
    let mut decoder = decoder_for(req.dialect);
    let mut events: Vec<SseEvent> = Vec::new();
    let mut records: Vec<Record> = Vec::new();
    let server_stamps = ctx.server_stamps;
    let mut on_events = |stamp: Stamp, events: &mut Vec<SseEvent>, account: &mut StreamAccount| {
        for event in events.drain(..) {
            records.clear();
            match decoder.decode(&event, &mut records) {
                Ok(()) => {
                    account.on_event(stamp, &records);
                    if server_stamps {
                        account.stamp_new_chunks(sim_sent_us(&event.data));
                    }
                }
                Err(e) => {
                    decode_error.get_or_insert_with(|| e.to_string());
                }
            }
        }
    };
    loop {
        match unless_stalled(ctx.stall_timeout, body.frame()).await? {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let stamp = clock.stamp(data);
                    if let Err(e) = parser.feed(data, &mut events) {
                        // Keep what the read completed; the stream cannot be trusted past this.
                        on_events(stamp, &mut events, account);
                        return Err((ErrorKind::Decode, e.to_string()));
                    }
                    on_events(stamp, &mut events, account);
                }
            }
            Some(Err(e)) => return Err((ErrorKind::Stream, error_chain(&e))),
            None => break,
        }
    }
    // An event without its closing blank line ends with the stream: the end
    // of the stream is what completed it, and that has no kernel stamp.
    let stamp = Stamp::from(now_us());
    match parser.finish() {
        Ok(Some(last)) => {
            events.push(last);
            on_events(stamp, &mut events, account);
        }
        Ok(None) => {}
        Err(e) => return Err((ErrorKind::Decode, e.to_string())),
    }
    Ok(())
}

/// The integer after the first `"sim_sent_us":` in an event's JSON (the
/// simulator's send stamp, `send_timestamps` on), if there is one.
fn sim_sent_us(data: &str) -> Option<i64> {
    const KEY: &[u8] = b"\"sim_sent_us\":";
    let at = memchr::memmem::find(data.as_bytes(), KEY)? + KEY.len();
    let rest = data[at..].trim_start();
    let end = rest
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
        .map_or(rest.len(), |(i, _)| i);
    rest[..end].parse().ok()
}

/// The start of a body that is not the answer, as text for a message.
async fn error_snippet(body: &mut Incoming, clock: &mut FrameClock) -> String {
    let (bytes, _) = read_limited(body, ERROR_BODY_LIMIT, clock).await;
    String::from_utf8_lossy(&bytes).trim().to_string()
}

/// Up to `limit` bytes of the body, and the stamp of the frame that
/// completed them (the engine's stamp now if the body was empty).
async fn read_limited(
    body: &mut Incoming,
    limit: usize,
    clock: &mut FrameClock,
) -> (Vec<u8>, Stamp) {
    let mut out = Vec::new();
    let mut stamp = None;
    while out.len() < limit {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    stamp = Some(clock.stamp(data));
                    let take = data.len().min(limit - out.len());
                    out.extend_from_slice(&data[..take]);
                }
            }
            _ => break,
        }
    }
    (out, stamp.unwrap_or_else(|| Stamp::from(now_us())))
}

#[cfg(test)]
mod tests {
    use super::sim_sent_us;

    #[test]
    fn reads_the_simulator_stamp() {
        assert_eq!(
            sim_sent_us(r#"{"id":"x","sim_sent_us":1732900000123456}"#),
            Some(1_732_900_000_123_456)
        );
        assert_eq!(
            sim_sent_us(r#"{"sim_sent_us": 42, "choices":[]}"#),
            Some(42)
        );
        assert_eq!(
            sim_sent_us(r#"{"choices":[{"delta":{"content":"x"}}]}"#),
            None
        );
        assert_eq!(sim_sent_us(r#"{"sim_sent_us":"soon"}"#), None);
        assert_eq!(sim_sent_us("[DONE]"), None);
    }
}
