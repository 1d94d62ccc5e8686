use super::*;
use proptest::prelude::*;

/// The contract: whenever the fast path answers, serde_json agrees exactly.
fn agrees(data: &str) -> bool {
    agrees_after(&mut Resume::default(), data)
}

/// The same, for a chunk that follows others of the same stream (resumed parses).
fn agrees_after(resume: &mut Resume, data: &str) -> bool {
    let fast = parse(resume, data);
    if let Some(fast) = &fast {
        let slow = serde_json::from_str::<Chunk<'_>>(data);
        assert!(slow.is_ok(), "fast path accepted what serde rejects: {data:?}");
        assert_eq!(Some(fast), slow.ok().as_ref(), "different chunk for {data:?}");
    }
    fast.is_some()
}

const ID: &str = r#""id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_eb9dce56a8""#;

#[test]
fn common_shapes_take_the_fast_path() {
    let shapes = [
        format!(r#"{{{ID},"choices":[{{"index":0,"delta":{{"role":"assistant","content":"","refusal":null}},"logprobs":null,"finish_reason":null}}]}}"#),
        format!(r#"{{{ID},"choices":[{{"index":0,"delta":{{"content":" the"}},"logprobs":null,"finish_reason":null}}]}}"#),
        format!(r#"{{{ID},"choices":[{{"index":0,"delta":{{}},"logprobs":null,"finish_reason":"stop"}}]}}"#),
        format!(r#"{{{ID},"service_tier":"default","choices":[{{"index":0,"delta":{{"content":"line\n\"quoted\" \\ \/ \b\f\r\t \u00e9\u6771 \ud83d\udc4d"}},"logprobs":null,"finish_reason":null}}],"usage":null,"obfuscation":"Xy3"}}"#),
        format!(r#"{{{ID},"choices":[{{"index":0,"delta":{{"reasoning_content":"think"}},"finish_reason":null}}]}}"#),
        format!(r#"{{{ID},"choices":[{{"index":0,"delta":{{"reasoning":"think","content":null}}}}]}}"#),
        // Azure: filter results on every choice, prompt filter results first.
        format!(r#"{{{ID},"prompt_filter_results":[{{"prompt_index":0,"content_filter_results":{{"hate":{{"filtered":false,"severity":"safe"}}}}}}],"choices":[]}}"#),
        format!(r#"{{{ID},"choices":[{{"content_filter_results":{{"hate":{{"filtered":false,"severity":"safe"}},"self_harm":{{"filtered":false,"severity":"safe"}}}},"delta":{{"content":"x"}},"finish_reason":null,"index":0,"logprobs":{{"content":[{{"token":"x","logprob":-0.25,"bytes":[120],"top_logprobs":[]}}],"refusal":null}}}}]}}"#),
        " { \"choices\" : [ { \"delta\" : { \"content\" : \"a\" } , \"index\" : 7 } ] , \"x\" : [ 1 , -2.5e+3 , true , false , null , { } , [ ] ] } ".into(),
        r#"{"choices":null,"id":null,"model":null}"#.into(),
        r#"{"choices":[{"text":"legacy","index":0,"finish_reason":null}]}"#.into(),
        // Members that are not text: read by serde_json from their own bytes.
        r#"{"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":2000,"total_tokens":2020}}"#.into(),
        r#"{"error":{"message":"overloaded","type":"server_error"}}"#.into(),
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}"#.into(),
        r#"{"choices":[{"index":0,"delta":{"function_call":{"name":"f"}}}]}"#.into(),
        r#"{"choices":[{"index":0,"message":{"content":"whole"}}]}"#.into(),
        r#"{"choices":[{"index":0,"delta":{"reasoning":{"text":"obj"}}}]}"#.into(),
        r#"{"id":"chatcmpl-1","object":"chat.completion","created":1741570283,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}],"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":82,"completion_tokens":17,"total_tokens":99,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}},"service_tier":"default","system_fingerprint":"fp_1"}"#.into(),
        r#"{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1,"model":"qwen","object":"chat.completion.chunk","usage":{"completion_tokens":9,"prompt_tokens":5,"total_tokens":14},"timings":{"prompt_n":5,"prompt_ms":12.5,"predicted_n":9,"predicted_ms":90.1,"predicted_per_second":99.9}}"#.into(),
        r#"{"choices":[],"x_groq":{"id":"req_1","usage":{"queue_time":0.02,"prompt_time":0.01}},"time_info":{"queue_time":0.0001,"total_time":0.2}}"#.into(),
        r#"{"choices":[{"delta":null},{"delta":{"content":"b"},"index":1}]}"#.into(),
        "{}".into(),
    ];
    for data in &shapes {
        assert!(agrees(data), "fell back on {data}");
    }
}

#[test]
fn unusual_shapes_fall_back() {
    let cases = [
        // Not-text members that serde rejects, or that the scanner does not skip strictly.
        r#"{"usage":{"t\u006ftal":1}}"#,
        r#"{"usage":{"x":"\ud800"}}"#,
        r#"{"usage":{"x":1,}}"#,
        r#"{"error":[1 2]}"#,
        r#"{"choices":[{"delta":{"tool_calls":{"index":0}}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":-1}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"id":1}]}}]}"#,
        r#"{"choices":[{"delta":{"function_call":"f"}}]}"#,
        r#"{"choices":[{"message":{"content":1}}]}"#,
        r#"{"choices":[{"message":{"content":"a","content":"b"}}]}"#,
        r#"{"choices":[{"message":[]}]}"#,
        r#"{"choices":[{"index":-1,"delta":{"content":"a"}}]}"#,
        r#"{"choices":[{"index":1.0,"delta":{"content":"a"}}]}"#,
        r#"{"choices":[{"index":1e0,"delta":{"content":"a"}}]}"#,
        r#"{"choices":[{"index":18446744073709551616,"delta":{"content":"a"}}]}"#,
        r#"{"choices":[{"index":01,"delta":{"content":"a"}}]}"#,
        r#"{"choices":[{"index":"0","delta":{"content":"a"}}]}"#,
        r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
        r#"{"id":"a","id":null}"#,
        r#"{"choices":[{"delta":{"cont\u0065nt":"a"}}]}"#,
        r#"{"choices":[{"delta":{"content":"\ud83d"}}]}"#,
        r#"{"choices":[{"delta":{"content":"\udc4d"}}]}"#,
        r#"{"choices":[{"delta":{"content":"\ud83d\u0041"}}]}"#,
        r#"{"choices":[{"delta":{"content":"\x"}}]}"#,
        "{\"choices\":[{\"delta\":{\"content\":\"raw\ttab\"}}]}",
        r#"{"choices":[{"delta":{"content":"a"}}],}"#,
        r#"{"choices":[{"delta":{"content":"a"}},]}"#,
        r#"{"choices":[{"delta":{"content":"a"}}]} x"#,
        r#"{"choices":[{"delta":{"content":"a"}}]"#,
        r#"{"choices":[["a"]]}"#,
        r#"["id","model"]"#,
        r#"{"id":1}"#,
        r#"{"x":01}"#,
        r#"{"x":1.}"#,
        r#"{"x":-}"#,
        r#"{"x":tru}"#,
        r#"{"x":nulll}"#,
        r#"{"x" 1}"#,
        r#"{"a":1 "b":2}"#,
        "",
        "[DONE]",
    ];
    for data in cases {
        assert!(!agrees(data), "fast path took {data}");
    }
    // Far too deep for the fast path; serde decides.
    let deep = format!("{{\"x\":{}1{}}}", "[".repeat(200), "]".repeat(200));
    assert!(!agrees(&deep));
}

/// A JSON string literal for `text`, each character written one of the ways JSON allows, and
/// now and then a way it does not (raw control character, lone surrogate, bad escape).
fn string_literal() -> impl Strategy<Value = String> {
    let piece = (
        prop_oneof![
            6 => prop::sample::select(vec![
                'a', ' ', 'Z', '0', '"', '\\', '/', '\n', '\r', '\t', '\u{8}', '\u{c}', '\u{0}',
                '\u{1f}', '\u{7f}', 'é', '東', '👍', '\u{2028}', '\u{fffd}',
            ]),
            1 => any::<char>(),
        ],
        0..40u8,
    )
        .prop_map(|(c, how)| {
            let short = match c {
                '"' => Some("\\\""),
                '\\' => Some("\\\\"),
                '/' => Some("\\/"),
                '\u{8}' => Some("\\b"),
                '\u{c}' => Some("\\f"),
                '\n' => Some("\\n"),
                '\r' => Some("\\r"),
                '\t' => Some("\\t"),
                _ => None,
            };
            let mut units = [0u16; 2];
            let utf16 = c.encode_utf16(&mut units);
            let escaped: String = utf16
                .iter()
                .map(|u| if how % 2 == 0 { format!("\\u{u:04x}") } else { format!("\\u{u:04X}") })
                .collect();
            let must_escape = matches!(c, '"' | '\\') || (c as u32) < 0x20;
            match how {
                0..=5 => escaped,
                6..=9 => short.map(str::to_owned).unwrap_or(escaped),
                10 if (c as u32) < 0x20 => c.to_string(), // raw control character: invalid
                10 => "\\ud800".to_owned(),               // lone surrogate
                11 => "\\udc00".to_owned(),               // lone trailing surrogate
                12 => "\\a".to_owned(),                   // invalid escape
                _ if must_escape => short.map(str::to_owned).unwrap_or(escaped),
                _ => c.to_string(),
            }
        });
    prop::collection::vec(piece, 0..12).prop_map(|p| format!("\"{}\"", p.concat()))
}

fn ws() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", "", "", " ", "\n", " \t\r\n "])
}

/// Any JSON value (small), for unknown fields and for known fields of the wrong type.
fn any_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        prop::sample::select(vec!["0", "7", "-1", "1.5", "-0.0e-7", "1E+2", "123456789012345678901234"])
            .prop_map(str::to_owned),
        string_literal(),
    ];
    leaf.prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((string_literal(), inner), 0..4).prop_map(|v| {
                let members: Vec<String> = v.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

/// A value for a field that the classifier reads as text: mostly a string, sometimes null,
/// sometimes anything.
fn text_value() -> impl Strategy<Value = String> {
    prop_oneof![12 => string_literal(), 3 => Just("null".to_owned()), 1 => any_value()]
}

/// `"key":value` members joined with commas, with varying whitespace.
fn render(members: &[(String, String)], spaces: &[&'static str]) -> String {
    let mut out = String::new();
    for (i, (key, value)) in members.iter().enumerate() {
        let s = spaces.get(i % spaces.len().max(1)).copied().unwrap_or("");
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("{s}\"{key}\"{s}:{s}{value}{s}"));
    }
    out
}

/// Some of `fields` (each with a value from its strategy), plus unknown or repeated members,
/// in varying order.
fn member_list(
    fields: Vec<(&'static str, BoxedStrategy<String>)>,
) -> impl Strategy<Value = (Vec<(String, String)>, Vec<&'static str>)> {
    let n = fields.len();
    let options: Vec<_> = fields
        .into_iter()
        .map(|(key, value)| prop::option::weighted(0.6, value.prop_map(move |v| (key.to_owned(), v))))
        .collect();
    (
        options,
        prop::collection::vec(prop::sample::select(vec!["x", "logprobs", "index", "content", "id"]), 0..2),
        prop::collection::vec(any_value(), 2),
        prop::collection::vec(ws(), n + 2),
        any::<u64>(),
    )
        .prop_map(|(chosen, extra_keys, extra_values, spaces, seed)| {
            let mut members: Vec<(String, String)> = chosen.into_iter().flatten().collect();
            // Unknown fields, or a repeated known one.
            for (key, value) in extra_keys.into_iter().zip(extra_values) {
                members.push((key.to_owned(), value));
            }
            // Field order varies.
            let len = members.len().max(1);
            members.rotate_left((seed as usize) % len);
            if seed % 3 == 0 {
                members.reverse();
            }
            (members, spaces)
        })
}

fn members(fields: Vec<(&'static str, BoxedStrategy<String>)>) -> impl Strategy<Value = String> {
    member_list(fields).prop_map(|(members, spaces)| format!("{{{}}}", render(&members, &spaces)))
}

fn delta_fields() -> Vec<(&'static str, BoxedStrategy<String>)> {
    vec![
        ("role", text_value().boxed()),
        ("content", text_value().boxed()),
        ("reasoning_content", text_value().boxed()),
        ("reasoning", text_value().boxed()),
        ("refusal", text_value().boxed()),
        ("tool_calls", prop_oneof![6 => Just("null".to_owned()), 3 => tool_calls(), 1 => any_value()].boxed()),
        ("function_call", prop_oneof![6 => Just("null".to_owned()), 3 => function(), 1 => any_value()].boxed()),
    ]
}

/// A `function` object of a tool call: name and arguments, mostly text.
fn function() -> BoxedStrategy<String> {
    members(vec![("name", text_value().boxed()), ("arguments", text_value().boxed())]).boxed()
}

/// A `tool_calls` array as the servers send it (streamed pieces with an index, whole calls with
/// an id and a type), with now and then a value of the wrong type.
fn tool_calls() -> BoxedStrategy<String> {
    let index = prop_oneof![4 => prop::sample::select(vec!["0", "1", "null", "-1", "1.5"]), 1 => Just("\"0\"")];
    let call = members(vec![
        ("index", index.prop_map(str::to_owned).boxed()),
        ("id", text_value().boxed()),
        ("type", string_literal().boxed()),
        ("function", prop_oneof![6 => function(), 1 => Just("null".to_owned()), 1 => any_value()].boxed()),
    ]);
    prop::collection::vec(call, 0..3).prop_map(|c| format!("[{}]", c.join(","))).boxed()
}

/// A `usage` object: token counts, nested details, sometimes a value of another type.
fn usage() -> BoxedStrategy<String> {
    let count = prop_oneof![4 => prop::sample::select(vec!["0", "12", "2020", "1.5", "-3", "1e3"]).prop_map(str::to_owned), 1 => any_value()];
    let details = members(vec![("cached_tokens", count.clone().boxed()), ("reasoning_tokens", count.clone().boxed())]);
    members(vec![
        ("prompt_tokens", count.clone().boxed()),
        ("completion_tokens", count.clone().boxed()),
        ("total_tokens", count.boxed()),
        ("prompt_tokens_details", details.boxed()),
    ])
    .boxed()
}

fn delta() -> impl Strategy<Value = String> {
    members(delta_fields())
}

fn choice_fields() -> Vec<(&'static str, BoxedStrategy<String>)> {
    let index = prop_oneof![
        4 => prop::sample::select(vec!["0", "1", "12", "null", "-0", "1.0", "01", "99999999999999999999", "18446744073709551615", "\"0\""]).prop_map(str::to_owned),
        1 => any_value(),
    ];
    vec![
        ("index", index.boxed()),
        ("delta", prop_oneof![6 => delta(), 1 => Just("null".to_owned()), 1 => any_value()].boxed()),
        ("message", prop_oneof![6 => Just("null".to_owned()), 3 => delta().boxed(), 1 => any_value()].boxed()),
        ("text", text_value().boxed()),
        ("finish_reason", text_value().boxed()),
        ("logprobs", any_value().boxed()),
    ]
}

fn choice() -> impl Strategy<Value = String> {
    members(choice_fields())
}

fn top_fields() -> Vec<(&'static str, BoxedStrategy<String>)> {
    let choices = prop_oneof![
        6 => prop::collection::vec(choice(), 0..3).prop_map(|c| format!("[{}]", c.join(","))),
        1 => Just("null".to_owned()),
        1 => any_value(),
    ];
    vec![
        ("id", text_value().boxed()),
        ("model", text_value().boxed()),
        ("choices", choices.boxed()),
        ("usage", prop_oneof![6 => Just("null".to_owned()), 3 => usage(), 1 => any_value()].boxed()),
        ("error", prop_oneof![8 => Just("null".to_owned()), 1 => any_value()].boxed()),
        ("timings", prop_oneof![8 => Just("null".to_owned()), 1 => usage(), 1 => any_value()].boxed()),
        ("x_groq", prop_oneof![8 => Just("null".to_owned()), 1 => any_value()].boxed()),
        ("time_info", prop_oneof![8 => Just("null".to_owned()), 1 => usage(), 1 => any_value()].boxed()),
        ("object", string_literal().boxed()),
    ]
}

fn chunk() -> impl Strategy<Value = String> {
    members(top_fields())
}

/// Members before and after the resumable point, split at a random place.
fn split_members(fields: Vec<(&'static str, BoxedStrategy<String>)>) -> impl Strategy<Value = (String, String)> {
    (member_list(fields), any::<prop::sample::Index>()).prop_map(|((members, spaces), at)| {
        let at = at.index(members.len() + 1);
        let before = render(&members[..at], &spaces);
        let after = render(&members[at..], &spaces);
        (
            if before.is_empty() { before } else { before + "," },
            if after.is_empty() { after } else { format!(",{after}") },
        )
    })
}

/// Several chunks of one stream: the same bytes up to `choices[0].delta.content`, then each
/// its own content value and remaining members. Prefixes and tails are realistic ones or
/// generated ones.
fn resumable_stream() -> impl Strategy<Value = Vec<String>> {
    let generated_tail = (
        split_members(delta_fields()),
        split_members(choice_fields()),
        prop::collection::vec(choice(), 0..2),
        split_members(top_fields()),
    )
        .prop_map(|((_, delta_after), (_, choice_after), more, (_, top_after))| {
            let more: String = more.iter().map(|c| format!(",{c}")).collect();
            format!("{delta_after}}}{choice_after}}}{more}]{top_after}}}")
        });
    let tail = prop_oneof![
        1 => generated_tail,
        6 => prop::sample::select(vec![
            "}}]}",
            "},\"logprobs\":null,\"finish_reason\":null}]}",
            " } , \"finish_reason\" : null , \"logprobs\" : null } ] , \"obfuscation\" : \"a1\" }",
            ",\"refusal\":null},\"finish_reason\":null}],\"usage\":null}",
            "}},{\"index\":1,\"delta\":{\"content\":\"b\"}}]}",
            "},\"content_filter_results\":{\"hate\":{\"filtered\":false,\"severity\":\"safe\"}}}]}",
            "},\"finish_reason\":\"stop\"}]}",
        ])
        .prop_map(str::to_owned),
        1 => prop::sample::select(vec![
            ",\"content\":\"dup\"}}]}",
            "}}],\"usage\":{\"total_tokens\":1}}",
            "}}]",
            "}}]}x",
        ])
        .prop_map(str::to_owned),
    ];
    let generated_prefix = (split_members(top_fields()), split_members(choice_fields()), split_members(delta_fields()))
        .prop_map(|((top, _), (choice, _), (delta, _))| {
            format!("{{{top}\"choices\":[{{{choice}\"delta\":{{{delta}\"content\":")
        });
    let prefix = prop_oneof![
        1 => generated_prefix,
        4 => prop::sample::select(vec![
            format!("{{{ID},\"choices\":[{{\"index\":0,\"delta\":{{\"content\":"),
            format!("{{{ID},\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":"),
            "{\"id\":\"a\\u0041\\n\",\"model\":null,\"choices\":[{\"delta\":{\"reasoning\":\"r\",\"content\": ".to_owned(),
            "{ \"choices\" : [ { \"content_filter_results\" : { } , \"index\" : 3 , \"delta\" : { \"content\" :".to_owned(),
            "{\"choices\":[{\"text\":\"t\",\"finish_reason\":null,\"delta\":{\"refusal\":\"no\",\"content\":".to_owned(),
        ]),
    ];
    let content = prop_oneof![
        6 => prop::sample::select(vec![
            "\"Hello\"", "\" world\"", "\"\"", "\"\\n\\n\"", "\"\\u00e9t\\u00E9\"",
            "\"\\ud83d\\udc4d\"", "\"tab\\there \\\"q\\\" \\\\ \\/\"", "\"東京 👍\"",
        ])
        .prop_map(str::to_owned),
        2 => string_literal(),
        1 => Just("null".to_owned()),
        1 => any_value(),
    ];
    (prefix, prop::collection::vec((content, tail), 1..5))
        .prop_map(|(prefix, suffixes)| suffixes.iter().map(|(c, t)| format!("{prefix}{c}{t}")).collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn fast_path_agrees_with_serde(data in chunk()) {
        agrees(&data);
    }

    /// Chunks of one stream, parsed in order with one [`Resume`]: resumed parses agree too,
    /// also when a later chunk is corrupted after the shared prefix.
    #[test]
    fn resumed_parses_agree_with_serde(
        stream in resumable_stream(),
        corrupt in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
    ) {
        let mut resume = Resume::default();
        let corrupt = corrupt.index(stream.len() * 2);
        for (i, data) in stream.iter().enumerate() {
            agrees_after(&mut resume, data);
            if i == corrupt {
                let mut bytes = data.clone().into_bytes();
                let at = at.index(bytes.len());
                bytes[at] = b'"';
                if let Ok(mutated) = String::from_utf8(bytes) {
                    agrees_after(&mut resume, &mutated);
                }
            }
        }
    }

    /// Cut, spliced or corrupted chunks: still never accepted unless serde agrees.
    #[test]
    fn fast_path_agrees_on_mutated_chunks(
        data in chunk(),
        at in any::<prop::sample::Index>(),
        cut in 0..3usize,
        insert in prop::sample::select(vec!["", "\"", "\\", ",", "}", "]", "{", "[", " ", "0", "-", "\u{1}", "é", "null"]),
    ) {
        let mut bytes = data.into_bytes();
        let at = at.index(bytes.len() + 1);
        let end = (at + cut).min(bytes.len());
        bytes.splice(at..end, insert.bytes());
        if let Ok(mutated) = String::from_utf8(bytes) {
            agrees(&mutated);
        }
    }
}

#[test]
fn a_stream_resumes_after_its_first_content_chunk() {
    let chunk = |content: &str| {
        format!(
            r#"{{{ID},"choices":[{{"index":0,"delta":{{"content":"{content}"}},"logprobs":null,"finish_reason":null}}],"obfuscation":"{content}"}}"#
        )
    };
    let role = format!(
        r#"{{{ID},"choices":[{{"index":0,"delta":{{"role":"assistant","content":"","refusal":null}},"logprobs":null,"finish_reason":null}}]}}"#
    );
    let mut resume = Resume::default();
    assert!(agrees_after(&mut resume, &role));
    assert!(agrees_after(&mut resume, &chunk("Hello")));
    let prefix_len = resume.snapshot.as_ref().map(|s| s.prefix.len());
    assert_eq!(prefix_len, chunk("").find(r#""content":"#).map(|i| i + 10));
    for content in [" world", "", "\\n\\u00e9", " \\ud83d\\udc4d"] {
        assert!(agrees_after(&mut resume, &chunk(content)), "{content}");
    }
    // Same prefix, then not the common shape: serde decides.
    for data in [
        chunk("a\\ud800"),
        chunk("x").replace(r#""logprobs":null"#, r#""logprobs":nul"#),
        chunk("x").replace(r#""finish_reason":null"#, r#""finish_reason":"stop","index":1"#),
        chunk("x") + " x",
    ] {
        assert!(!agrees_after(&mut resume, &data), "{data}");
    }
    let usage = chunk("x").replace(r#""obfuscation""#, r#""usage":{"total_tokens":3},"o""#);
    assert!(agrees_after(&mut resume, &usage), "a usage after the answer's text: resumed too");
    let bad_usage = chunk("x").replace(r#""obfuscation""#, r#""usage":{"total_tokens":3,},"o""#);
    assert!(!agrees_after(&mut resume, &bad_usage));
    assert!(agrees_after(&mut resume, &chunk("again")));
}

#[test]
fn generated_chunks_mostly_take_the_fast_path() {
    // The generator must exercise the fast path, not only its fallbacks.
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = chunk();
    let mut fast = 0;
    for _ in 0..2000 {
        let data = strategy.new_tree(&mut runner).unwrap().current();
        if agrees(&data) {
            fast += 1;
        }
    }
    assert!(fast > 300, "only {fast} of 2000 generated chunks took the fast path");
}
