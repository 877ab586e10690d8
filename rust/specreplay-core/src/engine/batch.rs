//! Finished requests → one Arrow record batch, so they cross into Python as
//! columns (no Python object per chunk or per request). The column order and
//! types are `ENGINE_COLUMNS` in python/specreplay/schema.py; a Python test
//! checks the two agree.

use std::sync::Arc;

use arrow_array::builder::{Int32Builder, Int64Builder, Int8Builder, ListBuilder, StringBuilder};
use arrow_array::{ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, RecordBatch};
use arrow_schema::ArrowError;

use super::record::{channel_code, RequestRecord, StampSource};

pub fn to_record_batch(records: &[RequestRecord]) -> Result<RecordBatch, ArrowError> {
    to_record_batch_with(records, Extras::default())
}

/// Columns appended after the results-file ones, for a run that asked for
/// them. None is a results-file column: Python reads them and drops them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extras {
    /// `chunk_server_ts_us` (list of int64, parallel to `chunk_ts_us`): the
    /// simulator's `sim_sent_us` for each chunk, null where the chunk's
    /// event had none (`RunSpec::server_stamps`).
    pub server_stamps: bool,
    /// `chunk_text` (string: every chunk's text, in chunk order) and
    /// `chunk_text_chars` (list of int32, parallel to `chunk_ts_us`: the
    /// characters of it each chunk carried), for a tokenizer
    /// (`RunSpec::chunk_text`).
    pub chunk_text: bool,
}

pub fn to_record_batch_with(
    records: &[RequestRecord],
    extras: Extras,
) -> Result<RecordBatch, ArrowError> {
    let col = ColumnOf(records);
    let chunk_total: usize = records.iter().map(|r| r.chunks.len()).sum();
    let [chunk_ts, chunk_tokens, chunk_channel, chunk_delay] = chunk_columns(records, chunk_total);
    let mut columns: Vec<(&str, ArrayRef)> = vec![
        ("request_index", col.i64(&|r| Some(r.request_index))),
        ("trace_id", col.str(&|r| Some(r.trace_id.as_str()))),
        ("api", col.str(&|r| Some(r.api))),
        ("warmup", col.bool(&|r| Some(r.warmup))),
        ("scheduled_us", col.i64(&|r| Some(r.scheduled_us))),
        ("sent_us", col.i64(&|r| r.sent_us)),
        ("first_byte_us", col.i64(&|r| r.first_byte_us)),
        ("first_token_us", col.i64(&|r| r.first_token_us)),
        ("first_reasoning_us", col.i64(&|r| r.first_reasoning_us)),
        ("first_content_us", col.i64(&|r| r.first_content_us)),
        ("last_token_us", col.i64(&|r| r.last_token_us)),
        ("end_us", col.i64(&|r| r.end_us)),
        ("http_status", col.i32(&|r| r.http_status)),
        (
            "error_kind",
            col.str(&|r| r.error.as_ref().map(|(k, _)| k.as_str())),
        ),
        (
            "error_message",
            col.str(&|r| r.error.as_ref().map(|(_, m)| m.as_str())),
        ),
        ("finish_reason", col.str(&|r| r.finish_reason.as_deref())),
        ("prompt_tokens", col.i64(&|r| r.prompt_tokens)),
        ("cached_tokens", col.i64(&|r| r.cached_tokens)),
        ("reasoning_tokens", col.i64(&|r| r.reasoning_tokens)),
        ("content_tokens", col.i64(&|r| r.content_tokens)),
        ("output_tokens", col.i64(&|r| r.output_tokens)),
        (
            "token_source",
            col.str(&|r| r.token_source.map(|s| s.as_str())),
        ),
        ("chunk_count", col.i32(&|r| Some(r.chunks.len() as i32))),
        ("chunk_ts_us", chunk_ts),
        ("chunk_tokens", chunk_tokens),
        ("chunk_channel", chunk_channel),
        ("server_predicted_n", col.i64(&|r| r.server_predicted_n)),
        ("server_predicted_ms", col.f64(&|r| r.server_predicted_ms)),
        ("attempts", col.i32(&|r| Some(r.attempts))),
        ("chunk_delay_us", chunk_delay),
        (
            "stamp_source",
            col.str(&|r| StampSource::of(&r.chunks).map(StampSource::as_str)),
        ),
        ("connect_us", col.i64(&|r| r.connect_us)),
        ("session_id", col.str(&|r| r.session_id.as_deref())),
        ("turn_index", col.i32(&|r| r.turn_index)),
        ("session_turns", col.i32(&|r| r.session_turns)),
        ("predecessor_end_us", col.i64(&|r| r.predecessor_end_us)),
        ("think_time_us", col.i64(&|r| r.think_time_us)),
        (
            "chunk_token_source",
            col.str(&|r| r.chunk_token_source.map(|s| s.as_str())),
        ),
        ("tool_call_tokens", col.i64(&|r| r.tool_call_tokens)),
        ("tool_calls", col.i32(&|r| r.tool_calls)),
        ("tool_args_valid", col.bool(&|r| r.tool_args_valid)),
        ("items", col.i64(&|r| r.items)),
        ("model", col.str(&|r| r.model.as_deref())),
        ("media_count", col.i32(&|r| r.media.map(|m| m.count))),
        ("media_bytes", col.i64(&|r| r.media.map(|m| m.bytes))),
        ("media_pixels", col.i64(&|r| r.media.map(|m| m.pixels))),
        ("media_seconds", col.f64(&|r| r.media.map(|m| m.seconds))),
    ];
    if extras.server_stamps {
        columns.push((
            "chunk_server_ts_us",
            server_stamps_column(records, chunk_total),
        ));
    }
    if extras.chunk_text {
        let (text, chars) = chunk_text_columns(records, chunk_total);
        columns.push(("chunk_text", text));
        columns.push(("chunk_text_chars", chars));
    }
    // Every field nullable, whatever this batch holds: batches of one run
    // must share one schema.
    RecordBatch::try_from_iter_with_nullable(
        columns.into_iter().map(|(name, array)| (name, array, true)),
    )
}

/// One column of a batch, one value per record: the table in
/// `to_record_batch_with` names each column and how a record gives it.
struct ColumnOf<'a>(&'a [RequestRecord]);

impl<'a> ColumnOf<'a> {
    // arrow's arrays collect `Option`s directly: the slice's exact length
    // sizes them, as `with_capacity` did.
    fn i64(&self, f: &dyn Fn(&RequestRecord) -> Option<i64>) -> ArrayRef {
        Arc::new(self.0.iter().map(f).collect::<Int64Array>())
    }

    fn i32(&self, f: &dyn Fn(&RequestRecord) -> Option<i32>) -> ArrayRef {
        Arc::new(self.0.iter().map(f).collect::<Int32Array>())
    }

    fn f64(&self, f: &dyn Fn(&RequestRecord) -> Option<f64>) -> ArrayRef {
        Arc::new(self.0.iter().map(f).collect::<Float64Array>())
    }

    fn bool(&self, f: &dyn Fn(&RequestRecord) -> Option<bool>) -> ArrayRef {
        Arc::new(self.0.iter().map(f).collect::<BooleanArray>())
    }

    fn str(&self, f: &dyn Fn(&'a RequestRecord) -> Option<&'a str>) -> ArrayRef {
        let n = self.0.len();
        let mut b = StringBuilder::with_capacity(n, n * 8);
        self.0.iter().for_each(|r| b.append_option(f(r)));
        Arc::new(b.finish())
    }
}

/// The per-chunk list columns: `chunk_ts_us`, `chunk_tokens`,
/// `chunk_channel`, `chunk_delay_us`, one pass over the chunks.
fn chunk_columns(records: &[RequestRecord], chunk_total: usize) -> [ArrayRef; 4] {
    // Sized for this batch: `ListBuilder::new` reserves offsets for 1,024
    // lists (4 KB a column, 16 KB a batch over these four), which every batch
    // Python keeps until the file is written holds on to, and a batch is
    // often one row.
    let n = records.len();
    let mut ts = ListBuilder::with_capacity(Int64Builder::with_capacity(chunk_total), n);
    let mut tokens = ListBuilder::with_capacity(Int32Builder::with_capacity(chunk_total), n);
    let mut channel = ListBuilder::with_capacity(Int8Builder::with_capacity(chunk_total), n);
    let mut delay = ListBuilder::with_capacity(Int32Builder::with_capacity(chunk_total), n);
    for r in records {
        for c in &r.chunks {
            ts.values().append_value(c.ts_us);
            tokens.values().append_value(c.tokens);
            channel.values().append_value(channel_code(c.channel));
            delay.values().append_option(c.delay_us);
        }
        ts.append(true);
        tokens.append(true);
        channel.append(true);
        delay.append(true);
    }
    [
        Arc::new(ts.finish()),
        Arc::new(tokens.finish()),
        Arc::new(channel.finish()),
        Arc::new(delay.finish()),
    ]
}

/// `Extras::server_stamps`'s column.
fn server_stamps_column(records: &[RequestRecord], chunk_total: usize) -> ArrayRef {
    let mut stamps =
        ListBuilder::with_capacity(Int64Builder::with_capacity(chunk_total), records.len());
    for r in records {
        for i in 0..r.chunks.len() {
            stamps
                .values()
                .append_option(r.server_stamps.get(i).copied().flatten());
        }
        stamps.append(true);
    }
    Arc::new(stamps.finish())
}

/// `Extras::chunk_text`'s two columns: the text, and its characters per chunk.
fn chunk_text_columns(records: &[RequestRecord], chunk_total: usize) -> (ArrayRef, ArrayRef) {
    let text_total: usize = records.iter().map(|r| r.chunk_text.len()).sum();
    let mut text = StringBuilder::with_capacity(records.len(), text_total);
    let mut chars = ListBuilder::new(Int32Builder::with_capacity(chunk_total));
    for r in records {
        text.append_value(&r.chunk_text);
        for i in 0..r.chunks.len() {
            let c = r.chunk_text_chars.get(i).copied().unwrap_or(0);
            chars
                .values()
                .append_value(i32::try_from(c).unwrap_or(i32::MAX));
        }
        chars.append(true);
    }
    (Arc::new(text.finish()), Arc::new(chars.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Channel;
    use crate::engine::record::{Chunk, ErrorKind, TokenSource};

    #[test]
    fn a_one_row_batch_holds_what_its_row_needs() {
        // Python keeps every batch until the file is written: one row's
        // 47 columns cost some 64-byte buffers each, not room for 1,024 lists.
        let row = RequestRecord {
            trace_id: "a".into(),
            api: "chat",
            chunks: vec![
                Chunk {
                    ts_us: 10,
                    delay_us: Some(3),
                    tokens: 1,
                    channel: Channel::Content,
                };
                64
            ],
            ..Default::default()
        };
        let batch = to_record_batch(&[row]).unwrap();
        let bytes = batch.get_array_memory_size();
        assert!(bytes < 10_000, "{bytes} bytes for one row");
    }

    #[test]
    fn rows_and_list_columns_line_up() {
        let ok = RequestRecord {
            request_index: 0,
            trace_id: "a".into(),
            api: "chat",
            scheduled_us: 5,
            sent_us: Some(6),
            output_tokens: Some(3),
            token_source: Some(TokenSource::Usage),
            chunks: vec![
                Chunk {
                    ts_us: 10,
                    delay_us: Some(3),
                    tokens: 1,
                    channel: Channel::Reasoning,
                },
                Chunk {
                    ts_us: 20,
                    delay_us: None,
                    tokens: 2,
                    channel: Channel::Content,
                },
            ],
            ..Default::default()
        };
        let failed = RequestRecord {
            request_index: 1,
            trace_id: "b".into(),
            api: "chat",
            error: Some((ErrorKind::Connect, "refused".into())),
            ..Default::default()
        };
        let batch = to_record_batch(&[ok, failed]).unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.num_columns(), 47);
        let ts = batch.column_by_name("chunk_ts_us").unwrap();
        let list = ts
            .as_any()
            .downcast_ref::<arrow_array::ListArray>()
            .unwrap();
        assert_eq!(list.value_offsets(), &[0, 2, 2]);
        let kind = batch.column_by_name("error_kind").unwrap();
        assert!(kind.is_null(0));
        assert!(!kind.is_null(1));
        assert!(batch.column_by_name("sent_us").unwrap().is_null(1));
        assert!(batch.column_by_name("chunk_server_ts_us").is_none());
        use arrow_array::Array;
        let source = batch.column_by_name("stamp_source").unwrap();
        let source = source
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .unwrap();
        // One chunk with a kernel stamp and one without; no chunks at all.
        assert_eq!(source.value(0), "mixed");
        assert!(source.is_null(1));
    }

    #[test]
    fn chunk_text_columns_are_opt_in_and_line_up() {
        use arrow_array::Array;

        let chunk = Chunk {
            ts_us: 10,
            delay_us: None,
            tokens: 1,
            channel: Channel::Content,
        };
        let rows = [
            RequestRecord {
                chunks: vec![chunk, chunk],
                chunk_text: "héllo world".into(),
                chunk_text_chars: vec![5, 6],
                ..Default::default()
            },
            RequestRecord::default(),
        ];
        assert!(to_record_batch(&rows)
            .unwrap()
            .column_by_name("chunk_text")
            .is_none());
        let extras = Extras {
            chunk_text: true,
            ..Extras::default()
        };
        let batch = to_record_batch_with(&rows, extras).unwrap();
        let text = batch.column_by_name("chunk_text").unwrap();
        let text = text
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .unwrap();
        assert_eq!((text.value(0), text.value(1)), ("héllo world", ""));
        let chars = batch.column_by_name("chunk_text_chars").unwrap();
        let chars = chars
            .as_any()
            .downcast_ref::<arrow_array::ListArray>()
            .unwrap();
        assert_eq!(chars.value_offsets(), &[0, 2, 2]);
        assert_eq!(chars.values().len(), 2);
    }

    #[test]
    fn server_stamps_column_is_opt_in_and_parallel_to_the_chunks() {
        use arrow_array::Array;

        let chunk = Chunk {
            ts_us: 10,
            delay_us: None,
            tokens: 1,
            channel: Channel::Content,
        };
        let stamped = RequestRecord {
            chunks: vec![chunk, chunk],
            server_stamps: vec![Some(7), None],
            ..Default::default()
        };
        // No stamps kept (a non-streaming answer): nulls, same list lengths.
        let unstamped = RequestRecord {
            chunks: vec![chunk],
            ..Default::default()
        };
        let extras = Extras {
            server_stamps: true,
            ..Extras::default()
        };
        let batch = to_record_batch_with(&[stamped, unstamped], extras).unwrap();
        assert_eq!(batch.num_columns(), 48);
        assert_eq!(batch.schema().field(47).name(), "chunk_server_ts_us");
        let list = batch
            .column(47)
            .as_any()
            .downcast_ref::<arrow_array::ListArray>()
            .unwrap();
        assert_eq!(list.value_offsets(), &[0, 2, 3]);
        let values = list
            .values()
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .unwrap();
        assert_eq!(
            (values.value(0), values.is_null(1), values.is_null(2)),
            (7, true, true)
        );
    }
}
