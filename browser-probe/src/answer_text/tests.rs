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
