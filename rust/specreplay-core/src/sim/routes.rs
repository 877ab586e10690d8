//! Routing: `/health`, `/v1/models`, `/sim/stats`, `/metrics`, the
//! generating endpoints (`/v1/chat/completions`, `/v1/completions`,
//! `/v1/responses`, `/v1/messages`: on to `generate`), the pooling ones
//! (`/v1/embeddings`, `/v1/rerank`, `/v1/score`: on to `embed`), and JSON
//! errors for the rest.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use hyper::body::Incoming;
use hyper::{header, Method, Request, Response, StatusCode};

use super::embed::{pool, Pooling};
use super::exporter;
use super::fault::ConnControl;
use super::generate::generate;
use super::http::{error, json, SimBody};
use super::render;
use super::request::Endpoint;
use super::shared::Shared;

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
            render::models_body(
                shared.models.iter().map(|m| &*m.name),
                shared.created,
                shared.config.max_model_len,
            ),
        ),
        (Method::GET, "/sim/stats") => json(StatusCode::OK, shared.stats.to_json()),
        (Method::GET, "/metrics") => {
            let mut resp = Response::new(SimBody::Full(Some(shared.exporter.render().into())));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(exporter::CONTENT_TYPE),
            );
            resp
        }
        (Method::POST, "/v1/chat/completions") => {
            generate(&shared, &control, Endpoint::Chat, req, arrived).await
        }
        (Method::POST, "/v1/completions") => {
            generate(&shared, &control, Endpoint::Completions, req, arrived).await
        }
        (Method::POST, "/v1/responses") => {
            generate(&shared, &control, Endpoint::Responses, req, arrived).await
        }
        (Method::POST, "/v1/messages") => {
            let resp = generate(&shared, &control, Endpoint::Messages, req, arrived).await;
            in_anthropic_shape(resp)
        }
        (Method::POST, "/v1/embeddings") => {
            pool(&shared, &control, Pooling::Embeddings, req, arrived).await
        }
        (Method::POST, "/v1/rerank" | "/rerank" | "/v2/rerank") => {
            pool(&shared, &control, Pooling::Rerank, req, arrived).await
        }
        (Method::POST, "/v1/score" | "/score") => {
            pool(&shared, &control, Pooling::Score, req, arrived).await
        }
        (
            _,
            "/health"
            | "/v1/models"
            | "/sim/stats"
            | "/metrics"
            | "/v1/chat/completions"
            | "/v1/completions"
            | "/v1/responses"
            | "/v1/messages"
            | "/v1/embeddings"
            | "/v1/rerank"
            | "/rerank"
            | "/v2/rerank"
            | "/v1/score"
            | "/score",
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

/// An error answer of `/v1/messages` in Anthropic's shape,
/// `{"type":"error","error":{"type","message"}}`, in place of the OpenAI one
/// every handler builds (`http::error`); any other answer as it is.
fn in_anthropic_shape(resp: Response<SimBody>) -> Response<SimBody> {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let SimBody::Full(Some(bytes)) = &body else {
        return Response::from_parts(parts, body);
    };
    let message = serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned));
    let Some(message) = message else {
        // Not a JSON error (a fault's HTML page): as it is.
        return Response::from_parts(parts, body);
    };
    let body = render::anthropic_error_body(&message, anthropic_error_type(status));
    Response::from_parts(parts, SimBody::Full(Some(body.into())))
}

/// Anthropic's error type for an HTTP status (its API's documented table).
fn anthropic_error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 405 | 413 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}
