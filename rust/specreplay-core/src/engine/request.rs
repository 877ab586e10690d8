//! Sends one request and reads its response, timestamping every read.
//!
//! The timestamp is taken the moment hyper hands over the bytes of a read,
//! before any parsing, so parsing cost never shifts a measurement.

use std::time::Duration;

use http::header::{HeaderMap, ACCEPT, CONTENT_TYPE};
use http_body_util::{BodyExt, Full};
use tokio_util::sync::CancellationToken;

use crate::clock::now_us;
use crate::decode::{decode_body, decoder_for, Record};
use crate::sse::{SseEvent, SseParser};

use super::accounting::StreamAccount;
use super::http::HttpClient;
use super::record::{ErrorKind, RequestRecord};
use super::spec::PreparedRequest;

/// Most of an error body worth keeping in a message.
const ERROR_BODY_LIMIT: usize = 2048;
/// A non-streaming answer larger than this is refused rather than buffered.
const JSON_BODY_LIMIT: usize = 64 << 20;

pub struct RequestContext {
    pub client: HttpClient,
    pub headers: HeaderMap,
    pub timeout: Option<Duration>,
    pub cancel: CancellationToken,
}

type Failure = (ErrorKind, String);

/// Runs `req` to completion, timeout or cancellation, filling `rec`.
pub async fn execute(ctx: &RequestContext, req: &PreparedRequest, rec: &mut RequestRecord) {
    let mut account = StreamAccount::default();
    let mut decode_error: Option<String> = None;
    let outcome = {
        let exchange = exchange(ctx, req, rec, &mut account, &mut decode_error);
        let timeout = async {
            match ctx.timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            out = exchange => out,
            _ = timeout => Err((ErrorKind::Timeout, format!("no complete response within {:.1} s", ctx.timeout.unwrap_or_default().as_secs_f64()))),
            _ = ctx.cancel.cancelled() => Err((ErrorKind::Cancelled, "run cancelled".to_string())),
        }
    };
    rec.end_us = Some(now_us());
    let done = account.done;
    let stream_error = account.stream_error.take();
    account.finish_into(rec);
    rec.error = match (outcome, stream_error, decode_error) {
        (Err(failure), _, _) => Some(failure),
        (Ok(()), Some(msg), _) => Some((ErrorKind::StreamError, msg)),
        (Ok(()), None, Some(msg)) => Some((ErrorKind::Decode, msg)),
        (Ok(()), None, None) if !done => Some((
            ErrorKind::Truncated,
            "the stream ended without its terminal event ([DONE], message_stop or response.completed)".to_string(),
        )),
        (Ok(()), None, None) => None,
    };
}

/// How many times a request is sent again after its pooled connection turned
/// out to be closed.
const STALE_RETRIES: usize = 2;

/// Whether the connection closed before any byte of a response: the race of
/// reusing a keep-alive connection the server is closing. llama.cpp's server
/// closes the connection after every streamed response while announcing
/// `Keep-Alive: timeout=5, max=100`, so the next request on it fails this way
/// unless the close was seen first. No response came, so the request is sent
/// again on a fresh connection (`sent_us` stays the first attempt's: the
/// few microseconds lost count against the server).
fn closed_before_response(e: &hyper_util::client::legacy::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            return h.is_incomplete_message();
        }
        source = s.source();
    }
    false
}

async fn exchange(
    ctx: &RequestContext,
    req: &PreparedRequest,
    rec: &mut RequestRecord,
    account: &mut StreamAccount,
    decode_error: &mut Option<String>,
) -> Result<(), Failure> {
    let build = || {
        let mut builder = http::Request::post(req.uri.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "text/event-stream, application/json");
        for (name, value) in &ctx.headers {
            builder = builder.header(name, value);
        }
        builder.body(Full::new(req.body.clone())).map_err(|e| {
            (
                ErrorKind::Connect,
                format!("could not build the request: {e}"),
            )
        })
    };
    let mut request = build()?;

    rec.sent_us = Some(now_us());
    let mut attempt = 0;
    let response = loop {
        match ctx.client.request(request).await {
            Ok(response) => break response,
            // A keep-alive connection the server closed as we reused it.
            Err(e) if attempt < STALE_RETRIES && closed_before_response(&e) => {
                attempt += 1;
                request = build()?;
            }
            Err(e) => return Err((ErrorKind::Connect, error_chain(&e))),
        }
    };
    rec.first_byte_us = Some(now_us());
    let status = response.status();
    rec.http_status = Some(i32::from(status.as_u16()));
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let mut body = response.into_body();

    if !status.is_success() {
        let snippet = read_limited(&mut body, ERROR_BODY_LIMIT).await;
        return Err((
            ErrorKind::Http,
            format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&snippet).trim()
            ),
        ));
    }
    if content_type.starts_with("application/json") {
        let bytes = read_limited(&mut body, JSON_BODY_LIMIT).await;
        let ts = now_us();
        match decode_body(req.dialect, &bytes) {
            Ok(records) => {
                account.on_event(ts, &records);
                account.done = true;
            }
            Err(e) => *decode_error = Some(e.to_string()),
        }
        return Ok(());
    }
    if !content_type.starts_with("text/event-stream") {
        let snippet = read_limited(&mut body, ERROR_BODY_LIMIT).await;
        return Err((
            ErrorKind::Decode,
            format!(
                "expected an event stream, got content-type {content_type:?}: {}",
                String::from_utf8_lossy(&snippet).trim()
            ),
        ));
    }

    let mut parser = SseParser::new();
    let mut decoder = decoder_for(req.dialect);
    let mut events: Vec<SseEvent> = Vec::new();
    let mut records: Vec<Record> = Vec::new();
    let mut on_events = |ts: i64, events: &mut Vec<SseEvent>, account: &mut StreamAccount| {
        for event in events.drain(..) {
            records.clear();
            match decoder.decode(&event, &mut records) {
                Ok(()) => account.on_event(ts, &records),
                Err(e) => {
                    decode_error.get_or_insert_with(|| e.to_string());
                }
            }
        }
    };
    loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                let ts = now_us();
                if let Some(data) = frame.data_ref() {
                    if let Err(e) = parser.feed(data, &mut events) {
                        // Keep what the read completed; the stream cannot be trusted past this.
                        on_events(ts, &mut events, account);
                        return Err((ErrorKind::Decode, e.to_string()));
                    }
                    on_events(ts, &mut events, account);
                }
            }
            Some(Err(e)) => return Err((ErrorKind::Stream, error_chain(&e))),
            None => break,
        }
    }
    let ts = now_us();
    match parser.finish() {
        Ok(Some(last)) => {
            events.push(last);
            on_events(ts, &mut events, account);
        }
        Ok(None) => {}
        Err(e) => return Err((ErrorKind::Decode, e.to_string())),
    }
    Ok(())
}

async fn read_limited(body: &mut hyper::body::Incoming, limit: usize) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < limit {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let take = data.len().min(limit - out.len());
                    out.extend_from_slice(&data[..take]);
                }
            }
            _ => break,
        }
    }
    out
}

/// "outer: inner: root" — hyper's top-level errors alone ("client error
/// (Connect)") do not say what went wrong.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_msg = s.to_string();
        if !msg.contains(&s_msg) {
            msg.push_str(": ");
            msg.push_str(&s_msg);
        }
        source = s.source();
    }
    msg
}
