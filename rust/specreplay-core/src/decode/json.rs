//! JSON plumbing shared by every dialect: one place decides how parse
//! failures become [`DecodeError`]s and how loosely servers' fields are read.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::error::Category;

use super::{Channel, DecodeError, Record};

const SNIPPET_CHARS: usize = 120;

pub(super) fn snippet(payload: &str) -> String {
    payload.chars().take(SNIPPET_CHARS).collect()
}

/// Parses one payload. Malformed JSON and JSON of the wrong shape are told
/// apart because they point at different culprits (a cut or garbled stream
/// versus a server speaking another dialect).
pub(super) fn parse<'a, T: Deserialize<'a>>(payload: &'a str) -> Result<T, DecodeError> {
    serde_json::from_str(payload).map_err(|e| match e.classify() {
        Category::Data => DecodeError::UnexpectedShape {
            message: format!("{e} in {:?}", snippet(payload)),
        },
        _ => DecodeError::InvalidJson {
            message: e.to_string(),
            snippet: snippet(payload),
        },
    })
}

pub(super) fn body_str(body: &[u8]) -> Result<&str, DecodeError> {
    std::str::from_utf8(body).map_err(|e| DecodeError::InvalidJson {
        message: format!("body is not UTF-8: {e}"),
        snippet: snippet(&String::from_utf8_lossy(
            &body[..body.len().min(4 * SNIPPET_CHARS)],
        )),
    })
}

pub(super) fn is_done(payload: &str) -> bool {
    payload.trim() == "[DONE]"
}

/// Pushes a text record unless the server sent nothing: `""` and `null` both
/// mean "no text here", and an empty record would count as a token arrival.
pub(super) fn push_text(out: &mut Vec<Record>, channel: Channel, text: Option<String>) {
    if let Some(text) = text.filter(|t| !t.is_empty()) {
        out.push(Record::Text { channel, text });
    }
}

/// Pushes the start of a tool call when the payload names one (a first
/// delta carries its id and name; later ones only more arguments).
pub(super) fn push_tool_call(out: &mut Vec<Record>, id: Option<String>, name: Option<String>) {
    let id = id.filter(|s| !s.is_empty());
    let name = name.filter(|s| !s.is_empty());
    if id.is_some() || name.is_some() {
        out.push(Record::ToolCall { id, name });
    }
}

/// A token count that tolerates what servers actually send: `null`, floats
/// like `12.0`, and placeholder negatives (all but a plain count read as absent).
pub(super) fn count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a token count")
        }
        fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
            Ok(u64::try_from(v).ok())
        }
        fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
            Ok((v.is_finite() && v >= 0.0 && v.fract() == 0.0).then_some(v as u64))
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// A string field whose type varies between servers or event kinds: numbers
/// and booleans become their text, objects and arrays read as absent.
pub(super) fn scalar<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    d.deserialize_any(ScalarVisitor)
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Option<String>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Some(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

/// An error payload: OpenAI-style `{"message", "type", "code"}` (code may be
/// a number, as in SGLang), Anthropic's `{"type", "message"}`, or a bare string.
#[derive(Debug, Default)]
pub(super) struct ApiError {
    message: Option<String>,
    kind: Option<String>,
    code: Option<String>,
}

impl ApiError {
    pub(super) fn new(message: Option<String>, kind: Option<String>, code: Option<String>) -> Self {
        ApiError {
            message,
            kind,
            code,
        }
    }

    /// The code is the most specific identifier available: `code`, else `type`.
    pub(super) fn into_record(self) -> Record {
        let ApiError {
            message,
            kind,
            code,
        } = self;
        let code = code.filter(|c| !c.is_empty()).or(kind);
        let message = message
            .filter(|m| !m.is_empty())
            .or_else(|| code.clone())
            .unwrap_or_else(|| "unknown error".into());
        Record::Error { message, code }
    }
}

impl<'de> Deserialize<'de> for ApiError {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        struct Fields {
            #[serde(default, deserialize_with = "scalar")]
            message: Option<String>,
            #[serde(default, rename = "type", deserialize_with = "scalar")]
            kind: Option<String>,
            #[serde(default, deserialize_with = "scalar")]
            code: Option<String>,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ApiError;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an error object or message")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ApiError, A::Error> {
                let f = Fields::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(ApiError {
                    message: f.message,
                    kind: f.kind,
                    code: f.code,
                })
            }
            fn visit_str<E>(self, v: &str) -> Result<ApiError, E> {
                Ok(ApiError {
                    message: Some(v.to_owned()),
                    ..ApiError::default()
                })
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct C {
        #[serde(default, deserialize_with = "count")]
        n: Option<u64>,
    }

    #[test]
    fn counts_are_lenient() {
        let n = |s: &str| parse::<C>(s).unwrap().n;
        assert_eq!(n(r#"{"n": 5}"#), Some(5));
        assert_eq!(n(r#"{"n": 5.0}"#), Some(5));
        assert_eq!(n(r#"{"n": -1}"#), None);
        assert_eq!(n(r#"{"n": null}"#), None);
        assert_eq!(n(r#"{}"#), None);
        assert!(matches!(
            parse::<C>(r#"{"n": "5"}"#),
            Err(DecodeError::UnexpectedShape { .. })
        ));
    }

    #[test]
    fn bad_json_gives_snippet() {
        let long = format!("{{\"a\": {}", "x".repeat(300));
        match parse::<C>(&long) {
            Err(DecodeError::InvalidJson { snippet, .. }) => {
                assert_eq!(snippet.chars().count(), 120)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn snippet_respects_char_boundaries() {
        let s = "é".repeat(200);
        assert_eq!(snippet(&s), "é".repeat(120));
    }

    #[test]
    fn error_payload_forms() {
        let rec = |s: &str| parse::<ApiError>(s).unwrap().into_record();
        assert_eq!(
            rec(r#"{"message":"boom","type":"server_error","code":null}"#),
            Record::Error {
                message: "boom".into(),
                code: Some("server_error".into())
            }
        );
        assert_eq!(
            rec(r#"{"message":"x","type":"BadRequestError","code":400}"#),
            Record::Error {
                message: "x".into(),
                code: Some("400".into())
            }
        );
        assert_eq!(
            rec(r#""plain""#),
            Record::Error {
                message: "plain".into(),
                code: None
            }
        );
        assert_eq!(
            rec(r#"{}"#),
            Record::Error {
                message: "unknown error".into(),
                code: None
            }
        );
    }
}
