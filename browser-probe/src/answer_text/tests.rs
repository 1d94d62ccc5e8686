//! Each case is a body, its format (or `None`: sniffed), and the answer characters after the
//! whole body. Every case runs whole, byte by byte, and split at pseudo-random byte positions.

use super::*;

struct Case {
    name: &'static str,
    format: Option<TextFormat>,
    body: &'static str,
    chars: u64,
}

const CASES: &[Case] = &[
    Case {
        name: "openai chat sse, role delta, [DONE]",
        format: Some(TextFormat::Sse),
        body: "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n\
               data: {\"choices\":[{\"delta\":{\"content\":\"Héllo\"}}]}\n\n\
               data: {\"choices\":[{\"delta\":{\"content\":\" wörld 😀\"}}]}\n\n\
               data: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\ndata: [DONE]\n\n",
        chars: 5 + 8,
    },
    Case {
        name: "AI SDK UI message stream (v5)",
        format: Some(TextFormat::Sse),
        body: "data: {\"type\":\"start\",\"messageId\":\"m1\"}\n\n\
               data: {\"type\":\"start-step\"}\n\n\
               data: {\"type\":\"reasoning-delta\",\"id\":\"r\",\"delta\":\"thinking\"}\n\n\
               data: {\"type\":\"text-start\",\"id\":\"t\"}\n\n\
               data: {\"type\":\"text-delta\",\"id\":\"t\",\"delta\":\"Hi \"}\n\n\
               data: {\"type\":\"text-delta\",\"id\":\"t\",\"delta\":\"there\\n\\\"x\\\"\"}\n\n\
               data: {\"type\":\"tool-input-delta\",\"toolCallId\":\"c\",\"inputTextDelta\":\"{}\"}\n\n\
               data: {\"type\":\"text-end\",\"id\":\"t\"}\n\n\
               data: {\"type\":\"finish\"}\n\ndata: [DONE]\n\n",
        chars: 3 + 9,
    },
    Case {
        name: "AI SDK data stream (v4) lines",
        format: Some(TextFormat::DataStream),
        body: "f:{\"messageId\":\"m\"}\n0:\"Hel\"\n0:\"lo ñ\"\ng:\"reason\"\n\
               e:{\"finishReason\":\"stop\"}\nd:{\"finishReason\":\"stop\"}\n0:\"!\"",
        chars: 3 + 4 + 1,
    },
    Case {
        name: "anthropic messages sse with event lines and CRLF",
        format: None,
        body: "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{}}\r\n\r\n\
               event: content_block_start\r\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\r\n\r\n\
               event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Bonjour\"}}\r\n\r\n\
               event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hmm\"}}\r\n\r\n\
               : ping\r\n\r\nevent: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n",
        chars: 7,
    },
    Case {
        name: "openai responses sse",
        format: Some(TextFormat::Sse),
        body: "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{}}\n\n\
               event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"abc\"}\n\n\
               data: {\"type\":\"response.reasoning_summary_text.delta\",\"delta\":\"no\"}\n\n\
               data: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"content\":[{\"text\":\"abc\"}]}]}}\n\n",
        chars: 3,
    },
    Case {
        name: "plain text data lines, multi-line data joined with LF, CR line ends",
        format: Some(TextFormat::Sse),
        body: "data: Hello\r\rdata: two\rdata: lines\r\r: comment\r\rdata:no-space\r\r",
        chars: 5 + 9 + 8,
    },
    Case {
        name: "an unterminated final SSE event does not count",
        format: Some(TextFormat::Sse),
        body: "data: {\"text\":\"ab\"}\n\ndata: {\"text\":\"cd\"}\n",
        chars: 2,
    },
    Case {
        name: "ndjson (ollama chat), last line without newline",
        format: None,
        body: "{\"message\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"done\":false}\n\
               {\"message\":{\"role\":\"assistant\",\"thinking\":\"x\",\"content\":\"\"},\"done\":false}\n\n\
               {\"model\":\"m\",\"response\":\" you\",\"done\":false}\n{\"message\":{\"content\":\"!\"},\"done\":true}",
        chars: 2 + 4 + 1,
    },
    Case {
        name: "an app's own NDJSON with a generic field, and invalid lines",
        format: Some(TextFormat::Ndjson),
        body: "{\"token\":\"a\"}\nnot json\n{\"delta\":\"bc\"}\n{\"n\":1}\n\"de\"\n",
        chars: 1 + 2 + 2,
    },
    Case {
        name: "gemini sse skips thoughts",
        format: Some(TextFormat::Sse),
        body: "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"think\",\"thought\":true},{\"text\":\"Yes\"}]}}]}\n\n",
        chars: 3,
    },
    Case {
        name: "plain text with a BOM and multibyte characters",
        format: None,
        body: "\u{feff}Hello, wörld — 你好 😀",
        chars: 19,
    },
    Case {
        name: "a leading BOM before SSE is not part of the first line",
        format: None,
        body: "\u{feff}data: {\"text\":\"xyz\"}\n\n",
        chars: 3,
    },
];

/// Counts `body` fed in the given pieces.
fn run(format: Option<TextFormat>, pieces: &[&[u8]]) -> (u64, Option<TextFormat>) {
    let mut counter = AnswerText::new(format);
    for p in pieces {
        counter.feed(p);
    }
    counter.finish();
    (counter.chars(), counter.format())
}

/// Split positions from a small xorshift generator (deterministic per seed).
fn splits(len: usize, seed: u64) -> Vec<usize> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut cuts: Vec<usize> = (0..(len / 7).max(1))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % (len as u64 + 1)) as usize
        })
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

fn pieces(body: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut start = 0;
    for &c in cuts.iter().chain(std::iter::once(&body.len())) {
        out.push(body[start..c].to_vec());
        start = c;
    }
    out
}

#[test]
fn counts_answer_characters_in_each_format() {
    for case in CASES {
        let body = case.body.as_bytes();
        let (whole, format) = run(case.format, &[body]);
        assert_eq!(whole, case.chars, "{}: whole body", case.name);
        if let Some(expected) = case.format {
            assert_eq!(format, Some(expected), "{}", case.name);
        }
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(run(case.format, &bytes).0, case.chars, "{}: byte by byte", case.name);
        for seed in 1..=50 {
            let cuts = splits(body.len(), seed);
            let parts = pieces(body, &cuts);
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            assert_eq!(run(case.format, &refs).0, case.chars, "{}: split at {cuts:?}", case.name);
        }
    }
}

#[test]
fn the_count_only_grows_and_only_when_an_event_completes() {
    let body =
        b"data: {\"type\":\"text-delta\",\"delta\":\"abc\"}\n\ndata: {\"type\":\"text-delta\",\"delta\":\"de\"}\n\n";
    let mut counter = AnswerText::new(None);
    let mut seen = vec![];
    for b in body {
        counter.feed(&[*b]);
        seen.push(counter.chars());
    }
    assert!(seen.windows(2).all(|w| w[0] <= w[1]));
    let first_blank_line = body.windows(2).position(|w| w == b"\n\n").unwrap() + 1;
    assert_eq!(seen[first_blank_line - 1], 0, "not before the event's end");
    assert_eq!(seen[first_blank_line], 3);
    assert_eq!(counter.format(), Some(TextFormat::Sse));
}

#[test]
fn formats_from_headers() {
    assert_eq!(format_from_headers("text/event-stream; charset=utf-8", false), Some(TextFormat::Sse));
    assert_eq!(format_from_headers("text/plain; charset=utf-8", true), Some(TextFormat::DataStream));
    assert_eq!(format_from_headers("Application/X-NDJSON", false), Some(TextFormat::Ndjson));
    assert_eq!(format_from_headers("text/plain", false), Some(TextFormat::PlainText));
    assert_eq!(format_from_headers("application/octet-stream", false), None);
}

#[test]
fn oversized_events_are_skipped_and_counted() {
    let mut counter = AnswerText::new(Some(TextFormat::Sse));
    counter.feed(b"data: ");
    counter.feed(&vec![b'x'; MAX_EVENT_BYTES + 10]);
    counter.feed(b"\n\ndata: ok\n\n");
    assert_eq!(counter.chars(), 2);
    assert_eq!(counter.skipped_events, 1);
    let mut counter = AnswerText::new(Some(TextFormat::Ndjson));
    counter.feed(&vec![b' '; MAX_EVENT_BYTES + 1]);
    counter.feed(b"\n{\"text\":\"abc\"}\n");
    assert_eq!((counter.chars(), counter.skipped_events), (3, 1));
}

/// Bodies in shapes the probe has no reader for: the answer fields are inferred.
const INFERRED: &[Case] = &[
    Case {
        name: "an app's own SSE: event names, a field name of its own, an id and a type on every event",
        format: Some(TextFormat::Sse),
        body: "event: meta\ndata: {\"kind\":\"start\",\"mid\":\"m_8f2a9c1d\"}\n\n\
               event: piece\ndata: {\"kind\":\"piece\",\"mid\":\"m_8f2a9c1d\",\"zx\":\"Hel\"}\n\n\
               event: piece\ndata: {\"kind\":\"piece\",\"mid\":\"m_8f2a9c1d\",\"zx\":\"lo wö\"}\n\n\
               event: piece\ndata: {\"kind\":\"piece\",\"mid\":\"m_8f2a9c1d\",\"zx\":\"rld!\"}\n\n\
               event: end\ndata: {\"kind\":\"end\",\"mid\":\"m_8f2a9c1d\",\"whole\":\"Hello wörld!\"}\n\ndata: [DONE]\n\n",
        chars: 12,
    },
    Case {
        name: "JSON lines with nesting and a timestamp per line (sniffed)",
        format: None,
        body: "{\"out\":{\"p\":[\"ab\"]},\"at\":\"2026-12-05T03:00:00.001Z\"}\n\
               {\"out\":{\"p\":[\"cde\"]},\"at\":\"2026-12-05T03:00:00.031Z\"}\n\
               {\"out\":{\"p\":[\"f\"]},\"at\":\"2026-12-05T03:00:00.062Z\"}",
        chars: 6,
    },
    Case {
        name: "length-prefixed JSON chunks (sniffed)",
        format: None,
        body: "15:{\"w\":\"Hello\",\"n\":1}\n10:{\"w\":\" big\",\"n\":2}\n12:{\"w\":\" world\",\"n\":3}\n",
        chars: 15,
    },
];

#[test]
fn infers_the_answer_fields_of_unknown_shapes() {
    for case in INFERRED {
        let body = case.body.as_bytes();
        let check = |parts: Vec<Vec<u8>>, how: &str| {
            let counted = count_chunks(case.format, &parts, true);
            assert!(counted.inferred, "{}: {how}", case.name);
            assert_eq!(counted.counts.last().unwrap().1, case.chars, "{}: {how}", case.name);
            assert!(counted.counts.windows(2).all(|w| w[0].1 <= w[1].1), "{}: {how}", case.name);
        };
        check(vec![body.to_vec()], "whole");
        check(body.chunks(1).map(<[u8]>::to_vec).collect(), "byte by byte");
        for seed in 1..=50 {
            let cuts = splits(body.len(), seed);
            check(pieces(body, &cuts), &format!("split at {cuts:?}"));
        }
    }
    // A known shape is counted by its reader, not inferred.
    let known = count_chunks(None, &[CASES[0].body.as_bytes().to_vec()], true);
    assert!(!known.inferred);
    assert_eq!(known.counts[0].1, CASES[0].chars);
}

/// Messages (EventSource events, WebSocket messages): each one whole event, counted when it
/// arrives; known shapes by their reader, unknown ones inferred, text as text.
#[test]
fn counts_whole_messages() {
    let m = |items: &[&str]| items.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
    let known = count_messages(
        TextFormat::Sse,
        &m(&[r#"{"type":"text-delta","id":"0","delta":"Hé"}"#, "[DONE]", r#"{"type":"text-delta","delta":"llo"}"#]),
    );
    assert!(!known.inferred);
    assert_eq!(known.format, Some(TextFormat::Sse));
    assert_eq!(known.counts, vec![(44, 2), (50, 2), (85, 5)]);
    // An app's own field, a constant type and a fixed-length id: the field is inferred.
    let own: Vec<String> = ["Hel", "lo ", "wör", "ld"]
        .iter()
        .enumerate()
        .map(|(i, d)| format!(r#"{{"kind":"piece","seq":"{:08}","zqx7":"{d}"}}"#, 10_000_000 + i))
        .collect();
    let own = count_messages(TextFormat::Messages, &own.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>());
    assert!(own.inferred);
    assert_eq!(own.format, Some(TextFormat::Messages));
    assert_eq!(own.counts.iter().map(|c| c.1).collect::<Vec<_>>(), vec![3, 6, 9, 11]);
    // Plain text messages, with a message in two lines (an EventSource joins data lines).
    let text = count_messages(TextFormat::Messages, &m(&["Hello", " big\nworld", "!"]));
    assert!(!text.inferred);
    assert_eq!(text.counts.last().unwrap().1, 5 + 10 + 1);
    // An oversized message is skipped; the count goes on after it.
    let big = vec![b'x'; MAX_EVENT_BYTES + 1];
    let skipped = count_messages(TextFormat::Messages, &[b"ab".to_vec(), big, b"cd".to_vec()]);
    assert_eq!(skipped.counts.iter().map(|c| c.1).collect::<Vec<_>>(), vec![2, 2, 4]);
}

mod shapes {
    //! Generated stream shapes: random field names (never one the probe knows), metadata fields
    //! (constant, or a fixed-length id), random framing, random splits.
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone, Copy)]
    enum Framing {
        Sse,
        SseWithEvents,
        JsonLines,
        Tagged,
    }

    fn body(framing: Framing, text: &str, meta: &str, id: &str, deltas: &[String], nest: bool) -> String {
        let mut out = String::new();
        for (i, d) in deltas.iter().enumerate() {
            let value = serde_like(d);
            let piece = if nest { format!("{{\"{text}\":[{value}]}}") } else { value };
            let event =
                format!("{{\"{meta}\":\"chunk\",\"{id}\":\"{:08}\",\"{text}\":{piece},\"n\":{i}}}", 10_000_000 + i);
            match framing {
                Framing::Sse => out.push_str(&format!("data: {event}\n\n")),
                Framing::SseWithEvents => out.push_str(&format!("event: {meta}\ndata: {event}\n\n")),
                Framing::JsonLines => out.push_str(&format!("{event}\n")),
                Framing::Tagged => out.push_str(&format!("{}:{event}\n", event.len())),
            }
        }
        out
    }

    fn serde_like(s: &str) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn generated_shapes_align(
            text in "[a-z]{1,6}[0-9]",
            meta in "[a-z]{1,6}[0-9]",
            id in "[a-z]{1,6}[0-9]",
            deltas in proptest::collection::vec("[a-zA-Z0-9 é😀\"\\\\\n.,]{1,6}", 3..40),
            framing in prop_oneof![Just(Framing::Sse), Just(Framing::SseWithEvents), Just(Framing::JsonLines), Just(Framing::Tagged)],
            nest in any::<bool>(),
            cut_seed in any::<u64>(),
        ) {
            prop_assume!(text != meta && text != id && meta != id);
            // Consecutive equal deltas would look like a repeating (metadata) field.
            prop_assume!(deltas.windows(2).all(|w| w[0] != w[1]));
            let body = body(framing, &text, &meta, &id, &deltas, nest);
            let expected: u64 = deltas.iter().map(|d| d.chars().count() as u64).sum();
            let format = match framing {
                Framing::Sse | Framing::SseWithEvents => Some(TextFormat::Sse),
                _ => None,
            };
            let cuts = splits(body.len(), cut_seed);
            let counted = count_chunks(format, &pieces(body.as_bytes(), &cuts), true);
            prop_assert!(counted.inferred);
            prop_assert_eq!(counted.counts.last().unwrap().1, expected);
            prop_assert!(counted.counts.windows(2).all(|w| w[0].1 <= w[1].1));
        }

        /// The same events as whole messages (an EventSource's data, a socket's text messages):
        /// every message counted at once, in the inferred fields.
        #[test]
        fn generated_messages_align(
            text in "[a-z]{1,6}[0-9]",
            meta in "[a-z]{1,6}[0-9]",
            id in "[a-z]{1,6}[0-9]",
            deltas in proptest::collection::vec("[a-zA-Z0-9 é😀\"\\\\\n.,]{1,6}", 3..40),
            nest in any::<bool>(),
        ) {
            prop_assume!(text != meta && text != id && meta != id);
            prop_assume!(deltas.windows(2).all(|w| w[0] != w[1]));
            let lines = body(Framing::JsonLines, &text, &meta, &id, &deltas, nest);
            let messages: Vec<Vec<u8>> = lines.lines().map(|l| l.as_bytes().to_vec()).collect();
            let counted = count_messages(TextFormat::Messages, &messages);
            prop_assert!(counted.inferred);
            let mut sum = 0;
            for (d, c) in deltas.iter().zip(&counted.counts) {
                sum += d.chars().count() as u64;
                prop_assert_eq!(c.1, sum);
            }
        }
    }
}
