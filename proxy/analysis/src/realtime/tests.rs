//! Session tests: scripted conversations encoded as real frames (masked client frames, some
//! fragmented, compressed or not), each checked whole and again with every piece split at
//! pseudo-random byte positions (the result must not change).

use super::analyzer::RealtimeAnalyzer;
use super::deflate::tests::Deflater;
use super::deflate::DeflateParams;
use super::event::{EventKind, RealtimeAudioFormat, ResponseStatus};
use super::frame::encode_frame;
use super::session::{Direction, RealtimeContext, RealtimeLimits, RealtimeSession, ResponseTrigger, SessionEnd};

const MS: u64 = 1_000_000;

/// One piece on the wire: its direction, its stamp and the frame bytes.
type Piece = (Direction, u64, Vec<u8>);

struct Script {
    deflate: Option<DeflateParams>,
    client_deflater: Option<Deflater>,
    server_deflater: Option<Deflater>,
    pieces: Vec<Piece>,
    n: usize,
}

impl Script {
    fn new(compressed: bool) -> Self {
        Self {
            deflate: compressed.then(DeflateParams::default),
            client_deflater: compressed.then(|| Deflater::new(true)),
            server_deflater: compressed.then(|| Deflater::new(true)),
            pieces: Vec::new(),
            n: 0,
        }
    }

    fn send(&mut self, direction: Direction, t_ms: u64, text: &str) -> &mut Self {
        self.n += 1;
        let deflater = match direction {
            Direction::ClientToServer => self.client_deflater.as_mut(),
            Direction::ServerToClient => self.server_deflater.as_mut(),
        };
        let (payload, rsv1) = match deflater {
            Some(d) => (d.compress(text.as_bytes()), true),
            None => (text.as_bytes().to_vec(), false),
        };
        let mask = (direction == Direction::ClientToServer).then_some([0x37, 0xfa, 0x21, 0x3d]);
        // Every third message goes in two fragments with a ping between them.
        let wire = if self.n.is_multiple_of(3) && payload.len() > 8 {
            let (a, b) = payload.split_at(payload.len() / 2);
            [
                encode_frame(false, rsv1, 0x1, mask, a),
                encode_frame(true, false, 0x9, mask, b"hb"),
                encode_frame(true, false, 0x0, mask, b),
            ]
            .concat()
        } else {
            encode_frame(true, rsv1, 0x1, mask, &payload)
        };
        self.pieces.push((direction, t_ms * MS, wire));
        self
    }

    fn client(&mut self, t_ms: u64, text: &str) -> &mut Self {
        self.send(Direction::ClientToServer, t_ms, text)
    }

    fn server(&mut self, t_ms: u64, text: &str) -> &mut Self {
        self.send(Direction::ServerToClient, t_ms, text)
    }

    fn raw(&mut self, direction: Direction, t_ms: u64, bytes: Vec<u8>) -> &mut Self {
        self.pieces.push((direction, t_ms * MS, bytes));
        self
    }

    fn run(&self, limits: RealtimeLimits) -> RealtimeSession {
        let session = analyze(&self.pieces, self.deflate, limits, None);
        for seed in 1..=8u64 {
            let split = analyze(&self.pieces, self.deflate, limits, Some(seed));
            assert_eq!(
                serde_json::to_value(&split).unwrap(),
                serde_json::to_value(&session).unwrap(),
                "split with seed {seed}"
            );
        }
        session
    }
}

fn analyze(
    pieces: &[Piece],
    deflate: Option<DeflateParams>,
    limits: RealtimeLimits,
    split_seed: Option<u64>,
) -> RealtimeSession {
    let mut a = RealtimeAnalyzer::new(RealtimeContext { deflate, limits });
    let mut rng = split_seed.unwrap_or(0);
    let mut next = move || {
        // xorshift64
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for (d, t, bytes) in pieces {
        match split_seed {
            None => a.push(*d, *t, bytes),
            Some(_) => {
                let mut at = 0;
                while at < bytes.len() {
                    let take = 1 + (next() % 97) as usize;
                    let end = (at + take).min(bytes.len());
                    a.push(*d, *t, &bytes[at..end]);
                    at = end;
                }
            }
        }
    }
    let end = pieces.last().map_or(0, |p| p.1);
    a.finish(end + MS)
}

/// Base64 of `bytes` zero bytes (only its length matters to the analysis).
fn b64(bytes: usize) -> String {
    "A".repeat(bytes.div_ceil(3) * 4)
}

fn append(ms_of_audio: usize) -> String {
    format!(r#"{{"type":"input_audio_buffer.append","audio":"{}"}}"#, b64(ms_of_audio * 48))
}

fn audio_delta(response: &str, ms_of_audio: usize) -> String {
    format!(
        r#"{{"type":"response.output_audio.delta","response_id":"{response}","item_id":"it_{response}","delta":"{}"}}"#,
        b64(ms_of_audio * 48)
    )
}

/// A conversation with three responses: one after VAD, one tool call followed by the client's
/// response.create, and one the user interrupts.
fn conversation(compressed: bool) -> Script {
    let mut s = Script::new(compressed);
    s.client(0, r#"{"type":"session.update","session":{"type":"realtime","audio":{"input":{"format":{"type":"audio/pcm","rate":24000},"turn_detection":{"type":"server_vad","silence_duration_ms":500,"prefix_padding_ms":300}}}}}"#);
    s.server(5, r#"{"type":"session.created","session":{"id":"sess_1","model":"gpt-realtime"}}"#);
    // 100 ms of audio every 100 ms: append i (at 100 + 100 i ms) holds audio [100 i, 100 (i + 1)).
    for i in 0..60u64 {
        s.client(100 + 100 * i, &append(100));
        match 100 + 100 * i {
            // Speech from audio 500 ms (reported with 300 ms padding) to 1500 ms (reported
            // with the 500 ms of silence that decided it).
            600 => s.server(620, r#"{"type":"input_audio_buffer.speech_started","audio_start_ms":200,"item_id":"u1"}"#),
            2000 => s
                .server(2100, r#"{"type":"input_audio_buffer.speech_stopped","audio_end_ms":2000,"item_id":"u1"}"#)
                .server(2101, r#"{"type":"input_audio_buffer.committed","item_id":"u1"}"#)
                .server(2110, r#"{"type":"response.created","response":{"id":"r1","status":"in_progress"}}"#),
            2300 => s
                .server(2300, &audio_delta("r1", 100))
                .server(2310, r#"{"type":"response.output_audio_transcript.delta","response_id":"r1","delta":"Hi"}"#),
            2400 => s.server(2400, &audio_delta("r1", 100)),
            2500 => s
                .server(2500, &audio_delta("r1", 100))
                .server(2600, r#"{"type":"response.output_audio.done","response_id":"r1"}"#)
                .server(2610, r#"{"type":"response.done","response":{"id":"r1","status":"completed","usage":{"input_tokens":30,"output_tokens":40,"input_token_details":{"text_tokens":10,"audio_tokens":20,"cached_tokens":8},"output_token_details":{"text_tokens":5,"audio_tokens":35}}}}"#),
            3000 => s.server(3010, r#"{"type":"input_audio_buffer.speech_started","audio_start_ms":2600}"#),
            3800 => s
                .server(3900, r#"{"type":"input_audio_buffer.speech_stopped","audio_end_ms":3600}"#)
                .server(4000, r#"{"type":"response.created","response":{"id":"r2"}}"#),
            4100 => s
                .server(4100, r#"{"type":"response.function_call_arguments.done","response_id":"r2","call_id":"c1","name":"get_weather","arguments":"{}"}"#)
                .server(4110, r#"{"type":"response.done","response":{"id":"r2","status":"completed","output":[{"type":"function_call","call_id":"c1","name":"get_weather"}]}}"#)
                .client(4150, r#"{"type":"response.future_feature","x":1}"#)
                .raw(Direction::ClientToServer, 4160, encode_frame(true, false, 0x1, Some([1, 2, 3, 4]), b"not json")),
            4300 => s
                .client(4300, r#"{"type":"conversation.item.create","item":{"type":"function_call_output","call_id":"c1","output":"sunny"}}"#)
                .client(4310, r#"{"type":"response.create"}"#)
                .server(4320, r#"{"type":"response.created","response":{"id":"r3"}}"#),
            4500 => s
                .server(4500, r#"{"type":"response.output_item.added","response_id":"r3","item":{"id":"it_r3","type":"message"}}"#)
                .server(4510, &audio_delta("r3", 1000)),
            4600 => s.server(4600, &audio_delta("r3", 1000)),
            4700 => s
                .server(4700, r#"{"type":"input_audio_buffer.speech_started","audio_start_ms":4300}"#)
                .client(4710, r#"{"type":"response.cancel"}"#)
                .client(4720, r#"{"type":"conversation.item.truncate","item_id":"it_r3","content_index":0,"audio_end_ms":150}"#)
                .server(4730, r#"{"type":"response.done","response":{"id":"r3","status":"cancelled","status_details":{"type":"cancelled","reason":"client_cancelled"}}}"#)
                .server(4731, r#"{"type":"output_audio_buffer.cleared","response_id":"r3"}"#),
            _ => &mut s,
        };
    }
    s.client(6100, r#"{"type":"error_not_really"}"#);
    s.raw(Direction::ClientToServer, 6200, encode_frame(true, false, 0x8, Some([9, 8, 7, 6]), &[0x03, 0xE8]));
    s.raw(Direction::ServerToClient, 6201, encode_frame(true, false, 0x8, None, &[0x03, 0xE8]));
    s
}

#[test]
fn a_conversation_breaks_down_per_response() {
    for compressed in [false, true] {
        let session = conversation(compressed).run(RealtimeLimits::default());
        assert_eq!(session.session_id.as_deref(), Some("sess_1"));
        assert_eq!(session.model.as_deref(), Some("gpt-realtime"));
        assert_eq!(session.input_format, RealtimeAudioFormat::Pcm16 { rate_hz: 24_000 });
        assert_eq!(session.appends, 60);
        assert!((session.input_audio_ms - 6000.0).abs() < 1.0);
        assert_eq!(session.end, SessionEnd::CloseHandshake);
        assert_eq!(session.client.unknown_events, 2);
        assert_eq!(session.client.malformed_messages, 1);
        assert!(session.client.frames.pings > 0 && session.client.frames.fragmented_messages > 0);
        assert_eq!(session.events[&EventKind::ResponseCreated], 3);
        assert_eq!(session.responses.len(), 3);

        let r1 = &session.responses[0];
        assert_eq!(r1.trigger, ResponseTrigger::ServerVad);
        let u = r1.user.unwrap();
        // True start: audio 500 ms, forwarded with append 4 at 500 ms; true end: audio 1500 ms,
        // the end of append 14, forwarded at 1500 ms.
        assert_eq!(u.speech_start_estimated_ms, Some(500.0));
        assert_eq!(u.speech_end_estimated_ms, Some(1500.0));
        assert_eq!(r1.time_to_first_audio_from_speech_stopped_ms, Some(200.0));
        assert_eq!(r1.time_to_first_audio_from_speech_end_ms, Some(800.0));
        assert_eq!(r1.time_to_created_from_speech_stopped_ms, Some(10.0));
        assert_eq!(r1.first_audio_transcript_ms, Some(2310.0));
        assert_eq!(r1.audio_deltas, 3);
        assert!((r1.audio_ms - 300.0).abs() < 0.1);
        assert_eq!(r1.status, Some(ResponseStatus::Completed));
        let usage = r1.usage.unwrap();
        assert_eq!((usage.input_cached_tokens, usage.output_audio_tokens), (Some(8), Some(35)));
        let p = r1.predicted.unwrap();
        assert_eq!(p.underruns, 0);
        assert!(r1.real_time_factor.unwrap() > 0.99 && r1.real_time_factor.unwrap() < 1.01);

        let r2 = &session.responses[1];
        assert_eq!(r2.tool_calls.len(), 1);
        let c = &r2.tool_calls[0];
        assert_eq!(
            (c.name.as_deref(), c.ready_ms, c.output_sent_ms, c.next_response_requested_ms),
            (Some("get_weather"), 4100.0, Some(4300.0), Some(4310.0))
        );
        assert_eq!(c.tool_gap_ms, Some(210.0));
        assert_eq!(r2.first_audio_ms, None);

        let r3 = &session.responses[2];
        assert_eq!(r3.trigger, ResponseTrigger::Client);
        assert_eq!(r3.time_to_first_audio_from_create_ms, Some(200.0));
        let i = r3.interruption;
        assert_eq!(
            (
                i.speech_started_ms,
                i.cancel_sent_ms,
                i.truncate_sent_ms,
                i.truncated_at_audio_ms,
                i.output_audio_cleared_ms
            ),
            (Some(4700.0), Some(4710.0), Some(4720.0), Some(150.0), Some(4731.0))
        );
        assert_eq!(r3.status, Some(ResponseStatus::Cancelled));
        assert_eq!(r3.status_reason.as_deref(), Some("client_cancelled"));
        // r1 was done and played out long before the next speech: not interrupted.
        assert!(r1.interruption.speech_started_ms.is_none());
    }
}

#[test]
fn compression_does_not_change_the_analysis() {
    let plain = serde_json::to_value(conversation(false).run(RealtimeLimits::default())).unwrap();
    let mut packed = serde_json::to_value(conversation(true).run(RealtimeLimits::default())).unwrap();
    packed.as_object_mut().unwrap().remove("deflate");
    // Frame counts differ with compression (sizes, so which messages were fragmented); the
    // rest is the same.
    let strip = |mut v: serde_json::Value| {
        for d in ["client", "server"] {
            v[d]["frames"] = serde_json::Value::Null;
        }
        v
    };
    assert_eq!(strip(plain), strip(packed));
}

#[test]
fn slow_audio_predicts_underruns() {
    let mut s = Script::new(false);
    s.server(0, r#"{"type":"response.created","response":{"id":"r"}}"#);
    // 100 ms of audio every 200 ms.
    for i in 0..5 {
        s.server(100 + 200 * i, &audio_delta("r", 100));
    }
    let session = s.run(RealtimeLimits::default());
    let r = &session.responses[0];
    assert_eq!(r.predicted.unwrap().underruns, 4);
    assert!((r.real_time_factor.unwrap() - 2.0).abs() < 0.01);
    assert_eq!(r.received.last(), Some(&(900.0, 500.0)));
    assert_eq!(r.trigger, ResponseTrigger::Unknown);
    assert_eq!(session.end, SessionEnd::Abrupt);
}

#[test]
fn received_is_thinned_to_256_points() {
    let mut s = Script::new(false);
    s.server(0, r#"{"type":"response.created","response":{"id":"r"}}"#);
    for i in 0..1000 {
        s.server(1 + i, &audio_delta("r", 10));
    }
    let r = &s.run(RealtimeLimits::default()).responses[0];
    assert!(r.received.len() <= 256 && r.received.len() > 128, "{}", r.received.len());
    assert_eq!(r.received.last(), Some(&(1000.0, 10_000.0)));
    assert!(r.received.windows(2).all(|w| w[0].0 < w[1].0));
}

#[test]
fn caps_are_counted() {
    let mut s = Script::new(false);
    for i in 0..10 {
        s.server(i, &format!(r#"{{"type":"response.created","response":{{"id":"r{i}"}}}}"#));
    }
    s.client(20, &append(1000)); // 64 KB of base64: cut at the cap, read from its prefix
    let limits = RealtimeLimits { max_responses: 4, max_message_bytes: 4096, ..RealtimeLimits::default() };
    let session = s.run(limits);
    assert_eq!(session.responses.len(), 4);
    assert_eq!(session.caps.responses_dropped, 6);
    assert_eq!(session.client.cut_messages, 1);
    assert!((session.input_audio_ms - 1000.0).abs() < 5.0, "{}", session.input_audio_ms);
}

#[test]
fn garbage_stops_one_direction_only() {
    let mut s = Script::new(false);
    s.raw(Direction::ClientToServer, 0, vec![0x8F, 0x80, 1, 2, 3, 4]); // reserved opcode
    s.client(1, r#"{"type":"response.create"}"#);
    s.server(2, r#"{"type":"response.created","response":{"id":"r"}}"#);
    s.raw(Direction::ServerToClient, 3, vec![0x81, 0x7E, 0x01]); // cut inside a header
    let session = s.run(RealtimeLimits::default());
    assert!(session.client.frame_error.is_some());
    assert_eq!(session.responses.len(), 1);
    assert!(session.server.ended_mid_frame);
    assert_eq!(session.end, SessionEnd::Abrupt);
}
