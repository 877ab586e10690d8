//! Routing: `/health`, `/v1/models`, `/sim/stats`, `/v1/chat/completions`,
//! `/v1/completions`, and JSON errors for the rest. A generation request goes
//! on to `generate`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use hyper::body::Incoming;
use hyper::{header, Method, Request, Response, StatusCode};

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
            render::models_body(&shared.model, shared.created, shared.config.max_model_len),
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
        (
            _,
            "/health"
            | "/v1/models"
            | "/sim/stats"
            | "/metrics"
            | "/v1/chat/completions"
            | "/v1/completions",
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
