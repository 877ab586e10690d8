//! Turns the decoded records of one response into timestamps and token counts.
//!
//! Token counts come from the server whenever it reports them; chunks are
//! counted only as a last resort, and the request records which it was
//! (`TokenSource`). A chunk may carry several tokens (speculative decoding,
//! stream intervals), so chunk counts are never taken for token counts when
//! usage exists.

use crate::decode::{Channel, Record, Timings, Usage};

use super::record::{Chunk, RequestRecord, TokenSource};

#[derive(Debug, Default)]
pub struct StreamAccount {
    chunks: Vec<Chunk>,
    /// Parallel to `chunks`, filled only by `stamp_new_chunks`.
    server_stamps: Vec<Option<i64>>,
    first_token_us: Option<i64>,
    first_reasoning_us: Option<i64>,
    first_answer_us: Option<i64>,
    usage: Usage,
    saw_usage: bool,
    /// Usage arrived on text-carrying events: per-chunk counts are exact.
    continuous: bool,
    last_cumulative: u64,
    timings: Option<Timings>,
    pub finish_reason: Option<String>,
    pub stream_error: Option<String>,
    pub done: bool,
}

impl StreamAccount {
    /// Accounts for the records decoded from one SSE event, all of which
    /// arrived with the socket read stamped `ts_us`.
    pub fn on_event(&mut self, ts_us: i64, records: &[Record]) {
        let mut channels: [Option<Channel>; 3] = [None; 3];
        let mut n_channels = 0;
        let mut event_usage: Option<&Usage> = None;
        for record in records {
            match record {
                Record::Text { channel, text } if !text.is_empty() => {
                    if !channels[..n_channels].contains(&Some(*channel)) && n_channels < 3 {
                        channels[n_channels] = Some(*channel);
                        n_channels += 1;
                    }
                }
                Record::Text { .. } => {}
                Record::Usage(u) => event_usage = Some(u),
                Record::Timings(t) => self.timings = Some(t.clone()),
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
        // Tokens this event carried, when the server says so.
        let mut exact_tokens: Option<i64> = None;
        if let Some(u) = event_usage {
            self.saw_usage = true;
            if let Some(c) = u.completion_tokens {
                if n_channels > 0 {
                    self.continuous = true;
                    exact_tokens = Some(c.saturating_sub(self.last_cumulative) as i64);
                }
                self.last_cumulative = c;
            }
            // Later reports may omit fields an earlier one gave (Anthropic's
            // message_delta has no input count): merge, don't replace.
            self.usage.merge(u);
        }
        for (i, channel) in channels[..n_channels].iter().flatten().enumerate() {
            // One event rarely holds two channels (the reasoning→content
            // boundary); the first channel takes all but one token per other.
            let tokens = match exact_tokens {
                Some(t) if i == 0 => (t - (n_channels as i64 - 1)).max(0),
                Some(t) => i64::from(t > 0),
                None => 1,
            };
            self.push_chunk(ts_us, tokens as i32, *channel);
        }
    }

    /// Gives every chunk pushed since the last call the server's send stamp
    /// `server_ts_us` (only used with `RunSpec::server_stamps`).
    pub fn stamp_new_chunks(&mut self, server_ts_us: Option<i64>) {
        self.server_stamps.resize(self.chunks.len(), server_ts_us);
    }

    fn push_chunk(&mut self, ts_us: i64, tokens: i32, channel: Channel) {
        self.first_token_us.get_or_insert(ts_us);
        match channel {
            Channel::Reasoning => self.first_reasoning_us.get_or_insert(ts_us),
            Channel::Content | Channel::Tool => self.first_answer_us.get_or_insert(ts_us),
        };
        self.chunks.push(Chunk {
            ts_us,
            tokens,
            channel,
        });
    }

    /// Writes timestamps and token counts into the request's record.
    pub fn finish_into(self, rec: &mut RequestRecord) {
        let chunk_sum = |reasoning: bool| -> i64 {
            self.chunks
                .iter()
                .filter(|c| (c.channel == Channel::Reasoning) == reasoning)
                .map(|c| i64::from(c.tokens))
                .sum()
        };
        let (reasoning_chunks, answer_chunks) = (chunk_sum(true), chunk_sum(false));
        let usage = &self.usage;
        let completion = usage.completion_tokens.map(|c| c as i64);
        let server_reasoning = usage.reasoning_tokens.map(|r| r as i64);
        let (source, reasoning, output) = match (self.continuous, completion, server_reasoning) {
            (true, c, r) => (
                TokenSource::ContinuousUsage,
                r.unwrap_or(reasoning_chunks),
                c.unwrap_or(reasoning_chunks + answer_chunks),
            ),
            (false, Some(c), Some(r)) => (TokenSource::Usage, r, c),
            // Only one channel was streamed: the split is known without a count.
            (false, Some(c), None) if reasoning_chunks == 0 => (TokenSource::Usage, 0, c),
            (false, Some(c), None) if answer_chunks == 0 => (TokenSource::Usage, c, c),
            (false, Some(c), None) => {
                let share = reasoning_chunks as f64 / (reasoning_chunks + answer_chunks) as f64;
                (
                    TokenSource::UsageSplitEstimated,
                    (c as f64 * share).round() as i64,
                    c,
                )
            }
            (false, None, _) => (
                TokenSource::Chunks,
                reasoning_chunks,
                reasoning_chunks + answer_chunks,
            ),
        };
        let reasoning = reasoning.clamp(0, output.max(0));
        rec.reasoning_tokens = Some(reasoning);
        rec.content_tokens = Some(output - reasoning);
        rec.output_tokens = Some(output);
        rec.token_source = Some(source);
        if self.saw_usage {
            rec.prompt_tokens = usage.prompt_tokens.map(|p| p as i64);
            rec.cached_tokens = usage.cached_tokens.map(|p| p as i64);
        }
        if let Some(t) = &self.timings {
            rec.server_predicted_n = t.predicted_n.map(|n| n as i64);
            rec.server_predicted_ms = t.predicted_ms;
        }
        rec.first_token_us = self.first_token_us;
        rec.first_reasoning_us = self.first_reasoning_us;
        rec.first_content_us = self.first_answer_us;
        rec.last_token_us = self.chunks.last().map(|c| c.ts_us);
        rec.finish_reason = self.finish_reason;
        rec.chunks = self.chunks;
        rec.server_stamps = self.server_stamps;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(channel: Channel, s: &str) -> Record {
        Record::Text {
            channel,
            text: s.to_string(),
        }
    }

    fn usage(completion: u64, reasoning: Option<u64>) -> Record {
        Record::Usage(Usage {
            prompt_tokens: Some(7),
            completion_tokens: Some(completion),
            reasoning_tokens: reasoning,
            cached_tokens: None,
        })
    }

    fn finish(acc: StreamAccount) -> RequestRecord {
        let mut rec = RequestRecord::default();
        acc.finish_into(&mut rec);
        rec
    }

    #[test]
    fn final_usage_gives_totals_and_split() {
        let mut acc = StreamAccount::default();
        acc.on_event(10, &[text(Channel::Reasoning, " a b")]);
        acc.on_event(20, &[text(Channel::Reasoning, " c")]);
        acc.on_event(30, &[text(Channel::Content, " d")]);
        acc.on_event(
            40,
            &[Record::Finish {
                reason: "stop".into(),
            }],
        );
        acc.on_event(41, &[usage(9, Some(6))]);
        acc.on_event(42, &[Record::Done]);
        assert!(acc.done);
        let rec = finish(acc);
        assert_eq!(rec.token_source, Some(TokenSource::Usage));
        assert_eq!(
            (rec.reasoning_tokens, rec.content_tokens, rec.output_tokens),
            (Some(6), Some(3), Some(9))
        );
        assert_eq!(rec.prompt_tokens, Some(7));
        assert_eq!(
            (
                rec.first_token_us,
                rec.first_reasoning_us,
                rec.first_content_us
            ),
            (Some(10), Some(10), Some(30))
        );
        assert_eq!(rec.last_token_us, Some(30));
        assert_eq!(rec.chunks.len(), 3);
        assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn continuous_usage_gives_exact_tokens_per_chunk() {
        let mut acc = StreamAccount::default();
        acc.on_event(1, &[usage(0, None)]); // role-only first chunk
        acc.on_event(10, &[text(Channel::Reasoning, "x"), usage(3, None)]);
        acc.on_event(20, &[text(Channel::Reasoning, "y"), usage(4, None)]);
        acc.on_event(
            30,
            &[
                text(Channel::Reasoning, "z"),
                text(Channel::Content, "w"),
                usage(8, None),
            ],
        );
        let rec = finish(acc);
        assert_eq!(rec.token_source, Some(TokenSource::ContinuousUsage));
        let tokens: Vec<i32> = rec.chunks.iter().map(|c| c.tokens).collect();
        assert_eq!(tokens, vec![3, 1, 3, 1]);
        assert_eq!(rec.output_tokens, Some(8));
        assert_eq!(rec.reasoning_tokens, Some(7));
        assert_eq!(rec.content_tokens, Some(1));
    }

    #[test]
    fn total_without_split_is_marked_estimated() {
        let mut acc = StreamAccount::default();
        for ts in 0..3 {
            acc.on_event(ts, &[text(Channel::Reasoning, "r")]);
        }
        acc.on_event(5, &[text(Channel::Content, "c")]);
        acc.on_event(6, &[usage(8, None)]);
        let rec = finish(acc);
        assert_eq!(rec.token_source, Some(TokenSource::UsageSplitEstimated));
        assert_eq!(
            (rec.reasoning_tokens, rec.content_tokens),
            (Some(6), Some(2))
        );
    }

    #[test]
    fn reasoning_only_stream_with_total_is_exact() {
        // The seed's trap: the budget went to reasoning, no answer came.
        let mut acc = StreamAccount::default();
        acc.on_event(1, &[text(Channel::Reasoning, "r")]);
        acc.on_event(
            2,
            &[
                Record::Finish {
                    reason: "length".into(),
                },
                usage(16, None),
            ],
        );
        let rec = finish(acc);
        assert_eq!(rec.token_source, Some(TokenSource::Usage));
        assert_eq!(
            (rec.reasoning_tokens, rec.content_tokens, rec.output_tokens),
            (Some(16), Some(0), Some(16))
        );
        assert_eq!(rec.first_content_us, None);
    }

    #[test]
    fn no_usage_counts_chunks() {
        let mut acc = StreamAccount::default();
        acc.on_event(1, &[text(Channel::Content, "a")]);
        acc.on_event(2, &[text(Channel::Tool, "{}")]);
        acc.on_event(3, &[text(Channel::Content, "")]); // empty text is no chunk
        let rec = finish(acc);
        assert_eq!(rec.token_source, Some(TokenSource::Chunks));
        assert_eq!(
            (rec.reasoning_tokens, rec.content_tokens),
            (Some(0), Some(2))
        );
        assert_eq!(rec.chunks.len(), 2);
        assert_eq!(rec.prompt_tokens, None);
    }

    #[test]
    fn server_stamps_follow_the_chunks_of_their_event() {
        let mut acc = StreamAccount::default();
        acc.on_event(1, &[usage(0, None)]); // role chunk: no text, no stamp
        acc.stamp_new_chunks(Some(100));
        acc.on_event(
            10,
            &[text(Channel::Reasoning, "r"), text(Channel::Content, "c")],
        );
        acc.stamp_new_chunks(Some(200));
        acc.on_event(20, &[text(Channel::Content, "d")]);
        acc.stamp_new_chunks(None);
        let rec = finish(acc);
        assert_eq!(rec.chunks.len(), 3);
        assert_eq!(rec.server_stamps, vec![Some(200), Some(200), None]);
    }

    #[test]
    fn stream_error_keeps_message_and_code() {
        let mut acc = StreamAccount::default();
        acc.on_event(
            1,
            &[Record::Error {
                message: "overloaded".into(),
                code: Some("503".into()),
            }],
        );
        assert_eq!(acc.stream_error.as_deref(), Some("overloaded [503]"));
    }
}
