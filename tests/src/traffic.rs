//! Traffic of every kind through one tokentap, each waited for on the live feed: a streamed chat,
//! a non-streaming one, an agent turn (openai SDK, a tool call), a voice turn (speech to text,
//! chat, text to speech) and a realtime WebSocket session. For the tests that check what a user
//! reads about each kind (reports, `explain`, the dashboard).

use serde_json::Value;

use crate::process::{run_sdk_script, Tokentap};
use crate::{http1, RecordFeed};

/// What [`every_kind`] sent, by kind.
pub struct EveryKind {
    pub chat_id: String,
    pub non_streaming_id: String,
    pub agent_turn: Value,
    /// `voice_turn.py`'s output (`request_ids`, `spoken`).
    pub voice: Value,
    pub voice_turn: Value,
    pub realtime_id: String,
}

/// Sends one request of each kind through `tokentap` (whose mock serves them all) and waits for
/// each record or turn on `feed`.
pub fn every_kind(tokentap: &Tokentap, feed: &mut RecordFeed) -> EveryKind {
    let base = format!("http://{}/v1", tokentap.addr);
    let mut chat = |stream: bool| {
        let body = format!(
            r#"{{"model":"mock-gpt","stream":{stream},"messages":[{{"role":"user","content":"hi {stream}"}}]}}"#
        );
        let resp = http1::post(
            tokentap.addr,
            "/v1/chat/completions",
            &[("content-type", "application/json")],
            body.as_bytes(),
        );
        assert_eq!(resp.status, 200);
        let id = resp.header("x-tokentap-request-id").expect("request id").to_string();
        while feed.next_record_for("/v1/chat/completions")["request_id"] != id.as_str() {}
        id
    };
    let chat_id = chat(true);
    let non_streaming_id = chat(false);
    run_sdk_script("agent_openai_loop.py", &["--base-url", &base]);
    let agent_turn = loop {
        let turn = feed.next_turn();
        if turn["totals"]["tool_calls"].as_u64().unwrap_or(0) > 0 {
            break turn;
        }
    };
    let voice = run_sdk_script("voice_turn.py", &["--base-url", &base]);
    let spoken = voice["spoken"].as_array().expect("spoken").len();
    let voice_turn = loop {
        let turn = feed.next_turn();
        if turn["voice"]["speech"].as_array().is_some_and(|s| s.len() == spoken) {
            break turn;
        }
    };
    run_sdk_script("realtime_openai.py", &["--base-url", &base]);
    let realtime_id = loop {
        let r = feed.next_record();
        if r["path"].as_str().is_some_and(|p| p.starts_with("/v1/realtime")) {
            break r["request_id"].as_str().unwrap().to_string();
        }
    };
    EveryKind { chat_id, non_streaming_id, agent_turn, voice, voice_turn, realtime_id }
}
