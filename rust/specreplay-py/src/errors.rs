//! Maps core errors onto the exception classes defined in
//! `python/specreplay/errors.py` (defined in Python so they can also subclass
//! ValueError/RuntimeError). Every user mistake reaches Python as one of them,
//! with a message, never as a panic.

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use specreplay_core::CoreError;

pyo3::import_exception!(specreplay.errors, SpecreplayError);
pyo3::import_exception!(specreplay.errors, ConfigError);
pyo3::import_exception!(specreplay.errors, StreamFormatError);
pyo3::import_exception!(specreplay.errors, EngineError);

/// Re-exports the classes from `specreplay._core` too, for callers that only
/// import the extension.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let errors = m.py().import("specreplay.errors")?;
    for name in [
        "SpecreplayError",
        "ConfigError",
        "StreamFormatError",
        "EngineError",
    ] {
        m.add(name, errors.getattr(name)?)?;
    }
    Ok(())
}

/// Wraps a core error so it can become a `PyErr` (orphan rule: `CoreError`
/// lives in another crate).
pub struct Error(pub CoreError);

impl From<CoreError> for Error {
    fn from(e: CoreError) -> Self {
        Error(e)
    }
}

impl From<Error> for PyErr {
    fn from(Error(e): Error) -> PyErr {
        let msg = e.to_string();
        match e {
            CoreError::Config { .. } => ConfigError::new_err(msg),
            CoreError::Io { source, .. } => {
                PyOSError::new_err((source.raw_os_error().unwrap_or(0), msg))
            }
            CoreError::Sse(_) | CoreError::Decode(_) => StreamFormatError::new_err(msg),
        }
    }
}

pub fn engine_error(msg: impl Into<String>) -> PyErr {
    EngineError::new_err(msg.into())
}
