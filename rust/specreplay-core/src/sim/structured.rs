//! Answers that are JSON rather than prose: a tool call's arguments, or a
//! `json_schema` response format's content. The JSON is generated from the
//! schema (object `properties`/`required`, `type`, `enum`, `const`, array
//! `items`/`minItems`, `anyOf`/`oneOf`) and streamed a token at a time,
//! `CHARS_PER_TOKEN` characters a token, so a budget cut leaves it truncated.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

use super::words::CONTENT_WORDS;

/// Characters of JSON per token (a typical BPE tokenizer on JSON).
pub const CHARS_PER_TOKEN: usize = 4;

/// Deeper schemas are answered with `null` there (a recursive `$ref` cannot loop).
const MAX_DEPTH: u32 = 8;

/// A tool call the answer makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
}

/// A JSON answer cut into tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Structured {
    pub text: String,
    /// `Some` when the JSON is a tool call's arguments.
    pub tool: Option<ToolCall>,
    /// Byte offset of each token's start, then the end.
    cuts: Vec<usize>,
}

impl Structured {
    /// JSON for `schema`, drawn with `seed`.
    pub fn new(schema: &Value, seed: u64, tool: Option<ToolCall>) -> Structured {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut text = String::new();
        generate(schema, &mut rng, 0, &mut text);
        let mut cuts: Vec<usize> = text
            .char_indices()
            .step_by(CHARS_PER_TOKEN)
            .map(|(i, _)| i)
            .collect();
        cuts.push(text.len());
        Structured { text, tool, cuts }
    }

    pub fn tokens(&self) -> u32 {
        (self.cuts.len() - 1) as u32
    }

    /// The text of token `i` ("" past the end).
    pub fn token(&self, i: u32) -> &str {
        let i = i as usize;
        match (self.cuts.get(i), self.cuts.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.text[a..b],
            _ => "",
        }
    }
}

fn word(rng: &mut ChaCha8Rng) -> &'static str {
    CONTENT_WORDS[rng.random_range(0..CONTENT_WORDS.len())]
}

fn generate(schema: &Value, rng: &mut ChaCha8Rng, depth: u32, out: &mut String) {
    if depth > MAX_DEPTH {
        out.push_str("null");
        return;
    }
    if let Some(value) = schema.get("const") {
        out.push_str(&value.to_string());
        return;
    }
    if let Some(choices) = schema.get("enum").and_then(Value::as_array) {
        if !choices.is_empty() {
            out.push_str(&choices[rng.random_range(0..choices.len())].to_string());
            return;
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(first) = schema
            .get(key)
            .and_then(Value::as_array)
            .and_then(|a| a.first())
        {
            return generate(first, rng, depth + 1, out);
        }
    }
    let kind = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(types)) => types.first().and_then(Value::as_str).unwrap_or("string"),
        _ if schema.get("properties").is_some() => "object",
        _ if schema.get("items").is_some() => "array",
        _ => "string",
    };
    match kind {
        "object" => {
            out.push('{');
            let properties = schema.get("properties").and_then(Value::as_object);
            for (i, (name, sub)) in properties.into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(name.as_str()).to_string());
                out.push(':');
                generate(sub, rng, depth + 1, out);
            }
            out.push('}');
        }
        "array" => {
            let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(1);
            let max = schema
                .get("maxItems")
                .and_then(Value::as_u64)
                .unwrap_or(min.max(3));
            let n = rng.random_range(min..=max.max(min));
            out.push('[');
            let items = schema.get("items").unwrap_or(&Value::Null);
            for i in 0..n {
                if i > 0 {
                    out.push(',');
                }
                generate(items, rng, depth + 1, out);
            }
            out.push(']');
        }
        "integer" => out.push_str(&rng.random_range(0..1000).to_string()),
        "number" => out.push_str(&format!("{}.5", rng.random_range(0..1000))),
        "boolean" => out.push_str(if rng.random_bool(0.5) {
            "true"
        } else {
            "false"
        }),
        "null" => out.push_str("null"),
        _ => {
            let words: Vec<&str> = (0..rng.random_range(1..=3)).map(|_| word(rng)).collect();
            out.push_str(&Value::from(words.join(" ")).to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_follows_the_schema() {
        let schema = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2},
                "deep": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
            },
            "required": ["city"],
        });
        let answer = Structured::new(&schema, 7, None);
        let v: Value = serde_json::from_str(&answer.text).unwrap();
        assert!(v["city"].is_string());
        assert!(["celsius", "fahrenheit"].contains(&v["unit"].as_str().unwrap()));
        assert!(v["days"].is_u64());
        assert_eq!(v["tags"].as_array().unwrap().len(), 2);
        assert!(v["deep"]["ok"].is_boolean());
        assert_eq!(Structured::new(&schema, 7, None), answer);
    }

    #[test]
    fn tokens_spell_the_text_and_a_cut_is_invalid_json() {
        let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let answer = Structured::new(&schema, 1, None);
        let all: String = (0..answer.tokens()).map(|i| answer.token(i)).collect();
        assert_eq!(all, answer.text);
        assert_eq!(
            answer.tokens() as usize,
            answer.text.len().div_ceil(CHARS_PER_TOKEN)
        );
        let cut: String = (0..answer.tokens() - 1).map(|i| answer.token(i)).collect();
        assert!(serde_json::from_str::<Value>(&cut).is_err());
        assert_eq!(answer.token(answer.tokens()), "");
    }
}
