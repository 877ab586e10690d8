//! Turns the decoded records of one response into timestamps and token counts.
//!
//! Token counts come from the server whenever it reports them; chunks are
//! counted only as a last resort, and the request records which it was
//! (`TokenSource`). A chunk may carry several tokens (speculative decoding,
//! stream intervals), so chunk counts are never taken for token counts when
//! usage exists.
//!
//! Per-chunk counts are exact when the server reports a cumulative count on
//! every text chunk: `usage` (vLLM, SGLang with `continuous_usage_stats`) or
//! llama.cpp's `timings.predicted_n` (with `timings_per_token`; llama.cpp
//! ignores `continuous_usage_stats`). Either makes the source
//! `ContinuousUsage`. With a final count only, it is split over the chunks
//! in proportion to their text (`apportion`), so the per-chunk counts still
//! add up to the output tokens (`ChunkTokenSource`).

use crate::decode::{Channel, Dialect, Record, Timings, Usage};

use super::apportion::{apportion, split_by_side};
use super::record::{Chunk, ChunkTokenSource, RequestRecord, Stamp, TokenSource, ToolCallText};

#[derive(Debug, Default)]
pub struct StreamAccount {
    chunks: Vec<Chunk>,
    /// Parallel to `chunks`: the characters of text each carried, the
    /// weights of the per-chunk estimate.
    text_chars: Vec<u32>,
    /// Every chunk's text in chunk order, kept only when asked for (for a
    /// tokenizer, `RunSpec::chunk_text`); `text_chars` marks the chunks.
    text: Option<String>,
    /// Parallel to `chunks`, filled only by `stamp_new_chunks`.
    server_stamps: Vec<Option<i64>>,
    first_reasoning_us: Option<i64>,
    first_answer_us: Option<i64>,
    usage: Usage,
    saw_usage: bool,
    /// Usage arrived on text-carrying events: per-chunk counts are exact.
    continuous: bool,
    /// The cumulative count already given to chunks.
    counted: u64,
    /// The latest cumulative count the server reported, on any event.
    last_cumulative: u64,
    timings: Option<Timings>,
    pub finish_reason: Option<String>,
    pub stream_error: Option<String>,
    pub done: bool,
    /// The answer's text (content channel), only when asked for (live history).
    answer: Option<String>,
    /// The tool calls the server made, in order, with their arguments' text
    /// (kept always: to tell cut arguments, and for live history).
    tool_calls: Vec<ToolCallText>,
    /// Items of a non-streamed answer (embeddings, rerank).
    items: Option<u64>,
}

impl StreamAccount {
    /// An account that also keeps the answer's text when `keep_answer`, and
    /// every chunk's text when `keep_chunk_text`.
    pub fn new(keep_answer: bool, keep_chunk_text: bool) -> Self {
        StreamAccount {
            answer: keep_answer.then(String::new),
            text: keep_chunk_text.then(String::new),
            ..Default::default()
        }
    }

    /// Accounts for the records decoded from one SSE event, all of which
    /// arrived with the socket read stamped `stamp`.
    pub fn on_event(&mut self, stamp: impl Into<Stamp>, records: &[Record]) {
        let stamp = stamp.into();
        let event = self.read_records(records);
        let exact_tokens = self.count_reported(&event);
        self.keep_chunk_text(&event.channels, records);
        self.push_event_chunks(stamp, &event.channels, exact_tokens);
    }

    /// Takes in what the records say about the request as a whole (answer
    /// and tool-call text, finish, errors, items, timings) and returns what
    /// the event's chunks are made from.
    fn read_records<'r>(&mut self, records: &'r [Record]) -> EventReport<'r> {
        let mut event = EventReport::default();
        for record in records {
            match record {
                Record::Text { channel, text } if !text.is_empty() => {
                    self.keep_answer_text(*channel, text);
                    event.channels.add(*channel, text.chars().count() as u32);
                }
                Record::Text { .. } => {}
                Record::ToolCall { id, name } => self.tool_calls.push(ToolCallText {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: String::new(),
                }),
                Record::Items(n) => self.items = Some(*n),
                Record::Usage(u) => event.usage = Some(u),
                Record::Timings(t) => {
                    event.predicted = t.predicted_n;
                    self.timings = Some(t.clone());
                }
                Record::Finish { reason } => self.finish_reason = Some(reason.clone()),
                Record::Error { message, code } => {
                    self.stream_error = Some(match code {
                        Some(code) => format!("{message} [{code}]"),
                        None => message.clone(),
                    })
                }
                Record::Done => self.done = true,
            }
        }
        event
    }

    /// Keeps `text` where the record asks for it: the answer's text (when
    /// kept) and the current tool call's arguments.
    fn keep_answer_text(&mut self, channel: Channel, text: &str) {
        if let (Channel::Content, Some(answer)) = (channel, &mut self.answer) {
            answer.push_str(text);
        }
        if channel == Channel::Tool {
            if self.tool_calls.is_empty() {
                // Arguments before any call was named: one call.
                self.tool_calls.push(ToolCallText::default());
            }
            let call = self.tool_calls.last_mut().expect("one call at least");
            call.arguments.push_str(text);
        }
    }

    /// Takes in the server's counts and returns the tokens this event
    /// carried, when the server says so: the change in its cumulative count
    /// (usage first, llama.cpp's timings otherwise) since the last text
    /// event, so tokens that made no chunk of their own (`</think>`) count in
    /// the next chunk.
    fn count_reported(&mut self, event: &EventReport) -> Option<u64> {
        let mut exact_tokens: Option<u64> = None;
        if let Some(u) = event.usage {
            self.saw_usage = true;
            // Later reports may omit fields an earlier one gave (Anthropic's
            // message_delta has no input count): merge, don't replace.
            self.usage.merge(u);
        }
        if let Some(c) = event
            .usage
            .and_then(|u| u.completion_tokens)
            .or(event.predicted)
        {
            if !event.channels.is_empty() {
                self.continuous = true;
                exact_tokens = Some(c.saturating_sub(self.counted));
                self.counted = c;
            }
            self.last_cumulative = c;
        }
        exact_tokens
    }

    /// Keeps the chunks' text (when asked), as the chunks are made: channel
    /// by channel in order of first appearance.
    fn keep_chunk_text(&mut self, channels: &EventChannels, records: &[Record]) {
        let Some(kept) = &mut self.text else {
            return;
        };
        for &(channel, _) in channels.as_slice() {
            for record in records {
                if let Record::Text { channel: c, text } = record {
                    if *c == channel {
                        kept.push_str(text);
                    }
                }
            }
        }
    }

    /// One chunk per channel the event carried text on. One event rarely
    /// holds two channels: the reasoning→content boundary, when the server
    /// merged steps (vLLM does under load). With an exact count it is split
    /// over the channels by their text, at least one token each: the
    /// closing `</think>` between them has no text of its own, and giving
    /// the later channel one token put a merged answer's tokens in the
    /// reasoning.
    fn push_event_chunks(
        &mut self,
        stamp: Stamp,
        channels: &EventChannels,
        exact_tokens: Option<u64>,
    ) {
        let channels = channels.as_slice();
        let parts = match exact_tokens {
            Some(t) => {
                let chars: Vec<u64> = channels.iter().map(|&(_, c)| u64::from(c)).collect();
                apportion(t, &chars, true)
            }
            None => vec![1; channels.len()],
        };
        for (&(channel, chars), tokens) in channels.iter().zip(parts) {
            self.push_chunk(stamp, tokens, channel, chars);
        }
    }

    /// Gives every chunk pushed since the last call the server's send stamp
    /// `server_ts_us` (only used with `RunSpec::server_stamps`).
    pub fn stamp_new_chunks(&mut self, server_ts_us: Option<i64>) {
        self.server_stamps.resize(self.chunks.len(), server_ts_us);
    }

    fn push_chunk(&mut self, stamp: Stamp, tokens: u64, channel: Channel, chars: u32) {
        let ts_us = stamp.ts_us;
        match channel {
            Channel::Reasoning => self.first_reasoning_us.get_or_insert(ts_us),
            Channel::Content | Channel::Tool => self.first_answer_us.get_or_insert(ts_us),
        };
        self.chunks.push(Chunk {
            ts_us,
            delay_us: stamp.delay_us,
            tokens: clamp_i32(tokens),
            channel,
        });
        self.text_chars.push(chars);
    }

    /// Splits `output` over the chunks in proportion to their text: each
    /// side over its own chunks when `reasoning` is the server's count, all
    /// together otherwise. Returns the reasoning chunks' sum.
    fn spread(&mut self, output: i64, reasoning: Option<i64>) -> i64 {
        let is_reasoning: Vec<bool> = self
            .chunks
            .iter()
            .map(|c| c.channel == Channel::Reasoning)
            .collect();
        let weights: Vec<u64> = self.text_chars.iter().map(|&c| u64::from(c)).collect();
        let (parts, reasoning_sum) = split_by_side(
            &weights,
            &is_reasoning,
            output.max(0) as u64,
            reasoning.map(|r| r.max(0) as u64),
        );
        for (chunk, part) in self.chunks.iter_mut().zip(parts) {
            chunk.tokens = clamp_i32(part);
        }
        reasoning_sum as i64
    }

    /// Writes timestamps and token counts into the request's record.
    pub fn finish_into(mut self, rec: &mut RequestRecord) {
        let usage = std::mem::take(&mut self.usage);
        let (source, reasoning, output) = self.token_counts(&usage);
        let (chunk_source, reasoning) = self.chunk_counts(source, output, reasoning);
        let tool = self.tool_tokens(output, reasoning);
        let retrieval = rec.api.parse::<Dialect>().is_ok_and(|d| d.is_retrieval());
        if retrieval || (self.items.is_some() && self.chunks.is_empty()) {
            // Embeddings, rerank: items and input tokens, no output.
            rec.items = self.items.map(|n| n as i64);
            rec.token_source = self.saw_usage.then_some(TokenSource::Usage);
        } else {
            rec.reasoning_tokens = Some(reasoning);
            rec.content_tokens = Some(output - reasoning - tool);
            rec.tool_call_tokens = Some(tool);
            rec.output_tokens = Some(output);
            rec.token_source = Some(source);
        }
        rec.chunk_token_source = chunk_source;
        if !self.tool_calls.is_empty() {
            rec.tool_calls = Some(self.tool_calls.len() as i32);
            rec.tool_args_valid = Some(self.tool_calls.iter().all(ToolCallText::arguments_valid));
            // Live history: a turn answered with a tool call goes on with the
            // call the server made (its first call's arguments take the slot).
            if let Some(answer) = &mut self.answer {
                answer.clone_from(&self.tool_calls[0].arguments);
            }
        }
        rec.tool_call_list = std::mem::take(&mut self.tool_calls);
        if self.saw_usage {
            rec.prompt_tokens = usage.prompt_tokens.map(|p| p as i64);
            rec.cached_tokens = usage.cached_tokens.map(|p| p as i64);
        }
        if let Some(t) = &self.timings {
            rec.server_predicted_n = t.predicted_n.map(|n| n as i64);
            rec.server_predicted_ms = t.predicted_ms;
        }
        rec.first_token_us = self.chunks.first().map(|c| c.ts_us);
        rec.first_reasoning_us = self.first_reasoning_us;
        rec.first_content_us = self.first_answer_us;
        rec.last_token_us = self.chunks.last().map(|c| c.ts_us);
        rec.finish_reason = self.finish_reason;
        rec.chunks = self.chunks;
        rec.server_stamps = self.server_stamps;
        rec.chunk_text = self.text.unwrap_or_default();
        rec.chunk_text_chars = self.text_chars;
        rec.answer = self.answer;
    }

    /// How the output tokens were counted, and the reasoning and output
    /// counts, from the server's `usage` and the chunks.
    fn token_counts(&self, usage: &Usage) -> (TokenSource, i64, i64) {
        // Per side, reasoning and answer: the tokens the chunks carried and
        // how many chunks there were.
        let (mut reasoning_chunks, mut answer_chunks) = (0i64, 0i64);
        let (mut reasoning_count, mut answer_count) = (0i64, 0i64);
        for c in &self.chunks {
            if c.channel == Channel::Reasoning {
                reasoning_chunks += i64::from(c.tokens);
                reasoning_count += 1;
            } else {
                answer_chunks += i64::from(c.tokens);
                answer_count += 1;
            }
        }
        let completion = usage.completion_tokens.map(|c| c as i64);
        // The server's reasoning count, unless the stream contradicts it:
        // every text chunk carried at least one token of its channel. vLLM's
        // reasoning parsers count only tokens between a generated <think>
        // and </think>, so when the chat template opens the think block in
        // the prompt (DeepSeek-R1, Qwen3) it reports 0 for a whole stream of
        // reasoning; taken at its word, that hid the budget trap.
        let server_reasoning = usage
            .reasoning_tokens
            .map(|r| r as i64)
            .filter(|&r| r >= reasoning_count && completion.is_none_or(|c| c - r >= answer_count));
        match (self.continuous, completion, server_reasoning) {
            (true, c, r) => (
                TokenSource::ContinuousUsage,
                r.unwrap_or(reasoning_chunks),
                // Without a final usage report, the last cumulative count
                // (it includes tokens that made no chunk, such as the EOS).
                c.unwrap_or((self.last_cumulative as i64).max(reasoning_chunks + answer_chunks)),
            ),
            (false, Some(c), Some(r)) => (TokenSource::Usage, r, c),
            // Only one channel was streamed: the split is known without a count.
            (false, Some(c), None) if reasoning_count == 0 => (TokenSource::Usage, 0, c),
            (false, Some(c), None) if answer_count == 0 => (TokenSource::Usage, c, c),
            // Both were, with a total only: the split follows the chunks' text (below).
            (false, Some(c), None) => (TokenSource::UsageSplitEstimated, 0, c),
            (false, None, _) => (
                TokenSource::Chunks,
                reasoning_chunks,
                reasoning_chunks + answer_chunks,
            ),
        }
    }

    /// Per-chunk counts that add up to `output` (spread over the chunks'
    /// text when the server gave totals only), how they were had, and the
    /// reasoning count (estimated here when only a total was given).
    fn chunk_counts(
        &mut self,
        source: TokenSource,
        output: i64,
        reasoning: i64,
    ) -> (Option<ChunkTokenSource>, i64) {
        let mut reasoning = reasoning.clamp(0, output.max(0));
        let chunk_source = match source {
            _ if self.chunks.is_empty() => None,
            TokenSource::ContinuousUsage => Some(ChunkTokenSource::ContinuousUsage),
            TokenSource::Chunks => Some(ChunkTokenSource::OnePerChunk),
            TokenSource::Usage => {
                self.spread(output, Some(reasoning));
                Some(ChunkTokenSource::TextLength)
            }
            TokenSource::UsageSplitEstimated => {
                reasoning = self.spread(output, None);
                Some(ChunkTokenSource::TextLength)
            }
        };
        (chunk_source, reasoning)
    }

    /// The answer's tool-call tokens: as its chunks' counts split content
    /// from tool-call text. Tokens after the last chunk (a closing
    /// `</tool_call>`, the EOS) go with the last chunk's side: a stream that
    /// ends in a call ends with the call's tokens.
    fn tool_tokens(&self, output: i64, reasoning: i64) -> i64 {
        let mut tool: i64 = self
            .chunks
            .iter()
            .filter(|c| c.channel == Channel::Tool)
            .map(|c| i64::from(c.tokens))
            .sum();
        if self
            .chunks
            .last()
            .is_some_and(|c| c.channel == Channel::Tool)
        {
            let carried: i64 = self.chunks.iter().map(|c| i64::from(c.tokens)).sum();
            tool += (output - carried).max(0);
        }
        tool.clamp(0, (output - reasoning).max(0))
    }
}

/// What one event's records give its chunks: the channels it carried text
/// on and the server's counts.
#[derive(Default)]
struct EventReport<'r> {
    channels: EventChannels,
    usage: Option<&'r Usage>,
    /// llama.cpp's cumulative `timings.predicted_n`.
    predicted: Option<u64>,
}

/// The channels one event carried text on, in order of first appearance,
/// with their text's length in characters (on the stack: this runs per
/// event).
#[derive(Clone, Copy)]
struct EventChannels {
    list: [(Channel, u32); 3],
    len: usize,
}

impl Default for EventChannels {
    fn default() -> Self {
        EventChannels {
            list: [(Channel::Content, 0); 3],
            len: 0,
        }
    }
}

impl EventChannels {
    fn add(&mut self, channel: Channel, chars: u32) {
        match self.list[..self.len]
            .iter_mut()
            .find(|(c, _)| *c == channel)
        {
            Some((_, n)) => *n = n.saturating_add(chars),
            None if self.len < 3 => {
                self.list[self.len] = (channel, chars);
                self.len += 1;
            }
            None => {}
        }
    }

    fn as_slice(&self) -> &[(Channel, u32)] {
        &self.list[..self.len]
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

fn clamp_i32(n: u64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests;
