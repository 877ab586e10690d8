//! Incremental Server-Sent Events parser (WHATWG "event stream" rules).
//!
//! It is fed the raw bytes of each socket read, so nothing may depend on where
//! a read happens to end: a CRLF, a UTF-8 character or the BOM can each be
//! split across two reads. Complete lines inside one read are parsed straight
//! from the caller's slice; only the unfinished tail of a read is copied.

use memchr::memchr2;
use thiserror::Error;

const BOM: &[u8; 3] = b"\xEF\xBB\xBF";
const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched event.
///
/// `id` is the stream's last event ID when the event was dispatched (it
/// persists across events, as the spec's reconnection logic needs). `retry`
/// is the reconnection delay most recently set by the stream and not yet
/// reported: it rides on the next dispatched event, so a `retry:` in a block
/// without data is not lost.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
    pub id: Option<String>,
    pub retry: Option<u64>,
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SseError {
    #[error("invalid UTF-8 in SSE line {line}")]
    InvalidUtf8 {
        /// 1-based line number in the stream.
        line: u64,
    },
    #[error("SSE event larger than {limit} bytes")]
    EventTooLarge { limit: usize },
}

pub struct SseParser {
    limit: usize,
    /// Bytes of a line whose terminator has not arrived yet.
    partial: Vec<u8>,
    /// The previous read ended in CR: an LF opening the next read belongs to it.
    pending_cr: bool,
    /// How many BOM bytes have matched at stream start; `None` once decided.
    bom_matched: Option<usize>,
    lines: u64,
    data: String,
    has_data: bool,
    event_type: String,
    last_id: Option<String>,
    retry: Option<u64>,
    /// Errors are sticky: after a malformed line the stream's framing can no
    /// longer be trusted, so every later call reports the same failure.
    failed: Option<SseError>,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    pub fn new() -> Self {
        Self::with_max_event_bytes(DEFAULT_MAX_EVENT_BYTES)
    }

    /// `limit` bounds the memory one stream can pin: the event being
    /// assembled plus the unfinished line.
    pub fn with_max_event_bytes(limit: usize) -> Self {
        SseParser {
            limit,
            partial: Vec::new(),
            pending_cr: false,
            bom_matched: Some(0),
            lines: 0,
            data: String::new(),
            has_data: false,
            event_type: String::new(),
            last_id: None,
            retry: None,
            failed: None,
        }
    }

    /// Feed the bytes of one socket read; every event completed by them is pushed to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.feed_inner(bytes, out);
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    /// End of stream. Returns the last event if it was not terminated by a blank line
    /// (the spec drops it; a benchmark records it, so the caller can flag a truncated stream).
    /// The parser is reset afterwards and can read a new stream.
    pub fn finish(&mut self) -> Result<Option<SseEvent>, SseError> {
        if let Some(e) = self.failed.take() {
            self.reset();
            return Err(e);
        }
        // A stream shorter than the BOM that matched it so far was text after all.
        if let Some(n) = self.bom_matched.take() {
            self.partial.extend_from_slice(&BOM[..n]);
        }
        let mut result = Ok(None);
        if !self.partial.is_empty() {
            let mut line = std::mem::take(&mut self.partial);
            result = self.process_line(&line, &mut Vec::new()).map(|()| None);
            line.clear();
            self.partial = line;
        }
        if result.is_ok() {
            result = Ok(self.take_event());
        }
        self.reset();
        result
    }

    fn reset(&mut self) {
        let limit = self.limit;
        let mut partial = std::mem::take(&mut self.partial);
        partial.clear();
        *self = Self::with_max_event_bytes(limit);
        self.partial = partial;
    }

    fn feed_inner(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if self.bom_matched.is_some() {
            bytes = self.strip_bom(bytes);
            if self.bom_matched.is_some() {
                return Ok(()); // still inside a possible BOM: wait for more
            }
        }
        if self.pending_cr && !bytes.is_empty() {
            self.pending_cr = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        while let Some(pos) = memchr2(b'\r', b'\n', bytes) {
            let (line, rest) = bytes.split_at(pos);
            let mut skip = 1;
            if rest[0] == b'\r' {
                match rest.get(1) {
                    Some(b'\n') => skip = 2,
                    None => self.pending_cr = true,
                    Some(_) => {}
                }
            }
            if self.partial.is_empty() {
                self.process_line(line, out)?;
            } else {
                let mut buf = std::mem::take(&mut self.partial);
                buf.extend_from_slice(line);
                let r = self.process_line(&buf, out);
                buf.clear();
                self.partial = buf;
                r?;
            }
            bytes = &rest[skip..];
        }
        self.partial.extend_from_slice(bytes);
        self.check_size()
    }

    /// Consumes the BOM bytes matched at the start of `bytes`. Leaves
    /// `bom_matched` set only when `bytes` ended in the middle of a match.
    fn strip_bom<'b>(&mut self, bytes: &'b [u8]) -> &'b [u8] {
        let Some(mut n) = self.bom_matched else {
            return bytes;
        };
        let mut i = 0;
        while n < BOM.len() && i < bytes.len() && bytes[i] == BOM[n] {
            n += 1;
            i += 1;
        }
        if n == BOM.len() {
            self.bom_matched = None;
            &bytes[i..]
        } else if i == bytes.len() {
            self.bom_matched = Some(n);
            &bytes[i..]
        } else {
            // The match failed: the bytes matched in earlier reads were text,
            // and so is all of this read (including what just matched).
            self.bom_matched = None;
            self.partial.extend_from_slice(&BOM[..n - i]);
            bytes
        }
    }

    fn check_size(&self) -> Result<(), SseError> {
        let held = self.partial.len() + self.data.len() + self.event_type.len();
        if held > self.limit {
            return Err(SseError::EventTooLarge { limit: self.limit });
        }
        Ok(())
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        self.lines += 1;
        if line.is_empty() {
            if let Some(ev) = self.take_event() {
                out.push(ev);
            }
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let line =
            std::str::from_utf8(line).map_err(|_| SseError::InvalidUtf8 { line: self.lines })?;
        let (field, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => {
                self.event_type.clear();
                self.event_type.push_str(value);
            }
            "id" if !value.contains('\0') => {
                self.last_id = (!value.is_empty()).then(|| value.to_owned());
            }
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                // Too many digits for a u64 is not a delay anyone meant.
                if let Ok(ms) = value.parse() {
                    self.retry = Some(ms);
                }
            }
            _ => {}
        }
        self.check_size()
    }

    /// Ends the event being assembled; `None` when it had no data, which
    /// (like a keep-alive block of comments) carries nothing to decode.
    fn take_event(&mut self) -> Option<SseEvent> {
        self.has_data = false;
        let event_type = std::mem::take(&mut self.event_type);
        if self.data.is_empty() {
            return None;
        }
        Some(SseEvent {
            event: (!event_type.is_empty()).then_some(event_type),
            data: std::mem::take(&mut self.data),
            id: self.last_id.clone(),
            retry: self.retry.take(),
        })
    }
}

#[cfg(test)]
mod tests;
