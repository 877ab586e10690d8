//! Byte surgery on answers for the payload faults: invalid UTF-8 inside a
//! JSON string, JSON cut in half on a character boundary.

/// Appended to a text before rendering; its JSON escape `\u0001` is then
/// replaced by the invalid bytes (model text never holds a control character).
pub const SENTINEL: char = '\u{1}';
const SENTINEL_JSON: &[u8] = b"\\u0001";
/// What `invalid_utf8` puts inside the JSON string.
pub const INVALID_UTF8: &[u8] = b"\xff\xfe";

/// `json` with each escaped `SENTINEL` replaced by `\xff\xfe`.
pub fn poison_utf8(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len());
    let mut rest = json;
    while let Some(i) = memchr::memmem::find(rest, SENTINEL_JSON) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(INVALID_UTF8);
        rest = &rest[i + SENTINEL_JSON.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// About half of `text`'s length, backed off to the start of a UTF-8
/// character, so a cut there breaks the JSON and nothing else.
pub fn half_on_char(text: &[u8]) -> usize {
    let mut cut = text.len() / 2;
    // UTF-8 continuation bytes are 0b10xxxxxx.
    while cut > 0 && (text[cut] & 0xC0) == 0x80 {
        cut -= 1;
    }
    cut
}

/// A `data: {...}\n\n` event cut inside its JSON: `data: ` and the first
/// half of the payload (on a character boundary), then the blank line.
pub fn truncated_event(event: &[u8]) -> Vec<u8> {
    let payload = event
        .strip_prefix(b"data: ")
        .unwrap_or(event)
        .strip_suffix(b"\n\n")
        .unwrap_or(event);
    let cut = half_on_char(payload);
    let mut out = b"data: ".to_vec();
    out.extend_from_slice(&payload[..cut]);
    out.extend_from_slice(b"\n\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_surgery() {
        let json =
            serde_json::to_vec(&serde_json::json!({"content": format!(" hmm{SENTINEL}")})).unwrap();
        assert_eq!(
            poison_utf8(&json),
            b"{\"content\":\" hmm\xff\xfe\"}".to_vec()
        );
        let cut = truncated_event(b"data: {\"a\":\"\xc3\xa9\xc3\xa9\"}\n\n");
        assert!(cut.starts_with(b"data: {") && cut.ends_with(b"\n\n"));
        let payload = &cut[6..cut.len() - 2];
        assert!(std::str::from_utf8(payload).is_ok());
        assert!(serde_json::from_slice::<serde_json::Value>(payload).is_err());
    }
}
