//! `decode_response`: what one whole response said, by the core's SSE parser
//! and decoders (`decode::summary`). The target probe reads llama.cpp's
//! timings with it; the capture proxy decodes with the same function in Rust
//! and reports the same `ResponseCounts` in its `CapturedResponse`.

use std::str::FromStr;

use pyo3::prelude::*;
use specreplay_core::decode::summary::summarize;
use specreplay_core::decode::{Dialect, Usage};
use specreplay_core::CoreError;

use crate::errors::{ConfigError, Error};

/// What a response said, as a captured trace record's `response` keeps it:
/// the server's token counts (None: never reported), finish reason, error.
#[pyclass(module = "specreplay._core", subclass, frozen, get_all)]
pub struct ResponseCounts {
    prompt_tokens: Option<u64>,
    /// Output tokens, reasoning included.
    completion_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    /// The last finish reason.
    finish_reason: Option<String>,
    /// The last error (for a captured response: the forwarding's first).
    error: Option<String>,
}

impl ResponseCounts {
    pub fn new(usage: &Usage, finish_reason: Option<String>, error: Option<String>) -> Self {
        ResponseCounts {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            reasoning_tokens: usage.reasoning_tokens,
            cached_tokens: usage.cached_tokens,
            finish_reason,
            error,
        }
    }
}

/// A whole response decoded by `decode_response`.
#[pyclass(module = "specreplay._core", extends = ResponseCounts, frozen, get_all)]
pub struct DecodedResponse {
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
) -> PyResult<Py<DecodedResponse>> {
    let dialect = Dialect::from_str(api).map_err(|e| ConfigError::new_err(e.to_string()))?;
    let got = py
        .detach(|| summarize(dialect, body, content_type))
        .map_err(|e| Error::from(CoreError::from(e)))?;
    let counts = ResponseCounts::new(&got.usage, got.finish_reason, got.error);
    Py::new(
        py,
        PyClassInitializer::from(counts).add_subclass(DecodedResponse {
            complete: got.complete,
            predicted_tokens: got.predicted_tokens,
        }),
    )
}
