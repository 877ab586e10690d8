//! `decode_response`: what one whole response said, by the core's SSE parser
//! and decoders (`decode::summary`). The target probe reads llama.cpp's
//! timings with it; the capture proxy decodes with the same function in Rust.

use std::str::FromStr;

use pyo3::prelude::*;
use specreplay_core::decode::summary::summarize;
use specreplay_core::decode::Dialect;

use crate::errors::{ConfigError, Error};

/// What one response said; token counts are the server's (None: never reported).
#[pyclass(module = "specreplay._core", frozen, get_all)]
pub struct DecodedResponse {
    prompt_tokens: Option<u64>,
    /// Output tokens, reasoning included.
    completion_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    /// The last finish reason.
    finish_reason: Option<String>,
    /// The last error message the response carried.
    error: Option<String>,
    /// A stream ended with its end marker (always True for a JSON body).
    complete: bool,
    /// llama.cpp's `timings.predicted_n`, last reported (None: no timings).
    predicted_tokens: Option<u64>,
}

/// Decodes a whole response body of dialect `api` (`chat`, `completions`,
/// `responses`, `anthropic`): an SSE stream when `content_type` is
/// `text/event-stream`, else a JSON body. Raises `StreamFormatError` for
/// bytes that do not decode, `ConfigError` for an unknown `api`.
#[pyfunction]
pub fn decode_response(
    py: Python<'_>,
    api: &str,
    body: &[u8],
    content_type: &str,
) -> PyResult<DecodedResponse> {
    let dialect = Dialect::from_str(api).map_err(|e| ConfigError::new_err(e.to_string()))?;
    let got = py
        .detach(|| summarize(dialect, body, content_type))
        .map_err(Error::from)?;
    Ok(DecodedResponse {
        prompt_tokens: got.usage.prompt_tokens,
        completion_tokens: got.usage.completion_tokens,
        reasoning_tokens: got.usage.reasoning_tokens,
        cached_tokens: got.usage.cached_tokens,
        finish_reason: got.finish_reason,
        error: got.error,
        complete: got.complete,
        predicted_tokens: got.predicted_tokens,
    })
}
