//! Hands a Rust `RecordBatch` to Python through the Arrow PyCapsule
//! interface (`__arrow_c_array__`): `pyarrow.record_batch(obj)` takes the
//! buffers over without a copy and without a Python object per value.

use arrow_array::ffi::to_ffi;
use arrow_array::{Array, RecordBatch, StructArray};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

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
