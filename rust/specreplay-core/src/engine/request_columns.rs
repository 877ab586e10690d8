//! The requests of a point as they cross from Python: one Arrow record batch,
//! one row per request, with the columns of `REQUEST_SCHEMA` in
//! `python/specreplay/schema.py`. Columnar, so no Python object per request
//! reaches the engine, and a batch can be followed by more (streamed traces).

use arrow_array::{Array, BinaryArray, Float64Array, RecordBatch, StringArray};
use arrow_schema::DataType;

use super::spec::PreparedRequest;
use crate::error::CoreError;

/// The columns, by name, with the Arrow type each must have.
pub const REQUEST_COLUMNS: [(&str, DataType); 5] = [
    ("trace_id", DataType::Utf8),
    ("api", DataType::Utf8),
    ("url", DataType::Utf8),
    ("body", DataType::Binary),
    ("arrival_s", DataType::Float64),
];

fn column<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T, CoreError> {
    let (_, want) = REQUEST_COLUMNS
        .iter()
        .find(|(n, _)| *n == name)
        .expect("a declared column");
    let array = batch
        .column_by_name(name)
        .ok_or_else(|| CoreError::config(format!("requests: {name}"), "missing column"))?;
    if array.null_count() > 0 {
        return Err(CoreError::config(
            format!("requests: {name}"),
            "must not contain nulls",
        ));
    }
    array.as_any().downcast_ref::<T>().ok_or_else(|| {
        CoreError::config(
            format!("requests: {name}"),
            format!("expected {want}, got {}", array.data_type()),
        )
    })
}

/// Every row of `batch` as a request the engine sends. Errors name the
/// column, and the request (by trace id) for a bad value.
pub fn requests_from_batch(batch: &RecordBatch) -> Result<Vec<PreparedRequest>, CoreError> {
    if let Some(extra) = batch
        .schema()
        .fields()
        .iter()
        .find(|f| !REQUEST_COLUMNS.iter().any(|(n, _)| n == f.name()))
    {
        return Err(CoreError::config(
            format!("requests: {}", extra.name()),
            "unknown column",
        ));
    }
    let ids: &StringArray = column(batch, "trace_id")?;
    let apis: &StringArray = column(batch, "api")?;
    let urls: &StringArray = column(batch, "url")?;
    let bodies: &BinaryArray = column(batch, "body")?;
    let arrivals: &Float64Array = column(batch, "arrival_s")?;
    (0..batch.num_rows())
        .map(|i| {
            PreparedRequest::new(
                ids.value(i).to_string(),
                apis.value(i),
                urls.value(i),
                bodies.value(i).to_vec(),
                arrivals.value(i),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::ArrayRef;
    use arrow_schema::{Field, Schema};

    use super::*;

    fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
        let fields: Vec<Field> = columns
            .iter()
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
            .collect();
        let arrays = columns.into_iter().map(|(_, a)| a).collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()
    }

    fn good() -> Vec<(&'static str, ArrayRef)> {
        vec![
            ("trace_id", Arc::new(StringArray::from(vec!["a", "b"]))),
            (
                "api",
                Arc::new(StringArray::from(vec!["chat", "completions"])),
            ),
            (
                "url",
                Arc::new(StringArray::from(vec![
                    "http://h/v1/chat/completions",
                    "https://h/v1/completions",
                ])),
            ),
            (
                "body",
                Arc::new(BinaryArray::from(vec![b"{}".as_ref(), b"{\"x\":1}"])),
            ),
            ("arrival_s", Arc::new(Float64Array::from(vec![0.0, 1.5]))),
        ]
    }

    fn message(columns: Vec<(&str, ArrayRef)>) -> String {
        requests_from_batch(&batch(columns))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn rows_become_requests() {
        let requests = requests_from_batch(&batch(good())).unwrap();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[1].trace_id, "b");
        assert_eq!(requests[1].dialect.as_str(), "completions");
        assert_eq!(requests[1].uri.host(), Some("h"));
        assert_eq!(&requests[1].body[..], b"{\"x\":1}");
        assert_eq!(requests[1].arrival_s, 1.5);
    }

    #[test]
    fn errors_name_the_column() {
        let mut missing = good();
        missing.remove(3);
        assert!(message(missing).contains("requests: body: missing column"));

        let mut wrong = good();
        wrong[3].1 = Arc::new(StringArray::from(vec!["{}", "{}"]));
        assert!(message(wrong).contains("requests: body: expected Binary, got Utf8"));

        let mut extra = good();
        extra.push(("session", Arc::new(StringArray::from(vec!["s", "s"]))));
        assert!(message(extra).contains("requests: session: unknown column"));

        let mut nulls = good();
        nulls[4].1 = Arc::new(Float64Array::from(vec![Some(0.0), None]));
        assert!(message(nulls).contains("requests: arrival_s: must not contain nulls"));

        let mut api = good();
        api[1].1 = Arc::new(StringArray::from(vec!["chat", "grpc"]));
        assert!(message(api).contains("request b: api"));
    }
}
