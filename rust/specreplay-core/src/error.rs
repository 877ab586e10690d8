//! The core's error type. Each variant maps to one Python exception class in
//! the binding (`rust/specreplay-py/src/errors.rs`), so a user mistake reaches
//! Python as a specific exception with a message, never as a panic.

use thiserror::Error;

use crate::decode::{DecodeError, StreamError};
use crate::sse::SseError;

#[derive(Debug, Error)]
pub enum CoreError {
    /// Invalid configuration value (names the field).
    #[error("invalid configuration: {field}: {message}")]
    Config { field: String, message: String },
    /// A socket could not be bound or another I/O failure outside a request.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A response stream broke the SSE framing rules.
    #[error("malformed event stream: {0}")]
    Sse(#[from] SseError),
    /// A stream event or body did not decode as the expected dialect.
    #[error("undecodable response: {0}")]
    Decode(#[from] DecodeError),
}

impl From<StreamError> for CoreError {
    fn from(e: StreamError) -> Self {
        match e {
            StreamError::Sse(e) => CoreError::Sse(e),
            StreamError::Decode(e) => CoreError::Decode(e),
        }
    }
}

impl CoreError {
    pub fn config(field: impl Into<String>, message: impl Into<String>) -> Self {
        CoreError::Config {
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        CoreError::Io {
            context: context.into(),
            source,
        }
    }
}

/// An error and its causes on one line, "outer: inner: root" — hyper's
/// top-level errors alone ("client error (Connect)") do not say what went
/// wrong. Causes already quoted by the outer message are not repeated.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
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
