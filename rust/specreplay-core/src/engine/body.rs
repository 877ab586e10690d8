//! Text put into a request body the Python layer shaped: a prompt
//! synthesized from its blocks (compact traces), and with live history the
//! answer the server generated for the previous turn. The Python layer
//! leaves an empty JSON string (`""`) where the text goes and says where (a
//! byte offset between its quotes); the text is written there, escaped. One
//! exception: a history slot that is the `input` of an Anthropic `tool_use`
//! block takes the server's call as a JSON object, the quotes replaced.
//!
//! Building the prompt here rather than in Python saves copying it through a
//! Python string and `json.dumps` twice; writing it straight into the body
//! rather than into a string of its own saves one more copy and the escape
//! scan (docs/benchmarks.md, "Replaying a trace as a stream").

use bytes::Bytes;

use crate::error::CoreError;
use crate::prompt::{Filler, PromptBlocks};

/// `body` with `text` written, JSON-escaped, at `at` (between the quotes of
/// an empty string). `what` names the insertion in errors.
pub fn insert(body: &[u8], at: usize, text: &str, what: &str) -> Result<Vec<u8>, CoreError> {
    insert_all(body, &mut [(at, text)], what)
}

/// `body` with each `(at, text)` written at its place (as `insert`).
pub fn insert_all(
    body: &[u8],
    texts: &mut [(usize, &str)],
    what: &str,
) -> Result<Vec<u8>, CoreError> {
    texts.sort_by_key(|(at, _)| *at);
    let extra: usize = texts.iter().map(|(_, t)| t.len() + 16).sum();
    let mut out = Vec::with_capacity(body.len() + extra);
    let mut from = 0;
    for &(at, text) in texts.iter() {
        check_slot(body, at, what)?;
        out.extend_from_slice(&body[from..at]);
        escape_into(&mut out, text);
        from = at;
    }
    out.extend_from_slice(&body[from..]);
    Ok(out)
}

/// `body` with the prompt of `blocks` synthesized at `at`, straight into
/// the body: the built-in filler's words need no JSON escaping (a test
/// checks), so the text is neither copied again nor scanned.
pub fn with_prompt(
    body: &[u8],
    at: usize,
    blocks: &PromptBlocks<'_>,
) -> Result<Vec<u8>, CoreError> {
    check_slot(body, at, "prompt_at")?;
    let head = std::str::from_utf8(&body[..at])
        .map_err(|_| CoreError::config("body", "not UTF-8 before prompt_at"))?;
    let mut out = String::with_capacity(body.len() + blocks.tokens as usize * 5);
    out.push_str(head);
    Filler::builtin().write(&mut out, blocks)?;
    let mut out = out.into_bytes();
    out.extend_from_slice(&body[at..]);
    Ok(out)
}

/// The answers generated for a session's earlier turns put into a turn's
/// body: `history_at[j]` is where turn j's answer goes (`answers[j]`).
pub fn with_history(
    body: &Bytes,
    history_at: &[Option<usize>],
    answers: &[Option<String>],
) -> Result<Bytes, CoreError> {
    let mut texts: Vec<(usize, &str)> = history_at
        .iter()
        .zip(answers)
        .filter_map(|(at, answer)| Some((at.as_ref().copied()?, answer.as_deref()?)))
        .collect();
    if !texts.iter().any(|&(at, _)| is_input_value(body, at)) {
        return insert_all(body, &mut texts, "history_at").map(Bytes::from);
    }
    texts.sort_by_key(|(at, _)| *at);
    let mut out =
        Vec::with_capacity(body.len() + texts.iter().map(|(_, t)| t.len() + 16).sum::<usize>());
    let mut from = 0;
    for &(at, text) in &texts {
        check_slot(body, at, "history_at")?;
        if is_input_value(body, at) {
            // An Anthropic `tool_use` block's `input`: the call's JSON object
            // in place of the empty string (`{}` when the answer is not one:
            // a text answer, or arguments cut at the token limit).
            out.extend_from_slice(&body[from..at - 1]);
            match serde_json::from_str::<serde_json::Value>(text) {
                Ok(v @ serde_json::Value::Object(_)) => {
                    serde_json::to_writer(&mut out, &v).expect("writing into memory cannot fail")
                }
                _ => out.extend_from_slice(b"{}"),
            }
            from = at + 1;
        } else {
            out.extend_from_slice(&body[from..at]);
            escape_into(&mut out, text);
            from = at;
        }
    }
    out.extend_from_slice(&body[from..]);
    Ok(Bytes::from(out))
}

/// Whether the empty string at `at` is the value of an `input` key (the
/// `input` of an Anthropic `tool_use` block: the only `input` inside
/// `messages`, where history slots are).
fn is_input_value(body: &[u8], at: usize) -> bool {
    let Some(before) = at.checked_sub(1).and_then(|q| body.get(..q)) else {
        return false;
    };
    let trimmed = before.trim_ascii_end();
    let Some(key) = trimmed.strip_suffix(b":") else {
        return false;
    };
    key.trim_ascii_end().ends_with(b"\"input\"")
}

/// Whether `at` is between the quotes of an empty JSON string in `body`.
pub fn check_slot(body: &[u8], at: usize, what: &str) -> Result<(), CoreError> {
    if at == 0 || at >= body.len() || body[at - 1] != b'"' || body[at] != b'"' {
        return Err(CoreError::config(
            what,
            format!(
                "byte {at} is not between the quotes of an empty JSON string in the {}-byte body",
                body.len()
            ),
        ));
    }
    Ok(())
}

/// Appends `s` as the contents of a JSON string (RFC 8259 escapes).
fn escape_into(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    let needs = |b: u8| b == b'"' || b == b'\\' || b < 0x20;
    if !bytes.iter().any(|&b| needs(b)) {
        out.extend_from_slice(bytes);
        return;
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !needs(b) {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            _ => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last message's content.
    fn content(body: &[u8]) -> String {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap();
        let messages = v["messages"].as_array().unwrap();
        messages.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn text_goes_between_the_quotes_escaped() {
        let body = br#"{"messages":[{"role":"user","content":""}],"stream":true}"#;
        let at = body.windows(2).position(|w| w == b"\"\"").unwrap() + 1;
        for text in [
            "plain words",
            "a \"quoted\" \\ path\nnew line\t\u{1}",
            "ünïcode ✓",
            "",
        ] {
            let out = insert(body, at, text, "x").unwrap();
            assert_eq!(content(&out), text);
        }
    }

    #[test]
    fn each_earlier_answer_goes_to_its_place() {
        let body = br#"{"messages":[{"content":"q0"},{"content":""},{"content":"q1"},{"content":""},{"content":"q2"}]}"#;
        let slots: Vec<usize> = body
            .windows(2)
            .enumerate()
            .filter(|(_, w)| *w == b"\"\"")
            .map(|(i, _)| i + 1)
            .collect();
        let history = [Some(slots[0]), Some(slots[1])];
        let answers = [Some("a0".to_string()), Some("a \"1\"".to_string())];
        let out = with_history(&Bytes::from_static(body), &history, &answers).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["messages"][1]["content"], "a0");
        assert_eq!(v["messages"][3]["content"], "a \"1\"");
        // An answer missing (or a slot not given) leaves that place as it was.
        let out =
            with_history(&Bytes::from_static(body), &[None, Some(slots[1])], &answers).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            (
                v["messages"][1]["content"].as_str(),
                v["messages"][3]["content"].as_str()
            ),
            (Some(""), Some("a \"1\""))
        );
    }

    #[test]
    fn an_anthropic_tool_use_input_takes_the_calls_object() {
        // Turn 0 answered with a tool call, turn 1 with text; the recorded
        // turn 1 (python's shaping, `json.dumps` spacing) has both slots.
        let body = br#"{"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": ""}]}, {"role": "assistant", "content": ""}]}"#;
        let slots: Vec<usize> = body
            .windows(2)
            .enumerate()
            .filter(|(_, w)| *w == b"\"\"")
            .map(|(i, _)| i + 1)
            .collect();
        let history = [Some(slots[0]), Some(slots[1])];
        let answers = [
            Some(r#"{"city": "Paris"}"#.to_string()),
            Some("it is \"sunny\"".to_string()),
        ];
        let out = with_history(&Bytes::from_static(body), &history, &answers).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["messages"][0]["content"][0]["input"],
            serde_json::json!({"city": "Paris"})
        );
        assert_eq!(v["messages"][1]["content"], "it is \"sunny\"");
        // Arguments that are not an object (cut at the token limit): `{}`.
        let cut = [Some(r#"{"city": "Pa"#.to_string()), None];
        let out = with_history(&Bytes::from_static(body), &history, &cut).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["messages"][0]["content"][0]["input"],
            serde_json::json!({})
        );
    }

    #[test]
    fn the_prompt_is_the_fillers_text() {
        let body = br#"{"messages":[{"role":"user","content":""}]}"#;
        let at = body.windows(2).position(|w| w == b"\"\"").unwrap() + 1;
        let blocks = PromptBlocks {
            tokens: 12,
            block_size: 8,
            hash_ids: &[0, 1],
            seed: 0,
        };
        let out = with_prompt(body, at, &blocks).unwrap();
        // The text the trace format fixes (prompt.rs, the_text_is_stable_across_versions).
        assert_eq!(
            content(&out),
            "if door shop four corn like us word day has sky long"
        );
    }

    #[test]
    fn the_prompt_written_straight_is_the_escaped_text_byte_for_byte() {
        // with_prompt skips the escape scan because the built-in words need
        // none (builtin_filler_words_need_no_escaping): the result must be
        // what escaping the text into the body gives, whatever comes before.
        for body in [
            &br#"{"messages":[{"role":"user","content":""}],"stream":true}"#[..],
            r#"{"messages":[{"role":"system","content":"ünï \"q\" ✓"},{"role":"user","content":""}]}"#
                .as_bytes(),
        ] {
            let at = body.windows(2).rposition(|w| w == b"\"\"").unwrap() + 1;
            for (tokens, ids) in [(1, vec![5]), (512, vec![5]), (1300, vec![5, 6, 7])] {
                let blocks = PromptBlocks {
                    tokens,
                    block_size: 512,
                    hash_ids: &ids,
                    seed: 3,
                };
                let text = Filler::builtin().text(&blocks).unwrap();
                let straight = with_prompt(body, at, &blocks).unwrap();
                assert_eq!(straight, insert(body, at, &text, "prompt_at").unwrap());
                assert_eq!(content(&straight), text);
            }
        }
    }

    #[test]
    fn a_slot_that_is_not_an_empty_string_is_refused() {
        let body = br#"{"a":"x","b":""}"#;
        for at in [0, 3, 5, body.len()] {
            let err = insert(body, at, "t", "prompt_at").unwrap_err().to_string();
            assert!(
                err.contains("prompt_at") && err.contains("empty JSON string"),
                "{err}"
            );
        }
    }

    #[test]
    fn builtin_filler_words_need_no_escaping() {
        // The fast path of escape_into is the one every synthesized prompt takes.
        for w in Filler::builtin().words() {
            let mut out = Vec::new();
            escape_into(&mut out, w);
            assert_eq!(out, w.as_bytes());
        }
    }
}
