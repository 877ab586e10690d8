//! Record batches across the boundary through the Arrow PyCapsule interface
//! (`__arrow_c_array__`), both ways: finished requests out to Python
//! (`pyarrow.record_batch(obj)` takes the buffers over without a copy), and
//! the requests of a point in from Python. No Python object per value.
//!
//! Written against arrow's own `ffi` module rather than a pyarrow binding
//! crate: `arrow-pyarrow` 60 is built on pyo3 0.29 and `pyo3-arrow` on
//! arrow 59, neither the versions this crate links.

use std::sync::Arc;

use arrow_array::ffi::{from_ffi, to_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::{Array, RecordBatch, StructArray};
use arrow_schema::{DataType, Schema};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods};

#[pyclass(module = "specreplay._core", frozen)]
pub struct ArrowBatch {
    batch: RecordBatch,
}

impl ArrowBatch {
    pub fn new(batch: RecordBatch) -> Self {
        ArrowBatch { batch }
    }
}

#[pymethods]
impl ArrowBatch {
    #[getter]
    fn num_rows(&self) -> usize {
        self.batch.num_rows()
    }

    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
        // We produce exactly one schema; a consumer asking for another casts itself.
        let _ = requested_schema;
        let data = StructArray::from(self.batch.clone()).into_data();
        let (array, schema) = to_ffi(&data)
            .map_err(|e| PyRuntimeError::new_err(format!("arrow export failed: {e}")))?;
        let schema_capsule = PyCapsule::new_with_value(py, schema, c"arrow_schema")?;
        let array_capsule = PyCapsule::new_with_value(py, array, c"arrow_array")?;
        Ok((schema_capsule, array_capsule))
    }

    fn __len__(&self) -> usize {
        self.batch.num_rows()
    }

    fn __repr__(&self) -> String {
        format!(
            "ArrowBatch(num_rows={}, num_columns={})",
            self.batch.num_rows(),
            self.batch.num_columns()
        )
    }
}

/// A record batch from any object with `__arrow_c_array__` (a
/// `pyarrow.RecordBatch`); `what` names it in errors.
pub fn import_batch(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<RecordBatch> {
    let not_a_batch = || {
        PyTypeError::new_err(format!(
            "{what}: expected an Arrow record batch (__arrow_c_array__)"
        ))
    };
    let method = obj
        .getattr("__arrow_c_array__")
        .map_err(|_| not_a_batch())?;
    let (schema, array): (Bound<'_, PyCapsule>, Bound<'_, PyCapsule>) =
        method.call0()?.extract().map_err(|_| not_a_batch())?;
    let schema_ptr = schema.pointer_checked(Some(c"arrow_schema"))?;
    let array_ptr = array.pointer_checked(Some(c"arrow_array"))?;
    // SAFETY: the capsules are the Arrow C data interface's, checked by name
    // above. The array is moved out (its release callback now ours, the
    // capsule's left released, as the interface prescribes); the schema is
    // only borrowed, and the capsule keeps it alive for this call.
    let data = unsafe {
        let array = FFI_ArrowArray::from_raw(array_ptr.as_ptr().cast());
        let schema = &*schema_ptr.as_ptr().cast::<FFI_ArrowSchema>();
        from_ffi(array, schema)
    }
    .map_err(|e| PyTypeError::new_err(format!("{what}: arrow import failed: {e}")))?;
    if !matches!(data.data_type(), DataType::Struct(_)) {
        return Err(not_a_batch());
    }
    let array = StructArray::from(data);
    if array.null_count() > 0 {
        return Err(PyTypeError::new_err(format!("{what}: null rows")));
    }
    let (fields, columns, _) = array.into_parts();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| PyTypeError::new_err(format!("{what}: {e}")))
}
