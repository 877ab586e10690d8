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

/// A configuration error in request `trace_id`'s `field`.
fn invalid(trace_id: &str, field: &str, message: impl Into<String>) -> CoreError {
    CoreError::config(format!("request {trace_id}: {field}"), message)
}

/// `e` about request `trace_id` (its field path prefixed).
fn about(trace_id: &str, e: CoreError) -> CoreError {
    match e {
        CoreError::Config { field, message } => invalid(trace_id, &field, message),
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
    let columns = Columns::of(batch)?;
    (0..batch.num_rows()).map(|i| columns.request(i)).collect()
}

/// Every column of a requests batch, checked and typed once.
struct Columns<'a> {
    ids: &'a StringArray,
    apis: &'a StringArray,
    urls: &'a StringArray,
    bodies: &'a BinaryArray,
    arrivals: &'a Float64Array,
    sessions: Option<&'a StringArray>,
    turns: Option<&'a Int32Array>,
    thinks: Option<&'a Int64Array>,
    blocks: Option<(&'a StructArray, BlockColumns<'a>)>,
    prompt_at: Option<&'a Int64Array>,
    history_at: Option<&'a ListArray>,
    models: Option<&'a StringArray>,
    media_at: Option<&'a ListArray>,
    media_count: Option<&'a Int32Array>,
    media_bytes: Option<&'a Int64Array>,
    media_pixels: Option<&'a Int64Array>,
    media_seconds: Option<&'a Float64Array>,
}

impl<'a> Columns<'a> {
    fn of(batch: &'a RecordBatch) -> Result<Self, CoreError> {
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
        let blocks: Option<&StructArray> = optional(batch, "prompt_blocks")?;
        let history_at: Option<&ListArray> = optional(batch, "history_at")?;
        if let Some(list) = history_at {
            typed::<Int64Array>(list.values().as_ref(), "history_at")?;
        }
        Ok(Columns {
            ids: required(batch, "trace_id")?,
            apis: required(batch, "api")?,
            urls: required(batch, "url")?,
            bodies: required(batch, "body")?,
            arrivals: required(batch, "arrival_s")?,
            sessions: optional(batch, "session_id")?,
            turns: optional(batch, "turn_index")?,
            thinks: optional(batch, "think_time_us")?,
            blocks: blocks
                .map(|b| BlockColumns::new(b).map(|c| (b, c)))
                .transpose()?,
            prompt_at: optional(batch, "prompt_at")?,
            history_at,
            models: optional(batch, "model")?,
            media_at: optional(batch, "media_at")?,
            media_count: optional(batch, "media_count")?,
            media_bytes: optional(batch, "media_bytes")?,
            media_pixels: optional(batch, "media_pixels")?,
            media_seconds: optional(batch, "media_seconds")?,
        })
    }

    /// Row `i`: its body (`body`), its fields, and its session (`turn`).
    fn request(&self, i: usize) -> Result<PreparedRequest, CoreError> {
        let trace_id = self.ids.value(i);
        let (body, added) = self.body(i, trace_id)?;
        let mut request = PreparedRequest::new(
            trace_id.to_string(),
            self.apis.value(i),
            self.urls.value(i),
            body,
            self.arrivals.value(i),
        )?;
        request.model = value(self.models, i, StringArray::value).map(Arc::from);
        request.media = value(self.media_count, i, Int32Array::value).map(|count| Media {
            count,
            bytes: value(self.media_bytes, i, Int64Array::value).unwrap_or(0),
            pixels: value(self.media_pixels, i, Int64Array::value).unwrap_or(0),
            seconds: value(self.media_seconds, i, Float64Array::value).unwrap_or(0.0),
        });
        let history = self.history(i, trace_id, &request.body, &added)?;
        request.session = self.turn(i, trace_id, history)?;
        Ok(request)
    }

    /// Row `i`'s body as sent: its stored media put in first (the other
    /// offsets move by what they add: the bytes added, returned), then its
    /// prompt blocks' text at `prompt_at`.
    fn body(&self, i: usize, trace_id: &str) -> Result<(Vec<u8>, media::Added), CoreError> {
        let mut at = offset(value(self.prompt_at, i, Int64Array::value), "prompt_at")?;
        let slots = match self.media_at {
            Some(list) => media_slots(list, i)?,
            None => Vec::new(),
        };
        let (raw, added) = if slots.is_empty() {
            (std::borrow::Cow::Borrowed(self.bodies.value(i)), Vec::new())
        } else {
            let (body, added) =
                media::with_media(self.bodies.value(i), &slots).map_err(|e| about(trace_id, e))?;
            (std::borrow::Cow::Owned(body), added)
        };
        at = at.map(|a| media::moved(a, &added));
        let body = match (self.blocks.as_ref().filter(|(b, _)| b.is_valid(i)), at) {
            (Some((_, columns)), Some(at)) => {
                columns.body(i, &raw, at).map_err(|e| about(trace_id, e))?
            }
            (None, None) => raw.into_owned(),
            (Some(_), None) => {
                return Err(invalid(
                    trace_id,
                    "prompt_at",
                    "missing: prompt_blocks need it",
                ))
            }
            (None, Some(_)) => {
                return Err(invalid(
                    trace_id,
                    "prompt_at",
                    "given without prompt_blocks",
                ))
            }
        };
        Ok((body, added))
    }

    /// Row `i`'s `history_at` slots in `body` (moved by the media `added`), each checked.
    fn history(
        &self,
        i: usize,
        trace_id: &str,
        body: &[u8],
        added: &[(usize, usize)],
    ) -> Result<Vec<Option<usize>>, CoreError> {
        let Some(slots) = value(self.history_at, i, ListArray::value) else {
            return Ok(Vec::new());
        };
        let slots: &Int64Array = typed(slots.as_ref(), "history_at")?;
        let slots = slots
            .iter()
            .map(|at| offset(at, "history_at").map(|a| a.map(|a| media::moved(a, added))))
            .collect::<Result<Vec<_>, _>>()?;
        for &at in slots.iter().flatten() {
            body::check_slot(body, at, "history_at").map_err(|e| about(trace_id, e))?;
        }
        Ok(slots)
    }

    /// Row `i`'s place in its session, if it has one.
    fn turn(
        &self,
        i: usize,
        trace_id: &str,
        history: Vec<Option<usize>>,
    ) -> Result<Option<Turn>, CoreError> {
        let Some(session) = value(self.sessions, i, StringArray::value) else {
            if !history.is_empty() {
                return Err(invalid(
                    trace_id,
                    "history_at",
                    "given for a request without a session",
                ));
            }
            return Ok(None);
        };
        let index = value(self.turns, i, Int32Array::value)
            .ok_or_else(|| invalid(trace_id, "turn_index", "missing: a session's turn needs it"))?;
        if index < 0 {
            return Err(invalid(trace_id, "turn_index", "must not be negative"));
        }
        if history.len() > index as usize {
            return Err(invalid(
                trace_id,
                "history_at",
                "names a turn that is not before this one",
            ));
        }
        Ok(Some(Turn {
            session_id: session.into(),
            index,
            think_time_us: value(self.thinks, i, Int64Array::value).map(|t| t.max(0)),
            history_at: history,
        }))
    }
}

#[cfg(test)]
#[path = "request_columns_tests.rs"]
mod tests;
