//! Legacy OpenAI Completions chunks: the chat envelope with the text in
//! `choices[].text` (reasoning models' thinking stays inside that text).

use super::chat::{decode_envelope, Choice};
use super::json;
use super::{Channel, DecodeError, Record, StreamDecoder};
use crate::sse::SseEvent;

pub(super) struct CompletionsDecoder;

impl StreamDecoder for CompletionsDecoder {
    fn decode(&mut self, event: &SseEvent, out: &mut Vec<Record>) -> Result<(), DecodeError> {
        if json::is_done(&event.data) {
            out.push(Record::Done);
            return Ok(());
        }
        decode_envelope(&event.data, out, completion_text)
    }
}

pub(super) fn decode_body(body: &str, out: &mut Vec<Record>) -> Result<(), DecodeError> {
    decode_envelope(body, out, completion_text)
}

fn completion_text(choice: Choice, out: &mut Vec<Record>) {
    json::push_text(out, Channel::Content, choice.text);
}

#[cfg(test)]
mod tests;
