//! Reading requests of every dialect.
use super::*;

fn chat(body: &str) -> Result<SimRequest, String> {
    SimRequest::parse(Endpoint::Chat, body.as_bytes(), &MediaRule::default())
}

#[test]
fn prompt_tokens_rule() {
    let r = chat(r#"{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"why is  the sky blue"}]}"#)
        .unwrap();
    assert_eq!(r.prompt_tokens, 2 + 5 + 2 * TOKENS_PER_MESSAGE);
    let parts = chat(r#"{"messages":[{"role":"user","content":[{"type":"text","text":"a b c"},{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}"#)
        .unwrap();
    assert_eq!(
        parts.media_tokens,
        MediaRule::default().image_tokens(1024, 1024)
    );
    assert_eq!(
        parts.prompt_tokens,
        3 + TOKENS_PER_MESSAGE + parts.media_tokens
    );
    let ids = SimRequest::parse(
        Endpoint::Completions,
        br#"{"prompt":[5,6,7,8]}"#,
        &MediaRule::default(),
    )
    .unwrap();
    assert_eq!(ids.prompt_tokens, 4);
    let text = SimRequest::parse(
        Endpoint::Completions,
        br#"{"prompt":["one two"]}"#,
        &MediaRule::default(),
    )
    .unwrap();
    assert_eq!(text.prompt_tokens, 2);
}

#[test]
fn budget_fields() {
    let m = r#""messages":[{"role":"user","content":"hi"}]"#;
    assert_eq!(
        chat(&format!("{{{m},\"max_tokens\":7}}"))
            .unwrap()
            .max_tokens,
        Some(7)
    );
    assert_eq!(
        chat(&format!(
            "{{{m},\"max_completion_tokens\":9,\"max_tokens\":7}}"
        ))
        .unwrap()
        .max_tokens,
        Some(9)
    );
    assert_eq!(chat(&format!("{{{m}}}")).unwrap().max_tokens, None);
    assert!(chat(&format!("{{{m},\"max_tokens\":0}}")).is_err());
    assert!(chat(&format!("{{{m},\"max_tokens\":\"many\"}}")).is_err());
}

#[test]
fn usage_options_need_streaming_and_include_usage() {
    let m = r#""messages":[{"role":"user","content":"hi"}]"#;
    let r = chat(&format!(
        "{{{m},\"stream\":true,\"stream_options\":{{\"include_usage\":true,\"continuous_usage_stats\":true}}}}"
    ))
    .unwrap();
    assert!(r.include_usage && r.continuous_usage);
    let r = chat(&format!(
        "{{{m},\"stream\":true,\"stream_options\":{{\"continuous_usage_stats\":true}}}}"
    ))
    .unwrap();
    assert!(!r.include_usage && !r.continuous_usage);
}

#[test]
fn hash_ignores_options_but_not_prompt_or_seed() {
    let a = chat(r#"{"messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":5}"#)
        .unwrap();
    let b = chat(r#"{"max_tokens":900,"messages":[{"role":"user","content":"hi"}]}"#).unwrap();
    let c = chat(r#"{"messages":[{"role":"user","content":"hi!"}]}"#).unwrap();
    let d = chat(r#"{"messages":[{"role":"user","content":"hi"}],"seed":3}"#).unwrap();
    assert_eq!(a.prompt_hash, b.prompt_hash);
    assert_ne!(a.prompt_hash, c.prompt_hash);
    assert_ne!(a.prompt_hash, d.prompt_hash);
}

#[test]
fn malformed_bodies_are_rejected() {
    assert!(chat("{not json").unwrap_err().contains("invalid JSON"));
    assert!(chat("[1]").is_err());
    assert!(chat(r#"{"messages":[]}"#).is_err());
    assert!(chat(r#"{"messages":"hi"}"#).is_err());
    assert!(chat(r#"{"messages":[{"role":"user","content":"hi"}],"n":2}"#).is_err());
    assert!(SimRequest::parse(
        Endpoint::Completions,
        br#"{"prompt":["a","b"]}"#,
        &MediaRule::default()
    )
    .is_err());
}

fn parse(endpoint: Endpoint, body: serde_json::Value) -> Result<SimRequest, String> {
    SimRequest::parse(endpoint, body.to_string().as_bytes(), &MediaRule::default())
}

#[test]
fn the_same_conversation_costs_the_same_in_every_dialect() {
    use serde_json::json;
    let chat = parse(
        Endpoint::Chat,
        json!({"messages":[{"role":"user","content":"a b c"}]}),
    )
    .unwrap();
    let responses = parse(
        Endpoint::Responses,
        json!({"input":[{"role":"user","content":[{"type":"input_text","text":"a b c"}]}],"max_output_tokens":9}),
    )
    .unwrap();
    let anthropic = parse(
        Endpoint::Messages,
        json!({"messages":[{"role":"user","content":[{"type":"text","text":"a b c"}]}],"max_tokens":7}),
    )
    .unwrap();
    assert_eq!(chat.prompt_tokens, 3 + TOKENS_PER_MESSAGE);
    assert_eq!(responses.prompt_tokens, chat.prompt_tokens);
    assert_eq!(anthropic.prompt_tokens, chat.prompt_tokens);
    assert_eq!(responses.max_tokens, Some(9));
    assert_eq!(anthropic.max_tokens, Some(7));
    let plain = parse(
        Endpoint::Responses,
        json!({"input":"a b c","instructions":"be brief"}),
    )
    .unwrap();
    assert_eq!(plain.prompt_tokens, 5 + 2 * TOKENS_PER_MESSAGE);
}

#[test]
fn tools_and_formats_of_each_dialect() {
    use serde_json::json;
    let schema = json!({"type":"object","properties":{"city":{"type":"string"}}});
    let chat = parse(
        Endpoint::Chat,
        json!({"messages":[{"role":"user","content":"hi"}],
               "tools":[{"type":"function","function":{"name":"weather","parameters":schema}}],
               "tool_choice":"required"}),
    )
    .unwrap();
    assert_eq!(chat.tools[0].name, "weather");
    assert_eq!(chat.tools[0].parameters, schema);
    assert_eq!(chat.tool_choice, ToolChoice::Required);
    assert_eq!(chat.calls_tool(0.0, 0.5).unwrap().name, "weather");
    let none = parse(
        Endpoint::Chat,
        json!({"messages":[{"role":"user","content":"hi"}],
               "tools":[{"type":"function","function":{"name":"weather"}}],"tool_choice":"none"}),
    )
    .unwrap();
    assert!(none.calls_tool(1.0, 0.0).is_none());
    let responses = parse(
        Endpoint::Responses,
        json!({"input":"hi","tools":[{"type":"function","name":"weather","parameters":schema}],
               "text":{"format":{"type":"json_schema","name":"w","schema":schema}}}),
    )
    .unwrap();
    assert_eq!(responses.tools[0].name, "weather");
    assert_eq!(responses.json_schema, Some(schema.clone()));
    assert!(responses.calls_tool(0.5, 0.7).is_none());
    assert!(responses.calls_tool(0.5, 0.2).is_some());
    let anthropic = parse(
        Endpoint::Messages,
        json!({"messages":[{"role":"user","content":"hi"}],"max_tokens":5,
               "tools":[{"name":"weather","input_schema":schema}],"tool_choice":{"type":"tool","name":"weather"}}),
    )
    .unwrap();
    assert_eq!(anthropic.tool_choice, ToolChoice::Named("weather".into()));
    let format = parse(
        Endpoint::Chat,
        json!({"messages":[{"role":"user","content":"hi"}],
               "response_format":{"type":"json_schema","json_schema":{"name":"w","schema":schema}}}),
    )
    .unwrap();
    assert_eq!(format.json_schema, Some(schema));
}

#[test]
fn media_parts_are_charged_in_every_dialect() {
    use base64::Engine;
    use serde_json::json;
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    png.extend(64u32.to_be_bytes());
    png.extend(64u32.to_be_bytes());
    let data = base64::engine::general_purpose::STANDARD.encode(&png);
    let uri = format!("data:image/png;base64,{data}");
    let chat = parse(
        Endpoint::Chat,
        json!({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":uri}}]}]}),
    )
    .unwrap();
    assert_eq!(chat.media_tokens, 7);
    assert_eq!(chat.prompt_tokens, 1 + TOKENS_PER_MESSAGE + 7);
    let responses = parse(
        Endpoint::Responses,
        json!({"input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":uri}]}]}),
    )
    .unwrap();
    assert_eq!(responses.prompt_tokens, chat.prompt_tokens);
    let anthropic = parse(
        Endpoint::Messages,
        json!({"messages":[{"role":"user","content":[{"type":"text","text":"a"},
               {"type":"image","source":{"type":"base64","media_type":"image/png","data":data}}]}]}),
    )
    .unwrap();
    assert_eq!(anthropic.prompt_tokens, chat.prompt_tokens);
    let err = parse(
        Endpoint::Chat,
        json!({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}),
    )
    .unwrap_err();
    assert!(
        err.starts_with("messages[0]: content[0]: cannot read the size"),
        "{err}"
    );
}

#[test]
fn a_media_blob_is_hashed_by_name_and_text_as_before() {
    use serde_json::json;
    let blob = |fill: u8| {
        let mut s = vec![b'A'; 40_000];
        s[20_000] = fill;
        String::from_utf8(s).unwrap()
    };
    let uri = |b: &str| json!([{"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{b}")}}]);
    let short = json!([{"role": "user", "content": "a b"}]);
    assert_eq!(value_text(&short), short.to_string());
    let long_text = json!([{"role": "user", "content": "word ".repeat(10_000)}]);
    assert_eq!(value_text(&long_text), long_text.to_string());
    // The same blob gives the same text; a blob of another length another.
    let a = value_text(&uri(&blob(b'A')));
    assert!(a.len() < 200, "{a}");
    assert_eq!(a, value_text(&uri(&blob(b'A'))));
    assert_ne!(a, value_text(&uri(&blob(b'A')[..39_996])));
}
