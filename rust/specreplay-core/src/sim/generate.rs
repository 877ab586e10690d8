//! One generation request (`/v1/chat/completions`, `/v1/completions`,
//! `/v1/responses`, `/v1/messages`) from
//! its bytes to its answer, a step per function: `admit` reads and plans it
//! (or answers 400), `pick_fault` draws its fault, `answer_early` answers the
//! faults that need no model output (resets, error statuses, HTML, slow
//! headers), then the answer is a timed SSE stream (`stream`) or a whole
//! JSON document (`full`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{header, Request, Response, StatusCode};

use super::fault::{self, ConnControl, FaultKind, Forced, FAULT_HEADER};
use super::full;
use super::http::{error, shutting_down, SimBody};
use super::pace::Pacer;
use super::render::Renderer;
use super::request::{Endpoint, SimRequest};
use super::script::Script;
use super::shared::Shared;
use super::stream::{SseStream, StreamFault};

/// Largest request body read (a long prompt fits; a runaway upload does not).
const MAX_BODY: usize = 64 << 20;

pub(super) async fn generate(
    shared: &Shared,
    control: &Arc<ConnControl>,
    endpoint: Endpoint,
    req: Request<Incoming>,
    arrived: Instant,
) -> Response<SimBody> {
    let Admitted {
        forced,
        model,
        mut request,
        script,
    } = match admit(shared, endpoint, req).await {
        Ok(admitted) => admitted,
        Err(bad) => return bad,
    };
    let n = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let fault = pick_fault(shared, n, forced);
    let arrived = match answer_early(shared, control, fault, arrived).await {
        Ok(arrived) => arrived,
        Err(answered) => return answered,
    };
    let served = shared
        .served(Some(&model))
        .expect("an admitted request names a served model");
    let render = renderer(shared, model, &request, &script, n);
    let prefix_blocks = std::mem::take(&mut request.prefix_blocks);
    let pacer = shared.pacer(served, &script, prefix_blocks, arrived);
    if request.stream {
        stream(shared, control, fault, render, script, pacer, &request)
    } else {
        full::answer(shared, control, fault, render, script, pacer).await
    }
}

/// A valid request, planned.
struct Admitted {
    /// What the fault header asked for, if it was sent.
    forced: Option<Forced>,
    /// The served model that answers.
    model: Arc<str>,
    request: SimRequest,
    script: Script,
}

/// A 400 answer, counted as rejected.
pub(super) fn bad_request(shared: &Shared, msg: &str) -> Response<SimBody> {
    shared.stats.count_rejected();
    error(StatusCode::BAD_REQUEST, "invalid_request_error", msg)
}

/// The fault header's ask and the body; `Err` is the 400 answer.
pub(super) async fn read_request(
    shared: &Shared,
    req: Request<Incoming>,
) -> Result<(Option<Forced>, Bytes), Response<SimBody>> {
    let bad = |msg: &str| bad_request(shared, msg);
    let forced = match req
        .headers()
        .get(FAULT_HEADER)
        .map(|v| Forced::parse(v.as_bytes()))
    {
        None => None,
        Some(Ok(forced)) => Some(forced),
        Some(Err(msg)) => return Err(bad(&msg)),
    };
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return Err(bad(&format!("cannot read the request body: {e}"))),
    };
    Ok((forced, body))
}

/// The 404 answer to a request naming a model that is not served.
pub(super) fn model_not_found(shared: &Shared, name: Option<&str>) -> Response<SimBody> {
    shared.stats.count_rejected();
    let message = format!(
        "the model '{}' does not exist (see /v1/models)",
        name.unwrap_or("")
    );
    error(StatusCode::NOT_FOUND, "not_found_error", &message)
}

/// Reads the fault header and the body, parses and plans the request; `Err`
/// is the 400 (or 404) answer, counted as rejected.
async fn admit(
    shared: &Shared,
    endpoint: Endpoint,
    req: Request<Incoming>,
) -> Result<Admitted, Response<SimBody>> {
    let bad = |msg: &str| bad_request(shared, msg);
    let (forced, body) = read_request(shared, req).await?;
    let request = SimRequest::parse(endpoint, &body, &shared.media).map_err(|msg| bad(&msg))?;
    let Some(served) = shared.served(request.model.as_deref()) else {
        return Err(model_not_found(shared, request.model.as_deref()));
    };
    let script = Script::plan(&served.config, &request).map_err(|msg| bad(&msg))?;
    Ok(Admitted {
        forced,
        model: served.name.clone(),
        request,
        script,
    })
}

/// The fault of request number `n`: the header's, else the seeded draw.
/// Counts the request.
pub(super) fn pick_fault(shared: &Shared, n: u64, forced: Option<Forced>) -> Option<FaultKind> {
    let fault = match forced {
        Some(Forced::None) => None,
        Some(Forced::Kind(kind)) => Some(kind),
        None => fault::draw(shared.config.seed, n, &shared.config.faults),
    };
    shared.stats.count_request(fault, forced.is_some());
    fault
}

/// Answers the faults that need no model output. `Ok` is the instant the
/// answer's clock starts (later than the arrival under `slow_headers`).
pub(super) async fn answer_early(
    shared: &Shared,
    control: &ConnControl,
    fault: Option<FaultKind>,
    mut arrived: Instant,
) -> Result<Instant, Response<SimBody>> {
    match fault {
        Some(FaultKind::ResetBeforeHeaders) => {
            // The request was read; no status line ever follows.
            control.reset();
            // hyper drops this future with the connection (HTTP/1.1); an h2
            // stream task lingers a moment and its answer goes nowhere.
            tokio::time::sleep(fault::DEAD_LINGER).await;
            Err(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "reset",
            ))
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
            Err(resp)
        }
        Some(FaultKind::Http500) => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "simulated internal server error",
        )),
        Some(FaultKind::Http503) => Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "simulated overload: service unavailable",
        )),
        Some(FaultKind::NonSseBody) => {
            let mut resp = Response::new(SimBody::Full(Some(HTML_PAGE.into())));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/html; charset=utf-8"),
            );
            Err(resp)
        }
        Some(FaultKind::SlowHeaders) => {
            // As if the request had arrived that much later.
            arrived += shared.config.fault_slow_headers();
            tokio::select! {
                _ = tokio::time::sleep_until(arrived.into()) => Ok(arrived),
                _ = shared.shutdown_signal() => Err(shutting_down()),
            }
        }
        _ => Ok(arrived),
    }
}

/// What a proxy in front of a crashed backend might send instead of SSE.
const HTML_PAGE: &[u8] = b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n\
<body><h1>Bad Gateway</h1><p>The upstream server returned an invalid response \
(specreplay simulated fault).</p></body></html>\n";

/// What every chunk of request number `n`'s answer shares.
fn renderer(
    shared: &Shared,
    model: Arc<str>,
    request: &SimRequest,
    script: &Script,
    n: u64,
) -> Renderer {
    let prefix = match request.endpoint {
        Endpoint::Chat => "chatcmpl",
        Endpoint::Completions => "cmpl",
        Endpoint::Responses => "resp",
        Endpoint::Messages => "msg",
    };
    Renderer {
        endpoint: request.endpoint,
        id: format!("{prefix}-sim-{:016x}-{n}", request.prompt_hash),
        created: shared.created,
        model,
        reasoning_key: shared.config.reasoning_field.key(),
        send_timestamps: shared.config.send_timestamps,
        tool: script.structured.as_ref().and_then(|s| s.tool.clone()),
        state: Default::default(),
    }
}

/// The streaming answer: headers now, then the timed SSE body.
fn stream(
    shared: &Shared,
    control: &Arc<ConnControl>,
    fault: Option<FaultKind>,
    render: Renderer,
    script: Script,
    pacer: Pacer,
    request: &SimRequest,
) -> Response<SimBody> {
    let fault = fault.map(|kind| StreamFault {
        kind,
        control: control.clone(),
        stall: shared.config.fault_stall(),
        oversized_bytes: shared.config.fault_oversized_bytes as usize,
    });
    let stream = SseStream::new(
        script,
        render,
        pacer,
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
    resp
}
