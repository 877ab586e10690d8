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
use super::fault::ConnControl;
use super::generate::generate;
use super::http::{error, json, SimBody};
use super::metrics;
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
            let mut resp = Response::new(SimBody::Full(Some(shared.metrics.render().into())));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(metrics::CONTENT_TYPE),
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
            generate(&shared, &control, Endpoint::Messages, req, arrived).await
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
