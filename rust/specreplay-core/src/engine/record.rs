//! One finished request, as it becomes one row of the results file.

use crate::decode::Channel;

/// Why a request did not succeed. The string forms are the `error_kind`
/// column's values (documented in docs/results.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Could not connect, or the connection failed before response headers.
    Connect,
    /// The server answered with a non-2xx status.
    Http,
    /// The connection failed while the body was streaming.
    Stream,
    /// The server sent an error payload inside the stream.
    StreamError,
    /// A payload could not be parsed (bad JSON, invalid UTF-8, oversized event).
    Decode,
    /// The stream ended without its terminal event (`[DONE]`, `message_stop`, …).
    Truncated,
    /// The whole-request timeout expired.
    Timeout,
    /// No bytes arrived for longer than the stall timeout.
    Stall,
    /// The run was cancelled (Ctrl-C) while the request was in flight.
    Cancelled,
    /// Never sent: an earlier turn of its session failed, and a user does not
    /// go on with a conversation whose answer never came.
    SkippedAfterFailure,
    /// The engine's task for the request panicked (a bug in specreplay):
    /// the message is the panic's; whatever the request measured is gone.
    EnginePanic,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Http => "http",
            ErrorKind::Stream => "stream",
            ErrorKind::StreamError => "stream_error",
            ErrorKind::Decode => "decode",
            ErrorKind::Truncated => "truncated",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Stall => "stall",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::SkippedAfterFailure => "skipped_after_failure",
            ErrorKind::EnginePanic => "engine_panic",
        }
    }
}

/// How the token counts of a request were obtained (`token_source` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    ContinuousUsage,
    Usage,
    UsageSplitEstimated,
    Chunks,
}

impl TokenSource {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenSource::ContinuousUsage => "continuous_usage",
            TokenSource::Usage => "usage",
            TokenSource::UsageSplitEstimated => "usage_split_estimated",
            TokenSource::Chunks => "chunks",
        }
    }
}

/// How a request's per-chunk token counts were obtained
/// (`chunk_token_source` column). Whatever the source, they add up to the
/// output tokens, but for tokens that made no chunk (docs/results.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkTokenSource {
    /// The server's cumulative count on every text chunk: exact.
    ContinuousUsage,
    /// The server's final count split over the chunks in proportion to
    /// their text (the count of each side, reasoning and answer, over its
    /// own chunks when the server gave the split): an estimate.
    TextLength,
    /// No usage at all: one token per chunk, as the total is.
    OnePerChunk,
}

impl ChunkTokenSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ChunkTokenSource::ContinuousUsage => "continuous_usage",
            ChunkTokenSource::TextLength => "text_length",
            ChunkTokenSource::OnePerChunk => "one_per_chunk",
        }
    }
}

/// When the bytes of a read arrived: the kernel's receive stamp of the socket
/// read that completed them when there is one, else the engine's own stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub ts_us: i64,
    /// The engine's own delay: when the request task got the bytes minus the
    /// kernel stamp. None when `ts_us` is the engine's stamp (no kernel stamp).
    pub delay_us: Option<i32>,
}

impl From<i64> for Stamp {
    /// An engine-side stamp (no kernel stamp).
    fn from(ts_us: i64) -> Self {
        Stamp {
            ts_us,
            delay_us: None,
        }
    }
}

/// A text-carrying chunk: when the read that completed it arrived (`Stamp`),
/// how many tokens it carried, and on which channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub ts_us: i64,
    pub delay_us: Option<i32>,
    pub tokens: i32,
    pub channel: Channel,
}

/// Which clock a row's chunk stamps came from (`stamp_source` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StampSource {
    /// Every chunk has the kernel's receive stamp.
    Kernel,
    /// No chunk has one (another OS, the option refused, every lookup missed).
    User,
    /// Some chunks fell back to the engine's stamp.
    Mixed,
}

impl StampSource {
    pub fn as_str(self) -> &'static str {
        match self {
            StampSource::Kernel => "kernel",
            StampSource::User => "user",
            StampSource::Mixed => "mixed",
        }
    }

    /// The source of a row's chunks; None without chunks.
    pub fn of(chunks: &[Chunk]) -> Option<StampSource> {
        let kernel = chunks.iter().filter(|c| c.delay_us.is_some()).count();
        match kernel {
            _ if chunks.is_empty() => None,
            0 => Some(StampSource::User),
            k if k == chunks.len() => Some(StampSource::Kernel),
            _ => Some(StampSource::Mixed),
        }
    }
}

/// One tool call as it streamed: its id and name (when the server gave
/// them) and the arguments' text.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ToolCallText {
    pub id: Option<String>,
    pub name: Option<String>,
    pub arguments: String,
}

impl ToolCallText {
    /// Whether the arguments are one complete JSON value: arguments cut at
    /// the token limit are not, and an agent could not run the call.
    /// No text at all counts as complete (a call without arguments).
    pub fn arguments_valid(&self) -> bool {
        let text = self.arguments.trim();
        text.is_empty() || serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
    }
}

pub fn channel_code(channel: Channel) -> i8 {
    match channel {
        Channel::Reasoning => 0,
        Channel::Content => 1,
        Channel::Tool => 2,
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestRecord {
    pub request_index: i64,
    pub trace_id: String,
    pub api: &'static str,
    pub warmup: bool,
    pub scheduled_us: i64,
    pub sent_us: Option<i64>,
    pub first_byte_us: Option<i64>,
    pub first_token_us: Option<i64>,
    pub first_reasoning_us: Option<i64>,
    pub first_content_us: Option<i64>,
    pub last_token_us: Option<i64>,
    pub end_us: Option<i64>,
    pub http_status: Option<i32>,
    pub error: Option<(ErrorKind, String)>,
    pub finish_reason: Option<String>,
    pub prompt_tokens: Option<i64>,
    pub cached_tokens: Option<i64>,
    pub reasoning_tokens: Option<i64>,
    pub content_tokens: Option<i64>,
    /// Output tokens of tool-call arguments; output = reasoning + content + these.
    pub tool_call_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    /// Tool calls the server made; None when it made none.
    pub tool_calls: Option<i32>,
    /// Whether every tool call's arguments are complete JSON; None without calls.
    pub tool_args_valid: Option<bool>,
    /// The calls themselves (not a results column; live history and tests).
    pub tool_call_list: Vec<ToolCallText>,
    /// Embeddings returned or documents scored (embeddings, rerank).
    pub items: Option<i64>,
    /// The model the request asked for (`model` request column).
    pub model: Option<std::sync::Arc<str>>,
    /// The media parts its body carried (request columns of the same names).
    pub media: Option<super::spec::Media>,
    pub token_source: Option<TokenSource>,
    /// None without chunks.
    pub chunk_token_source: Option<ChunkTokenSource>,
    pub chunks: Vec<Chunk>,
    /// Only with `RunSpec::server_stamps`: per chunk of `chunks`, the
    /// `sim_sent_us` of the event that carried it (None if it had none).
    /// Empty otherwise.
    pub server_stamps: Vec<Option<i64>>,
    /// Only with `RunSpec::chunk_text`: every chunk's text, in chunk order
    /// (empty otherwise).
    pub chunk_text: String,
    /// Parallel to `chunks`: the characters of text each carried (the
    /// per-chunk estimate's weights; with `chunk_text`, where each chunk's
    /// text ends in it).
    pub chunk_text_chars: Vec<u32>,
    pub server_predicted_n: Option<i64>,
    pub server_predicted_ms: Option<f64>,
    /// Attempts made (1 without retries).
    pub attempts: i32,
    /// TCP connect + TLS handshake, µs, when this request was the first on a
    /// connection opened during the run.
    pub connect_us: Option<i64>,
    /// The request's session (`PreparedRequest::session`), its place in it,
    /// and (dependent sessions) how many turns it has in this point.
    pub session_id: Option<std::sync::Arc<str>>,
    pub turn_index: Option<i32>,
    pub session_turns: Option<i32>,
    /// Dependent turns: the previous turn's `end_us`, and the think time
    /// waited after it (`scheduled_us` is their sum).
    pub predecessor_end_us: Option<i64>,
    pub think_time_us: Option<i64>,
    /// The answer's text (content channel), kept only for live history; not
    /// a results column.
    pub answer: Option<String>,
}
