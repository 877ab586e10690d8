//! The requests of a point as they cross from Python: Arrow record batches,
//! one row per request, with the columns of `REQUEST_COLUMNS` in
//! `python/specreplay/schema.py`. Columnar, so no Python object per request
//! reaches the engine; a point's requests come as one batch or, streamed,
//! as many (`EngineRun::feed`).
//!
//! A row whose prompt is given by blocks (`prompt_blocks`) gets its text
//! here, off the pacing thread: the body arrives with an empty string where
//! the prompt goes (`prompt_at`).

use std::sync::Arc;

use arrow_array::{
    Array, BinaryArray, Float64Array, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
    StructArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Fields};

use super::body;
use super::media::{self, MediaSlot};
use super::spec::{Media, PreparedRequest, Turn};
use crate::error::CoreError;
use crate::prompt::PromptBlocks;

/// Columns every batch has, with no nulls.
pub const REQUIRED_COLUMNS: [(&str, DataType); 5] = [
    ("trace_id", DataType::Utf8),
    ("api", DataType::Utf8),
    ("url", DataType::Utf8),
    ("body", DataType::Binary),
    ("arrival_s", DataType::Float64),
];

/// Columns a batch may leave out (then all null); nullable.
pub fn optional_columns() -> [(&'static str, DataType); 12] {
    [
        ("media_at", media_at_type()),
        ("model", DataType::Utf8),
        ("media_count", DataType::Int32),
        ("media_bytes", DataType::Int64),
        ("media_pixels", DataType::Int64),
        ("media_seconds", DataType::Float64),
        ("session_id", DataType::Utf8),
        ("turn_index", DataType::Int32),
        ("think_time_us", DataType::Int64),
        ("prompt_blocks", prompt_blocks_type()),
        ("prompt_at", DataType::Int64),
        (
            "history_at",
            DataType::List(Arc::new(Field::new("item", DataType::Int64, true))),
        ),
    ]
}

/// `media_at`: per request, the stored media to write into its body
/// (`media::MediaSlot`: where, which file, what prefix).
pub fn media_at_type() -> DataType {
    DataType::List(Arc::new(Field::new(
        "item",
        DataType::Struct(Fields::from(vec![
            Field::new("at", DataType::Int64, false),
            Field::new("file", DataType::Utf8, false),
            Field::new("prefix", DataType::Utf8, false),
        ])),
        true,
    )))
}

/// The media slots of row `i` of a `media_at` column.
fn media_slots(list: &ListArray, i: usize) -> Result<Vec<MediaSlot>, CoreError> {
    if !list.is_valid(i) {
        return Ok(Vec::new());
    }
    let items = list.value(i);
    let items: &StructArray = typed(items.as_ref(), "media_at")?;
    let child = |name: &str| {
        items
            .column_by_name(name)
            .ok_or_else(|| CoreError::config(format!("requests: media_at.{name}"), "missing"))
    };
    let at: &Int64Array = typed(child("at")?.as_ref(), "media_at")?;
    let file: &StringArray = typed(child("file")?.as_ref(), "media_at")?;
    let prefix: &StringArray = typed(child("prefix")?.as_ref(), "media_at")?;
    (0..items.len())
        .map(|k| {
            Ok(MediaSlot {
                at: offset(Some(at.value(k)), "media_at")?.unwrap_or(0),
                file: file.value(k).to_string(),
                prefix: prefix.value(k).to_string(),
            })
        })
        .collect()
}

/// `prompt_blocks`: a trace record's field of the same name, as a struct.
pub fn prompt_blocks_type() -> DataType {
    DataType::Struct(Fields::from(vec![
        Field::new("tokens", DataType::Int64, false),
        Field::new("block_size", DataType::Int64, false),
        Field::new(
            "hash_ids",
            DataType::List(Arc::new(Field::new("item", DataType::UInt64, true))),
            false,
        ),
        Field::new("seed", DataType::UInt64, false),
    ]))
}

fn declared(name: &str) -> Option<DataType> {
    REQUIRED_COLUMNS
        .iter()
        .cloned()
        .chain(optional_columns())
        .find(|(n, _)| *n == name)
        .map(|(_, t)| t)
}

fn typed<'a, T: 'static>(array: &'a dyn Array, name: &str) -> Result<&'a T, CoreError> {
    array.as_any().downcast_ref::<T>().ok_or_else(|| {
        CoreError::config(
            format!("requests: {name}"),
            format!(
                "expected {}, got {}",
                declared(name).expect("a declared column"),
                array.data_type()
            ),
        )
    })
}

fn required<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T, CoreError> {
    let array = batch
        .column_by_name(name)
        .ok_or_else(|| CoreError::config(format!("requests: {name}"), "missing column"))?;
    if array.null_count() > 0 {
        return Err(CoreError::config(
            format!("requests: {name}"),
            "must not contain nulls",
        ));
    }
    typed(array.as_ref(), name)
}

fn optional<'a, T: 'static>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<Option<&'a T>, CoreError> {
    batch
        .column_by_name(name)
        .map(|a| typed(a.as_ref(), name))
        .transpose()
}

fn value<'a, T, A: Array>(
    array: Option<&'a A>,
    i: usize,
    get: impl Fn(&'a A, usize) -> T,
) -> Option<T> {
    array.filter(|a| a.is_valid(i)).map(|a| get(a, i))
}

/// The `prompt_blocks` struct's children.
struct BlockColumns<'a> {
    tokens: &'a Int64Array,
    block_size: &'a Int64Array,
    hash_ids: &'a ListArray,
    seed: &'a UInt64Array,
}

impl<'a> BlockColumns<'a> {
    fn new(blocks: &'a StructArray) -> Result<Self, CoreError> {
        let child = |name: &str| {
            blocks.column_by_name(name).ok_or_else(|| {
                CoreError::config(format!("requests: prompt_blocks.{name}"), "missing")
            })
        };
        let hash_ids: &ListArray = typed(child("hash_ids")?.as_ref(), "prompt_blocks")?;
        typed::<UInt64Array>(hash_ids.values().as_ref(), "prompt_blocks")?;
        Ok(BlockColumns {
            tokens: typed(child("tokens")?.as_ref(), "prompt_blocks")?,
            block_size: typed(child("block_size")?.as_ref(), "prompt_blocks")?,
            hash_ids,
            seed: typed(child("seed")?.as_ref(), "prompt_blocks")?,
        })
    }

    fn body(&self, i: usize, template: &[u8], at: usize) -> Result<Vec<u8>, CoreError> {
        let ids = self.hash_ids.value(i);
        let ids: &UInt64Array = typed(ids.as_ref(), "prompt_blocks")?;
        let blocks = PromptBlocks {
            tokens: self.tokens.value(i).max(0) as u64,
            block_size: self.block_size.value(i).max(0) as u64,
            hash_ids: ids.values(),
            seed: self.seed.value(i),
        };
        body::with_prompt(template, at, &blocks)
    }
}

/// `e` about request `trace_id` (its field path prefixed).
fn about(trace_id: &str, e: CoreError) -> CoreError {
    match e {
        CoreError::Config { field, message } => {
            CoreError::config(format!("request {trace_id}: {field}"), message)
        }
        other => other,
    }
}

fn offset(v: Option<i64>, name: &str) -> Result<Option<usize>, CoreError> {
    v.map(|v| {
        usize::try_from(v)
            .map_err(|_| CoreError::config(format!("requests: {name}"), format!("{v} is negative")))
    })
    .transpose()
}

/// Every row of `batch` as a request the engine sends. Errors name the
/// column, and the request (by trace id) for a bad value.
pub fn requests_from_batch(batch: &RecordBatch) -> Result<Vec<PreparedRequest>, CoreError> {
    if let Some(extra) = batch
        .schema()
        .fields()
        .iter()
        .find(|f| declared(f.name()).is_none())
    {
        return Err(CoreError::config(
            format!("requests: {}", extra.name()),
            "unknown column",
        ));
    }
    let ids: &StringArray = required(batch, "trace_id")?;
    let apis: &StringArray = required(batch, "api")?;
    let urls: &StringArray = required(batch, "url")?;
    let bodies: &BinaryArray = required(batch, "body")?;
    let arrivals: &Float64Array = required(batch, "arrival_s")?;
    let sessions: Option<&StringArray> = optional(batch, "session_id")?;
    let turns: Option<&Int32Array> = optional(batch, "turn_index")?;
    let thinks: Option<&Int64Array> = optional(batch, "think_time_us")?;
    let blocks: Option<&StructArray> = optional(batch, "prompt_blocks")?;
    let blocks = blocks
        .map(|b| (b, BlockColumns::new(b)))
        .map(|(b, c)| c.map(|c| (b, c)))
        .transpose()?;
    let prompt_at: Option<&Int64Array> = optional(batch, "prompt_at")?;
    let history_at: Option<&ListArray> = optional(batch, "history_at")?;
    let models: Option<&StringArray> = optional(batch, "model")?;
    let media_at: Option<&ListArray> = optional(batch, "media_at")?;
    let media_count: Option<&Int32Array> = optional(batch, "media_count")?;
    let media_bytes: Option<&Int64Array> = optional(batch, "media_bytes")?;
    let media_pixels: Option<&Int64Array> = optional(batch, "media_pixels")?;
    let media_seconds: Option<&Float64Array> = optional(batch, "media_seconds")?;
    if let Some(list) = history_at {
        typed::<Int64Array>(list.values().as_ref(), "history_at")?;
    }
    (0..batch.num_rows())
        .map(|i| {
            let trace_id = ids.value(i);
            let fail = |field: &str, message: &str| {
                CoreError::config(format!("request {trace_id}: {field}"), message)
            };
            let mut at = offset(value(prompt_at, i, Int64Array::value), "prompt_at")?;
            // Stored media first: the other offsets move by what they add.
            let slots = match media_at {
                Some(list) => media_slots(list, i)?,
                None => Vec::new(),
            };
            let (raw, added) = if slots.is_empty() {
                (std::borrow::Cow::Borrowed(bodies.value(i)), Vec::new())
            } else {
                let (body, added) =
                    media::with_media(bodies.value(i), &slots).map_err(|e| about(trace_id, e))?;
                (std::borrow::Cow::Owned(body), added)
            };
            at = at.map(|a| media::moved(a, &added));
            let body = match (blocks.as_ref().filter(|(b, _)| b.is_valid(i)), at) {
                (Some((_, columns)), Some(at)) => {
                    columns.body(i, &raw, at).map_err(|e| about(trace_id, e))?
                }
                (None, None) => raw.into_owned(),
                (Some(_), None) => return Err(fail("prompt_at", "missing: prompt_blocks need it")),
                (None, Some(_)) => return Err(fail("prompt_at", "given without prompt_blocks")),
            };
            let mut request = PreparedRequest::new(
                trace_id.to_string(),
                apis.value(i),
                urls.value(i),
                body,
                arrivals.value(i),
            )?;
            request.model = value(models, i, StringArray::value).map(Arc::from);
            request.media = value(media_count, i, Int32Array::value).map(|count| Media {
                count,
                bytes: value(media_bytes, i, Int64Array::value).unwrap_or(0),
                pixels: value(media_pixels, i, Int64Array::value).unwrap_or(0),
                seconds: value(media_seconds, i, Float64Array::value).unwrap_or(0.0),
            });
            let history = match value(history_at, i, ListArray::value) {
                None => Vec::new(),
                Some(slots) => {
                    let slots: &Int64Array = typed(slots.as_ref(), "history_at")?;
                    let slots = slots
                        .iter()
                        .map(|at| {
                            offset(at, "history_at").map(|a| a.map(|a| media::moved(a, &added)))
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    for &at in slots.iter().flatten() {
                        body::check_slot(&request.body, at, "history_at")
                            .map_err(|e| about(trace_id, e))?;
                    }
                    slots
                }
            };
            match value(sessions, i, StringArray::value) {
                Some(session) => {
                    let index = value(turns, i, Int32Array::value)
                        .ok_or_else(|| fail("turn_index", "missing: a session's turn needs it"))?;
                    if index < 0 {
                        return Err(fail("turn_index", "must not be negative"));
                    }
                    if history.len() > index as usize {
                        return Err(fail(
                            "history_at",
                            "names a turn that is not before this one",
                        ));
                    }
                    request.session = Some(Turn {
                        session_id: session.into(),
                        index,
                        think_time_us: value(thinks, i, Int64Array::value).map(|t| t.max(0)),
                        history_at: history,
                    });
                }
                None if !history.is_empty() => {
                    return Err(fail("history_at", "given for a request without a session"))
                }
                None => {}
            }
            Ok(request)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use arrow_array::builder::{Int64Builder, ListBuilder, StructBuilder, UInt64Builder};
    use arrow_array::ArrayRef;
    use arrow_schema::Schema;

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
        assert!(requests[1].session.is_none());
    }

    #[test]
    fn session_columns_become_turns() {
        let mut columns = good();
        columns.push((
            "session_id",
            Arc::new(StringArray::from(vec![Some("s"), None])),
        ));
        columns.push((
            "turn_index",
            Arc::new(Int32Array::from(vec![Some(1), None])),
        ));
        columns.push((
            "think_time_us",
            Arc::new(Int64Array::from(vec![Some(2500), None])),
        ));
        let requests = requests_from_batch(&batch(columns)).unwrap();
        let turn = requests[0].session.as_ref().unwrap();
        assert_eq!(
            (&*turn.session_id, turn.index, turn.think_time_us),
            ("s", 1, Some(2500))
        );
        assert!(requests[1].session.is_none());
    }

    fn blocks(rows: &[Option<(i64, i64, &[u64])>]) -> ArrayRef {
        let DataType::Struct(fields) = prompt_blocks_type() else {
            unreachable!()
        };
        let mut b = StructBuilder::from_fields(fields, rows.len());
        for row in rows {
            let (tokens, size, ids) = row.unwrap_or((0, 0, &[]));
            b.field_builder::<Int64Builder>(0)
                .unwrap()
                .append_value(tokens);
            b.field_builder::<Int64Builder>(1)
                .unwrap()
                .append_value(size);
            let list = b
                .field_builder::<ListBuilder<Box<dyn arrow_array::builder::ArrayBuilder>>>(2)
                .unwrap();
            for id in ids {
                list.values()
                    .as_any_mut()
                    .downcast_mut::<UInt64Builder>()
                    .unwrap()
                    .append_value(*id);
            }
            list.append(true);
            b.field_builder::<UInt64Builder>(3).unwrap().append_value(0);
            b.append(row.is_some());
        }
        Arc::new(b.finish())
    }

    #[test]
    fn prompt_blocks_are_synthesized_into_the_body() {
        let mut columns = good();
        let template = br#"{"messages":[{"role":"user","content":""}]}"#;
        let at = template.windows(2).position(|w| w == b"\"\"").unwrap() as i64 + 1;
        columns[3].1 = Arc::new(BinaryArray::from(vec![template.as_ref(), b"{}"]));
        columns.push(("prompt_blocks", blocks(&[Some((12, 8, &[0, 1])), None])));
        columns.push((
            "prompt_at",
            Arc::new(Int64Array::from(vec![Some(at), None])),
        ));
        let requests = requests_from_batch(&batch(columns)).unwrap();
        let body: serde_json::Value = serde_json::from_slice(&requests[0].body).unwrap();
        assert_eq!(
            body["messages"][0]["content"],
            "if door shop four corn like us word day has sky long"
        );
        assert_eq!(&requests[1].body[..], b"{}");
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

        let mut no_turn = good();
        no_turn.push((
            "session_id",
            Arc::new(StringArray::from(vec![Some("s"), None])),
        ));
        assert!(message(no_turn).contains("request a: turn_index: missing"));

        let mut bad_blocks = good();
        bad_blocks[3].1 = Arc::new(BinaryArray::from(vec![br#"{"p":""}"#.as_ref(), b"{}"]));
        bad_blocks.push(("prompt_blocks", blocks(&[Some((2000, 512, &[0])), None])));
        bad_blocks.push(("prompt_at", Arc::new(Int64Array::from(vec![Some(6), None]))));
        assert!(message(bad_blocks).contains("request a: prompt_blocks.hash_ids: 1 blocks"));

        let history = |slots: Vec<Option<Vec<Option<i64>>>>| {
            let mut columns = good();
            columns.push(("session_id", Arc::new(StringArray::from(vec!["s", "s"]))));
            columns.push(("turn_index", Arc::new(Int32Array::from(vec![0, 1]))));
            let list = ListArray::from_iter_primitive::<arrow_array::types::Int64Type, _, _>(slots);
            columns.push(("history_at", Arc::new(list)));
            message(columns)
        };
        assert!(history(vec![None, Some(vec![Some(1)])])
            .contains("request b: history_at: byte 1 is not between the quotes"));
        assert!(history(vec![None, Some(vec![None, None])])
            .contains("request b: history_at: names a turn that is not before"));

        let mut no_at = good();
        no_at.push(("prompt_blocks", blocks(&[Some((12, 8, &[0, 1])), None])));
        assert!(message(no_at).contains("request a: prompt_at: missing"));
    }
}
