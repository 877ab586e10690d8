//! Exception hierarchy: one class per kind of failure, all under
//! `SpecreplayError`, each also subclassing the natural stdlib type so
//! `except ValueError` keeps working for callers who do not know ours.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyOSError, PyValueError};
use pyo3::prelude::*;
use specreplay_core::CoreError;

create_exception!(specreplay._core, SpecreplayError, PyException, "Base class of every specreplay error.");
create_exception!(specreplay._core, ConfigError, SpecreplayError, "An invalid option or configuration value.");

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("SpecreplayError", py.get_type::<SpecreplayError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
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
            CoreError::Io { source, .. } => PyOSError::new_err((source.raw_os_error().unwrap_or(0), msg)),
            // Placeholder until the binding gives stream failures their own classes.
            CoreError::Sse(_) | CoreError::Decode(_) => SpecreplayError::new_err(msg),
        }
    }
}

#[allow(dead_code)]
pub fn value_error(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}
