//! Request bodies of each provider, as their SDKs send them.

use tokentap_analysis::{analyze_request, count_tokens};

#[test]
fn openai_chat_with_tools_and_tool_results() {
    let body = br#"{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},
      "max_completion_tokens":256,
      "messages":[{"role":"system","content":"Be brief."},
                  {"role":"user","content":[{"type":"text","text":"Weather in Paris?"}]},
                  {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},
                  {"role":"tool","tool_call_id":"call_1","content":"18C"}],
      "tools":[{"type":"function","function":{"name":"get_weather","parameters":{}}}]}"#;
    let info = analyze_request("/v1/chat/completions", Some("application/json"), body, false);
    assert_eq!(info.operation.as_deref(), Some("chat"));
    assert_eq!(info.model.as_deref(), Some("gpt-4o-mini"));
    assert_eq!(info.stream, Some(true));
    assert_eq!(info.include_usage, Some(true));
    assert_eq!(info.max_tokens, Some(256));
    assert_eq!(info.message_count, Some(4));
    assert_eq!(info.tool_definitions, Some(1));
    assert_eq!(info.tool_result_ids, vec!["call_1"]);
    assert_eq!(info.prompt_bytes, Some(body.len() as u64));
    let expected = ["Be brief.", "Weather in Paris?", "18C"].iter().map(|t| count_tokens(t).unwrap()).sum();
    assert_eq!(info.prompt_tokens, Some(expected));
    assert_eq!(info.parse_error, None);
}

#[test]
fn anthropic_messages_with_system_blocks_and_tool_result() {
    let body = br#"{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,
      "system":[{"type":"text","text":"You are terse."}],
      "messages":[{"role":"user","content":"Hi"},
                  {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"t","input":{}}]},
                  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"done"}]}],
      "tools":[{"name":"t","input_schema":{"type":"object"}},{"name":"u","input_schema":{"type":"object"}}]}"#;
    let info = analyze_request("/v1/messages", Some("application/json"), body, false);
    assert_eq!(info.operation.as_deref(), Some("chat"));
    assert_eq!(info.max_tokens, Some(1024));
    assert_eq!(info.message_count, Some(3));
    assert_eq!(info.tool_definitions, Some(2));
    assert_eq!(info.tool_result_ids, vec!["toolu_1"]);
    assert_eq!(info.include_usage, None);
    let expected = ["Hi", "done", "You are terse."].iter().map(|t| count_tokens(t).unwrap()).sum();
    assert_eq!(info.prompt_tokens, Some(expected));
}

#[test]
fn responses_api_input_and_function_call_output() {
    let body = br#"{"model":"o4-mini","stream":true,"instructions":"Be kind.","max_output_tokens":500,
      "input":[{"role":"user","content":[{"type":"input_text","text":"Look it up"}]},
               {"type":"function_call","call_id":"call_9","name":"lookup","arguments":"{}"},
               {"type":"function_call_output","call_id":"call_9","output":"found"}],
      "tools":[{"type":"function","name":"lookup","parameters":{}}]}"#;
    let info = analyze_request("/v1/responses", None, body, false);
    assert_eq!(info.operation.as_deref(), Some("chat"));
    assert_eq!(info.max_tokens, Some(500));
    assert_eq!(info.message_count, Some(3));
    assert_eq!(info.tool_result_ids, vec!["call_9"]);
    let expected = ["Look it up", "found", "Be kind."].iter().map(|t| count_tokens(t).unwrap()).sum();
    assert_eq!(info.prompt_tokens, Some(expected));

    let info = analyze_request("/v1/responses", None, br#"{"model":"gpt-4.1","input":"Hello"}"#, false);
    assert_eq!((info.message_count, info.stream), (Some(1), Some(false)));
}

#[test]
fn gemini_model_and_stream_from_path() {
    let body = br#"{"contents":[{"role":"user","parts":[{"text":"Why is the sky blue?"}]}],
      "systemInstruction":{"parts":[{"text":"Answer briefly."}]},
      "generationConfig":{"maxOutputTokens":128,"thinkingConfig":{"thinkingBudget":0}},
      "tools":[{"functionDeclarations":[{"name":"a"},{"name":"b"}]},{"googleSearch":{}}]}"#;
    let info = analyze_request(
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        Some("application/json"),
        body,
        false,
    );
    assert_eq!(info.operation.as_deref(), Some("generate_content"));
    assert_eq!(info.model.as_deref(), Some("gemini-2.5-flash"));
    assert_eq!(info.stream, Some(true));
    assert_eq!(info.max_tokens, Some(128));
    assert_eq!(info.message_count, Some(1));
    assert_eq!(info.tool_definitions, Some(3));
    let expected = ["Why is the sky blue?", "Answer briefly."].iter().map(|t| count_tokens(t).unwrap()).sum();
    assert_eq!(info.prompt_tokens, Some(expected));

    let info = analyze_request("/v1beta/models/gemini-2.5-pro:generateContent", None, b"{}", false);
    assert_eq!(info.stream, Some(false));
}

#[test]
fn ollama_streams_by_default() {
    let body = br#"{"model":"qwen3:8b","messages":[{"role":"user","content":"hi"}],"options":{"num_predict":64}}"#;
    let info = analyze_request("/api/chat", None, body, false);
    assert_eq!(info.operation.as_deref(), Some("chat"));
    assert_eq!(info.stream, Some(true));
    assert_eq!(info.max_tokens, Some(64));
    let info = analyze_request("/api/generate", None, br#"{"model":"m","prompt":"hello there","stream":false}"#, false);
    assert_eq!(info.operation.as_deref(), Some("text_completion"));
    assert_eq!(info.stream, Some(false));
    assert_eq!(info.prompt_tokens, count_tokens("hello there"));
}

#[test]
fn other_operations() {
    let info =
        analyze_request("/v1/embeddings", None, br#"{"model":"text-embedding-3-small","input":["a","b"]}"#, false);
    assert_eq!(info.operation.as_deref(), Some("embeddings"));
    assert_eq!(info.message_count, Some(2));
    let info = analyze_request("/v1/completions", None, br#"{"model":"gpt-3.5-turbo-instruct","prompt":"Say"}"#, false);
    assert_eq!(info.operation.as_deref(), Some("text_completion"));
}

#[test]
fn truncated_invalid_and_non_json_bodies() {
    let info = analyze_request("/v1/chat/completions", Some("application/json"), br#"{"model":"gpt"#, true);
    assert!(info.parse_error.is_some());
    assert_eq!((info.model, info.prompt_bytes, info.prompt_tokens), (None, None, None));
    assert_eq!(info.operation.as_deref(), Some("chat"));

    let info = analyze_request("/v1/chat/completions", Some("application/json"), b"{nope", false);
    assert!(info.parse_error.as_deref().unwrap().starts_with("invalid JSON"));
    assert_eq!(info.model, None);

    // Forms are read (speech-to-text uploads); an empty one has no fields.
    let info = analyze_request("/v1/audio/transcriptions", Some("multipart/form-data; boundary=x"), b"--x\r\n", false);
    assert_eq!(info.parse_error, None);
    assert_eq!(info.operation.as_deref(), Some("speech_to_text"));
    assert_eq!(info.transcription.map(|t| t.upload), Some(None));

    let info = analyze_request("/v1/chat/completions", Some("text/plain"), b"hello", false);
    assert!(info.parse_error.as_deref().unwrap().contains("not JSON"));

    let info = analyze_request("/v1/models", None, b"", false);
    assert_eq!(info.parse_error, None);
    assert_eq!(info.prompt_bytes, Some(0));

    let json = serde_json::to_value(analyze_request("/x", None, b"[1]", false)).unwrap();
    assert!(json.get("model").is_none());
}

/// What the last input is, per API shape: a new user message starts a turn, tool results
/// continue one.
#[test]
fn last_input_per_api_shape() {
    use tokentap_analysis::LastInput;
    let cases: &[(&str, &str, Option<LastInput>)] = &[
        ("/v1/chat/completions", r#"{"messages":[{"role":"user","content":"hi"}]}"#, Some(LastInput::User)),
        (
            "/v1/chat/completions",
            r#"{"messages":[{"role":"tool","tool_call_id":"c","content":"1"}]}"#,
            Some(LastInput::ToolResult),
        ),
        ("/v1/chat/completions", r#"{"messages":[{"role":"developer","content":"x"}]}"#, Some(LastInput::System)),
        (
            "/v1/messages",
            r#"{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"1"}]}]}"#,
            Some(LastInput::ToolResult),
        ),
        ("/v1/messages", r#"{"messages":[{"role":"assistant","content":"Sure,"}]}"#, Some(LastInput::Assistant)),
        ("/v1/responses", r#"{"input":"hi"}"#, Some(LastInput::User)),
        (
            "/v1/responses",
            r#"{"input":[{"type":"function_call_output","call_id":"c","output":"1"}]}"#,
            Some(LastInput::ToolResult),
        ),
        (
            "/v1/responses",
            r#"{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}]}"#,
            Some(LastInput::Assistant),
        ),
        (
            "/v1beta/models/g:generateContent",
            r#"{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}]}"#,
            Some(LastInput::ToolResult),
        ),
        (
            "/v1beta/models/g:generateContent",
            r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#,
            Some(LastInput::User),
        ),
        ("/v1/embeddings", r#"{"input":["a","b"]}"#, Some(LastInput::User)),
        ("/v1/chat/completions", r#"{"model":"m"}"#, None),
    ];
    for (path, body, expected) in cases {
        let info = analyze_request(path, Some("application/json"), body.as_bytes(), false);
        assert_eq!(info.last_input, *expected, "{path} {body}");
    }
}

#[test]
fn prefix_hashes_ignore_key_order_and_nulls_but_not_the_system_prompt() {
    let a = analyze_request(
        "/v1/chat/completions",
        None,
        br#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[]}]}"#,
        false,
    );
    let b = analyze_request("/v1/chat/completions", None,
        br#"{"messages":[{"content":"hi","role":"user"},{"tool_calls":[],"role":"assistant"},{"role":"tool","tool_call_id":"c","content":"1"}]}"#, false);
    assert_eq!(a.prefix_hashes.len(), 2);
    assert_eq!(b.prefix_hashes[..2], a.prefix_hashes[..], "b extends a");
    let c =
        analyze_request("/v1/messages", None, br#"{"system":"x","messages":[{"role":"user","content":"hi"}]}"#, false);
    assert_ne!(c.prefix_hashes[0], a.prefix_hashes[0]);
    let r = analyze_request("/v1/responses", None, br#"{"previous_response_id":"resp_1","input":"more"}"#, false);
    assert_eq!(r.previous_response_id.as_deref(), Some("resp_1"));
    // Gemini results without ids are kept by name, in order.
    let g = analyze_request("/v1beta/models/g:generateContent", None,
        br#"{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}},{"functionResponse":{"name":"g","id":"x","response":{}}}]}]}"#, false);
    assert_eq!((g.tool_result_names, g.tool_result_ids), (vec!["f".to_owned()], vec!["x".to_owned()]));
}

/// Every step of a turn carries the turn's anchor and, after the first, the turn's first reply:
/// the same keys the first step's own response gives (`conversation::reply_key`), per provider.
#[test]
fn later_steps_name_the_turn_and_the_conversation_as_the_first_step_does() {
    use tokentap_analysis::conversation::reply_key;
    let cases: [(&str, &str, &str, &[&str], &str); 4] = [
        (
            "/v1/chat/completions",
            r#"{"messages":[{"role":"system","content":"s"},{"role":"user","content":"q1"}]}"#,
            r#"{"messages":[{"role":"system","content":"s"},{"content":"q1","role":"user"},
               {"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]},
               {"role":"tool","tool_call_id":"c1","content":"1"},{"role":"tool","tool_call_id":"c2","content":"2"}]}"#,
            &["c1", "c2"],
            "",
        ),
        (
            "/v1/messages",
            r#"{"system":"s","messages":[{"role":"user","content":"q1"}]}"#,
            r#"{"system":"s","messages":[{"role":"user","content":"q1"},
               {"role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},
               {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"1"}]}]}"#,
            &["toolu_1"],
            "Let me look.",
        ),
        (
            "/v1/responses",
            r#"{"input":[{"role":"user","content":"q1"}]}"#,
            r#"{"input":[{"role":"user","content":"q1"},
               {"type":"function_call","call_id":"call_9","name":"f","arguments":"{}"},
               {"type":"function_call_output","call_id":"call_9","output":"1"}]}"#,
            &["call_9"],
            "",
        ),
        (
            "/v1/chat/completions",
            r#"{"messages":[{"role":"user","content":"q1"}]}"#,
            r#"{"messages":[{"role":"user","content":"q1"},{"role":"assistant","content":"The  answer."},
               {"role":"user","content":"q2"}]}"#,
            &[],
            "the answer.",
        ),
    ];
    for (path, first, later, ids, text) in cases {
        let a = analyze_request(path, None, first.as_bytes(), false);
        let b = analyze_request(path, None, later.as_bytes(), false);
        let reply = reply_key(ids.iter().copied(), text);
        assert!(a.turn_anchor.is_some() && reply.is_some(), "{path}");
        assert_eq!(b.conversation_anchor, a.turn_anchor, "{path}: the conversation starts where turn 1 does");
        assert_eq!(b.conversation_reply, reply, "{path}: the first reply, from the history");
        if ids.is_empty() {
            assert_ne!(b.turn_anchor, a.turn_anchor, "{path}: a new user message is a new turn");
            assert_eq!(b.turn_reply, None, "{path}: nothing follows the last user message yet");
        } else {
            assert_eq!(b.turn_anchor, a.turn_anchor, "{path}: the same turn");
            assert_eq!(b.turn_reply, reply, "{path}");
        }
    }
}
