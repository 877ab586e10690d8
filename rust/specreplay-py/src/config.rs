//! Every configuration crosses the boundary the same way: a Python mapping
//! typed by a TypedDict in `_core.pyi` (`RunSpec`, `SimConfig`,
//! `ProxyConfig`), read by serde (`pythonize`) straight into the core's own
//! struct, then checked by the core's `validate`. Errors name the field by
//! its path: `invalid configuration: run spec: load.rate: must be a
//! positive number, got -1`.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use pythonize::{Depythonizer, PythonizeError};
use serde::de::DeserializeOwned;
use serde_path_to_error::{Path, Segment};
use specreplay_core::CoreError;

use crate::errors::Error;

/// `value` as a `T`, checked by `validate`; `what` names the configuration
/// in errors ("run spec", "sim", "capture").
pub fn from_mapping<T: DeserializeOwned>(
    what: &str,
    value: &Bound<'_, PyAny>,
    validate: impl FnOnce(&T) -> Result<(), CoreError>,
) -> PyResult<T> {
    let config: T = read(value).map_err(|e| {
        let path = name_enum_key::<T>(value, e.path());
        let field = if path == "." {
            what.to_string()
        } else {
            format!("{what}: {path}")
        };
        Error(CoreError::config(field, e.into_inner().to_string()))
    })?;
    validate(&config).map_err(|e| match e {
        CoreError::Config { field, message } => {
            Error(CoreError::config(format!("{what}: {field}"), message))
        }
        other => Error(other),
    })?;
    Ok(config)
}

/// The item at `keys` under `root` (`root[k1][k2]…`).
fn at<'py>(root: &Bound<'py, PyAny>, keys: &[&str]) -> PyResult<Bound<'py, PyAny>> {
    keys.iter()
        .try_fold(root.clone(), |obj, key| obj.get_item(*key))
}

fn read<T: DeserializeOwned>(
    value: &Bound<'_, PyAny>,
) -> Result<T, serde_path_to_error::Error<PythonizeError>> {
    serde_path_to_error::deserialize(&mut Depythonizer::from_object(value))
}

/// The error's path as text. serde cannot name a map key that is an enum
/// (`faults.?` for the simulator's fault kinds): that key is found by reading
/// the value again with the map cut down to one entry at a time.
fn name_enum_key<T: DeserializeOwned>(value: &Bound<'_, PyAny>, path: &Path) -> String {
    let text = path.to_string();
    let mut keys = Vec::new();
    for segment in path.iter() {
        match segment {
            Segment::Map { key } => keys.push(key.as_str()),
            Segment::Unknown => break,
            _ => return text,
        }
    }
    if keys.len() == path.iter().count() {
        return text;
    }
    let culprit = || -> PyResult<Option<String>> {
        let py = value.py();
        let deepcopy = py.import("copy")?.getattr("deepcopy")?;
        let map = at(value, &keys)?.cast_into::<PyDict>()?;
        for (key, entry) in map.iter() {
            let one = PyDict::new(py);
            one.set_item(&key, entry)?;
            let copy = deepcopy.call1((value,))?;
            let trial = match keys.split_last() {
                Some((last, parents)) => {
                    at(&copy, parents)?.set_item(*last, one)?;
                    copy
                }
                None => one.into_any(),
            };
            if read::<T>(&trial).is_err_and(|e| e.path().to_string() == text) {
                return Ok(Some(key.str()?.to_string()));
            }
        }
        Ok(None)
    };
    match culprit() {
        Ok(Some(key)) => text.replacen('?', &key, 1),
        _ => text,
    }
}
