//! Routing and the request handlers: `/health`, `/v1/models`, `/sim/stats`,
//! `/v1/chat/completions`, `/v1/completions`; JSON errors for the rest.
//! Fault injection happens here: the fault is chosen once the request is
//! read, and either answered here (resets, error statuses, HTML, slow
//! headers) or handed to the body (`SseStream`, `StagedBody`).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{header, Method, Request, Response, StatusCode};

use super::fault::{self, ConnControl, FaultKind, Forced, StagedBody, StagedEnd, FAULT_HEADER};
use super::render::{self, Renderer, Usage};
use super::request::{Endpoint, SimRequest};
use super::script::Script;
use super::server::Shared;
use super::stream::{SseStream, StreamFault};

/// Largest request body read (a long prompt fits; a runaway upload does not).
const MAX_BODY: usize = 64 << 20;

/// The response body: a whole JSON document or a timed SSE stream.
pub enum SimBody {
    Full(Option<Bytes>),
    Stream(Box<SseStream>),
    /// A plain answer sent in timed pieces (faults on non-streaming answers).
    Staged(Box<StagedBody>),
}

impl Body for SimBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            SimBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            SimBody::Stream(stream) => Pin::new(stream.as_mut()).poll_frame(cx),
            SimBody::Staged(staged) => Pin::new(staged.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            SimBody::Full(bytes) => bytes.is_none(),
            SimBody::Stream(stream) => stream.is_end_stream(),
            SimBody::Staged(staged) => staged.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            SimBody::Full(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            SimBody::Stream(_) | SimBody::Staged(_) => SizeHint::default(),
        }
    }
}

fn json(status: StatusCode, body: Vec<u8>) -> Response<SimBody> {
    let mut resp = Response::new(SimBody::Full(Some(Bytes::from(body))));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response<SimBody> {
    json(status, render::error_body(message, kind, status.as_u16()))
}

pub(crate) async fn handle(
    shared: Arc<Shared>,
    control: Arc<ConnControl>,
    req: Request<Incoming>,
) -> Result<Response<SimBody>, Infallible> {
    let arrived = Instant::now();
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let resp = match (method, path.as_str()) {
        (Method::GET, "/health") => json(StatusCode::OK, Vec::new()),
        (Method::GET, "/v1/models") => json(
            StatusCode::OK,
            render::models_body(&shared.model, shared.created, shared.config.max_model_len),
        ),
        (Method::GET, "/sim/stats") => json(StatusCode::OK, shared.stats.to_json()),
        (Method::POST, "/v1/chat/completions") => {
            generate(&shared, &control, Endpoint::Chat, req, arrived).await
        }
        (Method::POST, "/v1/completions") => {
            generate(&shared, &control, Endpoint::Completions, req, arrived).await
        }
        (
            _,
            "/health" | "/v1/models" | "/sim/stats" | "/v1/chat/completions" | "/v1/completions",
        ) => error(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method not allowed",
        ),
        (_, other) => error(
            StatusCode::NOT_FOUND,
            "not_found_error",
            &format!("no route for {other}"),
        ),
    };
    Ok(resp)
}

async fn generate(
    shared: &Shared,
    control: &Arc<ConnControl>,
    endpoint: Endpoint,
    req: Request<Incoming>,
    mut arrived: Instant,
) -> Response<SimBody> {
    let bad = |msg: &str| {
        shared.stats.count_rejected();
        error(StatusCode::BAD_REQUEST, "invalid_request_error", msg)
    };
    let forced = match req
        .headers()
        .get(FAULT_HEADER)
        .map(|v| Forced::parse(v.as_bytes()))
    {
        None => None,
        Some(Ok(forced)) => Some(forced),
        Some(Err(msg)) => return bad(&msg),
    };
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return bad(&format!("cannot read the request body: {e}")),
    };
    let request = match SimRequest::parse(endpoint, &body) {
        Ok(r) => r,
        Err(msg) => return bad(&msg),
    };
    let mut script = match Script::plan(&shared.config, &request) {
        Ok(s) => s,
        Err(msg) => return bad(&msg),
    };
    let n = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let fault = match forced {
        Some(Forced::None) => None,
        Some(Forced::Kind(kind)) => Some(kind),
        None => fault::draw(shared.config.seed, n, &shared.config.faults),
    };
    shared.stats.count_request(fault, forced.is_some());
    match fault {
        Some(FaultKind::ResetBeforeHeaders) => {
            // The request was read; no status line ever follows.
            control.reset();
            // hyper drops this future with the connection (HTTP/1.1); an h2
            // stream task lingers a moment and its answer goes nowhere.
            tokio::time::sleep(fault::DEAD_LINGER).await;
            return error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "reset");
        }
        Some(FaultKind::Http429) => {
            let mut resp = error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "simulated rate limit: too many requests",
            );
            resp.headers_mut().insert(
                header::RETRY_AFTER,
                header::HeaderValue::from(shared.config.fault_retry_after_s),
            );
            return resp;
        }
        Some(FaultKind::Http500) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "simulated internal server error",
            )
        }
        Some(FaultKind::Http503) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "simulated overload: service unavailable",
            )
        }
        Some(FaultKind::NonSseBody) => {
            let mut resp = Response::new(SimBody::Full(Some(Bytes::from_static(HTML_PAGE))));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/html; charset=utf-8"),
            );
            return resp;
        }
        Some(FaultKind::SlowHeaders) => {
            // As if the request had arrived that much later.
            arrived += shared.config.fault_slow_headers();
            tokio::select! {
                _ = tokio::time::sleep_until(arrived.into()) => {}
                _ = shared.shutdown_signal() => {
                    return error(StatusCode::SERVICE_UNAVAILABLE, "server_error", "the server is shutting down");
                }
            }
        }
        _ => {}
    }
    let prefix = if endpoint == Endpoint::Chat {
        "chatcmpl"
    } else {
        "cmpl"
    };
    let render = Renderer {
        endpoint,
        id: format!("{prefix}-sim-{:016x}-{n}", request.prompt_hash),
        created: shared.created,
        model: shared.model.clone(),
        reasoning_key: shared.config.reasoning_field.key(),
        send_timestamps: shared.config.send_timestamps,
    };

    if request.stream {
        let fault = fault.map(|kind| StreamFault {
            kind,
            control: control.clone(),
            stall: shared.config.fault_stall(),
            oversized_bytes: shared.config.fault_oversized_bytes as usize,
        });
        let stream = SseStream::new(
            script,
            render,
            arrived,
            shared.shutdown_signal(),
            request.include_usage,
            request.continuous_usage,
            fault,
        );
        let mut resp = Response::new(SimBody::Stream(Box::new(stream)));
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-cache"),
        );
        return resp;
    }

    // Non-streaming: answer when the last step would have been generated.
    let mut last_due = 0;
    while let Some(step) = script.next_step() {
        last_due = step.due_us;
    }
    let deadline = arrived + Duration::from_micros(last_due);
    tokio::select! {
        _ = tokio::time::sleep_until(deadline.into()) => {}
        _ = shared.shutdown_signal() => {
            return error(StatusCode::SERVICE_UNAVAILABLE, "server_error", "the server is shutting down");
        }
    }
    let (mut reasoning, mut content) = (String::new(), String::new());
    let chat = endpoint == Endpoint::Chat;
    let report = chat && render.reasoning_key.is_some();
    if report {
        script.push_text(0, script.reasoning_tokens, false, &mut reasoning);
        script.push_text(
            script.reasoning_tokens,
            script.content_tokens,
            false,
            &mut content,
        );
    } else {
        script.push_text(0, script.total_tokens(), chat, &mut content);
    }
    let usage = Usage::new(
        script.prompt_tokens,
        script.total_tokens(),
        report.then_some(script.reasoning_tokens),
    );
    let finish = script.finish.as_str();
    let Some(kind) = fault else {
        return json(
            StatusCode::OK,
            render.full_body(&reasoning, &content, finish, usage),
        );
    };
    full_with_fault(
        shared, control, kind, &render, reasoning, content, finish, usage,
    )
}

/// What a proxy in front of a crashed backend might send instead of SSE.
const HTML_PAGE: &[u8] = b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n\
<body><h1>Bad Gateway</h1><p>The upstream server returned an invalid response \
(specreplay simulated fault).</p></body></html>\n";

/// A non-streaming answer carrying `kind`: the same fault, as it can show in
/// a plain JSON body (see "Fault injection" in docs/simulator.md).
#[allow(clippy::too_many_arguments)]
fn full_with_fault(
    shared: &Shared,
    control: &Arc<ConnControl>,
    kind: FaultKind,
    render: &Renderer,
    mut reasoning: String,
    mut content: String,
    finish: &str,
    usage: Usage,
) -> Response<SimBody> {
    let now = tokio::time::Instant::now();
    let stall = shared.config.fault_stall();
    let staged = |pieces: Vec<(tokio::time::Instant, Bytes)>, end: StagedEnd, total: usize| {
        let body = StagedBody::new(pieces, end, control.clone());
        let mut resp = Response::new(SimBody::Staged(Box::new(body)));
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        headers.insert(header::CONTENT_LENGTH, header::HeaderValue::from(total));
        resp
    };
    match kind {
        FaultKind::InvalidUtf8 => {
            fault::last_text(&mut reasoning, &mut content).push(fault::SENTINEL);
            let body = render.full_body(&reasoning, &content, finish, usage);
            json(StatusCode::OK, fault::poison_utf8(&body))
        }
        FaultKind::OversizedEvent => {
            let plain = render.full_body(&reasoning, &content, finish, usage).len();
            let pad = (shared.config.fault_oversized_bytes as usize).saturating_sub(plain);
            fault::last_text(&mut reasoning, &mut content).push_str(&" ".repeat(pad));
            json(
                StatusCode::OK,
                render.full_body(&reasoning, &content, finish, usage),
            )
        }
        FaultKind::ErrorEvent => json(
            StatusCode::OK,
            render::error_body("simulated overload", "server_error", 503),
        ),
        _ => {
            let body = Bytes::from(render.full_body(&reasoning, &content, finish, usage));
            let total = body.len();
            let cut = fault::half_on_char(&body);
            let (half, rest) = (body.slice(..cut), body.slice(cut..));
            match kind {
                FaultKind::MalformedJson => json(StatusCode::OK, half.to_vec()),
                FaultKind::StallBeforeFirstToken => {
                    staged(vec![(now + stall, body)], StagedEnd::Complete, total)
                }
                FaultKind::StallBetweenTokens => staged(
                    vec![(now, half), (now + stall, rest)],
                    StagedEnd::Complete,
                    total,
                ),
                FaultKind::ResetMidStream => staged(vec![(now, half)], StagedEnd::Reset, total),
                FaultKind::MissingDone => staged(vec![(now, half)], StagedEnd::Close, total),
                // Handled before the answer was computed.
                _ => json(
                    StatusCode::OK,
                    render.full_body(&reasoning, &content, finish, usage),
                ),
            }
        }
    }
}
