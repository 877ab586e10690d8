//! `decode_response`: what came back for one request, from its recorded
//! response bytes. Used by `specreplay capture` after a response has been
//! forwarded, so it is never on the forwarding path.

use std::str::FromStr;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use specreplay_core::decode::{decode_all, decode_body, Dialect, Record, Usage};
use specreplay_core::CoreError;

use crate::errors::{ConfigError, Error};

/// Decodes a whole response body of dialect `api` (`chat`, `completions`,
/// `responses`, `anthropic`): an SSE stream when `content_type` is
/// `text/event-stream`, else a JSON body. Returns a dict with
/// `prompt_tokens`, `completion_tokens`, `reasoning_tokens`, `cached_tokens`
/// (the server's usage reports merged, None where never reported),
/// `finish_reason` (the last one), `error` (the last error message) and
/// `complete` (the stream ended with its end marker; always True for a JSON
/// body). Raises `StreamFormatError` for bytes that do not decode.
#[pyfunction]
pub fn decode_response<'py>(
    py: Python<'py>,
    api: &str,
    body: &[u8],
    content_type: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let dialect = Dialect::from_str(api).map_err(|e| ConfigError::new_err(e.to_string()))?;
    let streamed = content_type
        .to_ascii_lowercase()
        .contains("text/event-stream");
    let records = py.detach(|| {
        if streamed {
            decode_all(dialect, body)
        } else {
            decode_body(dialect, body).map_err(CoreError::from)
        }
    });
    let records = records.map_err(Error::from)?;
    let mut usage = Usage::default();
    let mut finish: Option<String> = None;
    let mut error: Option<String> = None;
    let mut complete = !streamed;
    for record in &records {
        match record {
            Record::Usage(u) => usage.merge(u),
            Record::Finish { reason } => finish = Some(reason.clone()),
            Record::Error { message, .. } => error = Some(message.clone()),
            Record::Done => complete = true,
            Record::Text { .. } | Record::Timings(_) => {}
        }
    }
    let out = PyDict::new(py);
    out.set_item("prompt_tokens", usage.prompt_tokens)?;
    out.set_item("completion_tokens", usage.completion_tokens)?;
    out.set_item("reasoning_tokens", usage.reasoning_tokens)?;
    out.set_item("cached_tokens", usage.cached_tokens)?;
    out.set_item("finish_reason", finish)?;
    out.set_item("error", error)?;
    out.set_item("complete", complete)?;
    Ok(out)
}
