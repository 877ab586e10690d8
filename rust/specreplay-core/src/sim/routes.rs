//! Routing and the request handlers: `/health`, `/v1/models`,
//! `/v1/chat/completions`, `/v1/completions`; JSON errors for the rest.

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

use super::render::{self, Renderer, Usage};
use super::request::{Endpoint, SimRequest};
use super::script::Script;
use super::server::Shared;
use super::stream::SseStream;

/// Largest request body read (a long prompt fits; a runaway upload does not).
const MAX_BODY: usize = 64 << 20;

/// The response body: a whole JSON document or a timed SSE stream.
pub enum SimBody {
    Full(Option<Bytes>),
    Stream(Box<SseStream>),
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
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            SimBody::Full(bytes) => bytes.is_none(),
            SimBody::Stream(stream) => stream.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            SimBody::Full(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            SimBody::Stream(_) => SizeHint::default(),
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
        (Method::POST, "/v1/chat/completions") => {
            generate(&shared, Endpoint::Chat, req, arrived).await
        }
        (Method::POST, "/v1/completions") => {
            generate(&shared, Endpoint::Completions, req, arrived).await
        }
        (_, "/health" | "/v1/models" | "/v1/chat/completions" | "/v1/completions") => error(
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
    endpoint: Endpoint,
    req: Request<Incoming>,
    arrived: Instant,
) -> Response<SimBody> {
    let bad = |msg: &str| error(StatusCode::BAD_REQUEST, "invalid_request_error", msg);
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
        let stream = SseStream::new(
            script,
            render,
            arrived,
            shared.shutdown_signal(),
            request.include_usage,
            request.continuous_usage,
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
    json(
        StatusCode::OK,
        render.full_body(&reasoning, &content, script.finish.as_str(), usage),
    )
}
