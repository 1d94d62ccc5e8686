//! `/v1/realtime`: the OpenAI Realtime protocol over WebSocket, enough for the official SDKs'
//! realtime clients and for tokentap's session analysis.
//!
//! - On connect: `session.created`; `session.update` is merged and answered with
//!   `session.updated` (audio formats, turn detection, tools).
//! - Server VAD on the appended audio, by energy: 10 ms windows of 16-bit PCM, loud at −40 dBFS or
//!   more. Speech starts at the first loud window (`speech_started.audio_start_ms` = that position
//!   less `prefix_padding_ms`, as OpenAI reports it) and stops after `silence_duration_ms` of
//!   quiet windows (`speech_stopped.audio_end_ms` = the end of that silence). Then
//!   `input_audio_buffer.committed`, `conversation.item.added` and, unless turn detection has
//!   `create_response: false`, a response. Speech that starts while a response is open cancels it
//!   (`response.done` with status `cancelled`, reason `turn_detected`).
//! - A response follows an absolute schedule from the moment it is triggered (the event that
//!   decided it was read): `response.created` at 0, the first audio delta at `first_audio_ms`,
//!   then `delta_ms` apart, one delta per `chunk_audio_ms` of audio until `audio_ms`, the
//!   transcript delta 1 ms after each audio delta, then the done events. When the session has
//!   tools, the first response after a user item in the session is a function call to the first
//!   tool instead (arguments done at `first_audio_ms`); after the client's
//!   `function_call_output` and `response.create`, the answer is audio.
//! - With `audio.input.transcription` in the session, each committed user item is followed by
//!   `conversation.item.input_audio_transcription.completed` with [`INPUT_TRANSCRIPT`] (the mock
//!   recognises no speech; the text only lets a page show what "you said").
//! - `response.cancel` ends the open response at once (`cancelled`, `client_cancelled`);
//!   `conversation.item.truncate` is acknowledged with `conversation.item.truncated`.
//!
//! The schedule is read from the URL query (`mock_first_audio_ms`, `mock_delta_ms`,
//! `mock_audio_ms`, `mock_chunk_audio_ms`), so a test states it and checks tokentap against it.

use std::collections::VecDeque;

use futures_util::{SinkExt, StreamExt};
use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::time::{sleep_until, Duration, Instant};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Message, Role};
use tokio_tungstenite::WebSocketStream;

use crate::body::MockBody;

/// What the mock's input transcription "hears", whatever the audio.
pub const INPUT_TRANSCRIPT: &str = "What is the weather in Paris today?";

/// The response schedule (ms from the trigger).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RealtimeSchedule {
    pub first_audio_ms: u64,
    pub delta_ms: u64,
    pub audio_ms: u64,
    pub chunk_audio_ms: u64,
}

impl Default for RealtimeSchedule {
    fn default() -> Self {
        Self { first_audio_ms: 300, delta_ms: 50, audio_ms: 1_000, chunk_audio_ms: 100 }
    }
}

impl RealtimeSchedule {
    fn from_query(query: &str) -> Self {
        let mut s = Self::default();
        for pair in query.split('&') {
            let Some((k, v)) = pair.split_once('=') else { continue };
            let Ok(v) = v.parse::<u64>() else { continue };
            match k {
                "mock_first_audio_ms" => s.first_audio_ms = v.min(60_000),
                "mock_delta_ms" => s.delta_ms = v.min(10_000),
                "mock_audio_ms" => s.audio_ms = v.clamp(10, 600_000),
                "mock_chunk_audio_ms" => s.chunk_audio_ms = v.clamp(10, 10_000),
                _ => {}
            }
        }
        s
    }
}

/// Whether a request asks for a WebSocket upgrade.
pub(crate) fn is_upgrade(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Answers the upgrade with 101 and runs the session on the upgraded connection.
pub(crate) fn respond(mut request: Request<Incoming>) -> Response<MockBody> {
    let Some(key) = request.headers().get("sec-websocket-key").map(|k| derive_accept_key(k.as_bytes())) else {
        return plain(StatusCode::BAD_REQUEST, "missing sec-websocket-key");
    };
    let schedule = RealtimeSchedule::from_query(request.uri().query().unwrap_or_default());
    let model = request
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .find_map(|p| p.strip_prefix("model="))
        .unwrap_or("gpt-realtime")
        .to_string();
    let upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        if let Ok(upgraded) = upgrade.await {
            let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
            Session::new(schedule, model).run(ws).await;
        }
    });
    let mut response = Response::new(MockBody::full(bytes::Bytes::new(), None));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = response.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(v) = HeaderValue::from_str(&key) {
        h.insert("sec-websocket-accept", v);
    }
    response
}

fn plain(status: StatusCode, message: &'static str) -> Response<MockBody> {
    let mut r = Response::new(MockBody::full(bytes::Bytes::from_static(message.as_bytes()), None));
    *r.status_mut() = status;
    r
}

/// Energy VAD state over the appended audio.
#[derive(Default)]
struct Vad {
    /// Samples appended so far (24 kHz 16-bit mono unless the session says otherwise).
    samples: u64,
    /// Partial 10 ms window.
    window: Vec<i16>,
    in_speech: bool,
    quiet_ms: u64,
}

const THRESHOLD: f64 = 0.01; // −40 dBFS as RMS of full scale

enum VadEvent {
    Started { audio_start_ms: u64 },
    Stopped { audio_end_ms: u64 },
}

impl Vad {
    fn push(&mut self, pcm: &[u8], rate: u64, silence_ms: u64, padding_ms: u64, out: &mut Vec<VadEvent>) {
        let per_window = (rate / 100).max(1) as usize;
        for pair in pcm.chunks_exact(2) {
            self.window.push(i16::from_le_bytes([pair[0], pair[1]]));
            if self.window.len() < per_window {
                continue;
            }
            let energy = self.window.iter().map(|&s| (f64::from(s) / 32768.0).powi(2)).sum::<f64>() / per_window as f64;
            let start_ms = self.samples * 1000 / rate;
            self.samples += per_window as u64;
            self.window.clear();
            let end_ms = self.samples * 1000 / rate;
            if energy.sqrt() >= THRESHOLD {
                self.quiet_ms = 0;
                if !self.in_speech {
                    self.in_speech = true;
                    out.push(VadEvent::Started { audio_start_ms: start_ms.saturating_sub(padding_ms) });
                }
            } else if self.in_speech {
                self.quiet_ms += 10;
                if self.quiet_ms >= silence_ms {
                    self.in_speech = false;
                    self.quiet_ms = 0;
                    out.push(VadEvent::Stopped { audio_end_ms: end_ms });
                }
            }
        }
    }
}

struct Open {
    id: String,
    /// Scheduled events of this response, in time order.
    queue: VecDeque<(Instant, Value)>,
}

struct Session {
    schedule: RealtimeSchedule,
    config: Value,
    vad: Vad,
    open: Option<Open>,
    counter: u64,
    /// The newest conversation item is the user's (speech or message), not a tool output.
    last_item_is_user: bool,
    call_pending: Option<String>,
    /// The one function call of the session was made.
    tool_called: bool,
}

fn num(v: Option<&Value>, default: u64) -> u64 {
    v.and_then(Value::as_u64).unwrap_or(default)
}

impl Session {
    fn new(schedule: RealtimeSchedule, model: String) -> Self {
        let config = json!({
            "type": "realtime",
            "object": "realtime.session",
            "id": "sess_mock",
            "model": model,
            "output_modalities": ["audio"],
            "tools": [],
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": 24000},
                    "turn_detection": {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500, "create_response": true, "interrupt_response": true}
                },
                "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "alloy"}
            }
        });
        Self {
            schedule,
            config,
            vad: Vad::default(),
            open: None,
            counter: 0,
            last_item_is_user: false,
            call_pending: None,
            tool_called: false,
        }
    }

    fn next_id(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}_{:04}", self.counter)
    }

    fn event(&mut self, mut v: Value) -> Value {
        v["event_id"] = Value::String(self.next_id("event"));
        v
    }

    async fn run<S>(mut self, ws: WebSocketStream<S>)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let (mut tx, mut rx) = ws.split();
        let created = self.event(json!({"type": "session.created", "session": self.config.clone()}));
        if tx.send(Message::text(created.to_string())).await.is_err() {
            return;
        }
        loop {
            let next_at = self.open.as_ref().and_then(|o| o.queue.front().map(|e| e.0));
            let out: Vec<Value> = tokio::select! {
                message = rx.next() => match message {
                    Some(Ok(Message::Text(text))) => self.on_client(&text, Instant::now()),
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                    Some(Ok(_)) => Vec::new(),
                },
                _ = sleep_until(next_at.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))), if next_at.is_some() => {
                    self.due()
                }
            };
            for v in out {
                if tx.send(Message::text(v.to_string())).await.is_err() {
                    return;
                }
            }
        }
        let _ = tx.close().await;
    }

    /// Scheduled events that are due.
    fn due(&mut self) -> Vec<Value> {
        let now = Instant::now();
        let mut out = Vec::new();
        if let Some(open) = self.open.as_mut() {
            while open.queue.front().is_some_and(|e| e.0 <= now) {
                out.push(open.queue.pop_front().expect("checked").1);
            }
            if open.queue.is_empty() {
                self.open = None;
            }
        }
        out.into_iter().map(|v| self.event(v)).collect()
    }

    fn on_client(&mut self, text: &str, now: Instant) -> Vec<Value> {
        let Ok(v) = serde_json::from_str::<Value>(text) else {
            return vec![self.event(json!({"type": "error", "error": {"type": "invalid_request_error", "code": "invalid_json", "message": "not JSON"}}))];
        };
        let mut out = Vec::new();
        match v.get("type").and_then(Value::as_str).unwrap_or_default() {
            "session.update" => {
                if let Some(s) = v.get("session") {
                    merge(&mut self.config, s);
                }
                out.push(json!({"type": "session.updated", "session": self.config.clone()}));
            }
            "input_audio_buffer.append" => {
                use base64::Engine as _;
                let audio = v.get("audio").and_then(Value::as_str).unwrap_or_default();
                let pcm = base64::engine::general_purpose::STANDARD.decode(audio).unwrap_or_default();
                let input = &self.config["audio"]["input"];
                let rate = num(input["format"].get("rate"), 24_000);
                let td = &input["turn_detection"];
                let vad_on = td.is_object();
                let transcribe = input["transcription"].is_object();
                if vad_on {
                    let silence = num(td.get("silence_duration_ms"), 500);
                    let padding = num(td.get("prefix_padding_ms"), 300);
                    let create = td.get("create_response").and_then(Value::as_bool).unwrap_or(true);
                    let mut events = Vec::new();
                    self.vad.push(&pcm, rate, silence, padding, &mut events);
                    for e in events {
                        match e {
                            VadEvent::Started { audio_start_ms } => {
                                let item = self.next_id("item");
                                out.push(json!({"type": "input_audio_buffer.speech_started", "audio_start_ms": audio_start_ms, "item_id": item}));
                                if let Some(cancelled) = self.cancel("turn_detected") {
                                    out.push(cancelled);
                                }
                            }
                            VadEvent::Stopped { audio_end_ms } => {
                                let item = self.next_id("item");
                                out.push(json!({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": audio_end_ms, "item_id": item}));
                                out.push(json!({"type": "input_audio_buffer.committed", "item_id": item, "previous_item_id": null}));
                                out.push(json!({"type": "conversation.item.added", "item": {"id": item, "type": "message", "role": "user", "content": [{"type": "input_audio"}]}}));
                                if transcribe {
                                    out.push(json!({"type": "conversation.item.input_audio_transcription.completed", "item_id": item, "content_index": 0, "transcript": INPUT_TRANSCRIPT}));
                                }
                                self.last_item_is_user = true;
                                if create {
                                    self.start_response(now);
                                }
                            }
                        }
                    }
                } else {
                    self.vad.samples += pcm.len() as u64 / 2;
                }
            }
            "input_audio_buffer.commit" => {
                let item = self.next_id("item");
                out.push(json!({"type": "input_audio_buffer.committed", "item_id": item}));
                self.last_item_is_user = true;
            }
            "conversation.item.create" => {
                let item = v.get("item").cloned().unwrap_or(Value::Null);
                let is_output = item.get("type").and_then(Value::as_str) == Some("function_call_output");
                self.last_item_is_user = !is_output;
                if is_output {
                    self.call_pending = None;
                }
                let mut item = item;
                if item.get("id").is_none() {
                    item["id"] = Value::String(self.next_id("item"));
                }
                out.push(json!({"type": "conversation.item.added", "item": item}));
            }
            "conversation.item.truncate" => {
                out.push(json!({"type": "conversation.item.truncated", "item_id": v.get("item_id"), "content_index": v.get("content_index"), "audio_end_ms": v.get("audio_end_ms")}));
            }
            "response.create" => self.start_response(now),
            "response.cancel" => {
                if let Some(done) = self.cancel("client_cancelled") {
                    out.push(done);
                }
            }
            "output_audio_buffer.clear" => out.push(json!({"type": "output_audio_buffer.cleared"})),
            _ => {}
        }
        // Anything of the response that is due already goes out in order after the answer.
        let mut out: Vec<Value> = out.into_iter().map(|v| self.event(v)).collect();
        out.extend(self.due());
        out
    }

    /// Ends the open response now: its remaining events are dropped, `response.done` cancelled.
    fn cancel(&mut self, reason: &str) -> Option<Value> {
        let open = self.open.take()?;
        Some(
            json!({"type": "response.done", "response": {"id": open.id, "object": "realtime.response", "status": "cancelled", "status_details": {"type": "cancelled", "reason": reason}, "output": [], "usage": usage(0)}}),
        )
    }

    fn start_response(&mut self, at: Instant) {
        if let Some(open) = self.open.take() {
            // A new response while one is open: the old one finishes at once.
            let mut open = open;
            open.queue.clear();
        }
        let id = self.next_id("resp");
        let item_id = self.next_id("item");
        let s = self.schedule;
        let ms = |m: u64| at + Duration::from_millis(m);
        let mut q: VecDeque<(Instant, Value)> = VecDeque::new();
        q.push_back((at, json!({"type": "response.created", "response": {"id": id, "object": "realtime.response", "status": "in_progress", "output": []}})));
        let tool = self.config["tools"]
            .as_array()
            .and_then(|t| t.first())
            .and_then(|t| t.get("name"))
            .and_then(Value::as_str)
            .map(str::to_string);
        match tool.filter(|_| self.last_item_is_user && self.call_pending.is_none() && !self.tool_called) {
            Some(name) => {
                let call_id = format!("call_{id}");
                self.tool_called = true;
                self.call_pending = Some(call_id.clone());
                let item = json!({"id": item_id, "type": "function_call", "status": "completed", "call_id": call_id, "name": name, "arguments": "{}"});
                q.push_back((ms(1), json!({"type": "response.output_item.added", "response_id": id, "output_index": 0, "item": {"id": item_id, "type": "function_call", "status": "in_progress", "call_id": call_id, "name": name, "arguments": ""}})));
                q.push_back((ms(s.first_audio_ms), json!({"type": "response.function_call_arguments.delta", "response_id": id, "item_id": item_id, "output_index": 0, "call_id": call_id, "delta": "{}"})));
                q.push_back((ms(s.first_audio_ms), json!({"type": "response.function_call_arguments.done", "response_id": id, "item_id": item_id, "output_index": 0, "call_id": call_id, "name": name, "arguments": "{}"})));
                q.push_back((
                    ms(s.first_audio_ms + 1),
                    json!({"type": "response.output_item.done", "response_id": id, "output_index": 0, "item": item}),
                ));
                q.push_back((ms(s.first_audio_ms + 2), json!({"type": "response.done", "response": {"id": id, "object": "realtime.response", "status": "completed", "output": [item], "usage": usage(0)}})));
            }
            None => {
                use base64::Engine as _;
                let item = json!({"id": item_id, "type": "message", "role": "assistant", "status": "completed", "content": [{"type": "output_audio", "transcript": "Hello."}]});
                q.push_back((ms(1), json!({"type": "response.output_item.added", "response_id": id, "output_index": 0, "item": {"id": item_id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}})));
                q.push_back((ms(2), json!({"type": "response.content_part.added", "response_id": id, "item_id": item_id, "output_index": 0, "content_index": 0, "part": {"type": "audio", "transcript": ""}})));
                let chunks = s.audio_ms.div_ceil(s.chunk_audio_ms);
                for i in 0..chunks {
                    let at_ms = s.first_audio_ms + i * s.delta_ms;
                    let audio_ms = s.chunk_audio_ms.min(s.audio_ms - i * s.chunk_audio_ms);
                    // A quiet 440 Hz tone at 24 kHz, 16-bit mono.
                    let samples = (audio_ms * 24) as usize;
                    let mut pcm = Vec::with_capacity(samples * 2);
                    for n in 0..samples {
                        let t = (i as usize * (s.chunk_audio_ms as usize * 24) + n) as f64 / 24_000.0;
                        let v = ((t * 440.0 * std::f64::consts::TAU).sin() * 3000.0) as i16;
                        pcm.extend_from_slice(&v.to_le_bytes());
                    }
                    let delta = base64::engine::general_purpose::STANDARD.encode(&pcm);
                    q.push_back((ms(at_ms), json!({"type": "response.output_audio.delta", "response_id": id, "item_id": item_id, "output_index": 0, "content_index": 0, "delta": delta})));
                    if i == 0 {
                        q.push_back((ms(at_ms + 1), json!({"type": "response.output_audio_transcript.delta", "response_id": id, "item_id": item_id, "output_index": 0, "content_index": 0, "delta": "Hello."})));
                    }
                }
                let end = s.first_audio_ms + chunks.saturating_sub(1) * s.delta_ms + 2;
                q.push_back((ms(end), json!({"type": "response.output_audio.done", "response_id": id, "item_id": item_id, "output_index": 0, "content_index": 0})));
                q.push_back((ms(end), json!({"type": "response.output_audio_transcript.done", "response_id": id, "item_id": item_id, "output_index": 0, "content_index": 0, "transcript": "Hello."})));
                q.push_back((
                    ms(end + 1),
                    json!({"type": "response.output_item.done", "response_id": id, "output_index": 0, "item": item}),
                ));
                q.push_back((ms(end + 2), json!({"type": "response.done", "response": {"id": id, "object": "realtime.response", "status": "completed", "output": [item], "usage": usage(s.audio_ms / 50)}})));
            }
        }
        self.last_item_is_user = false;
        self.open = Some(Open { id, queue: q });
    }
}

fn usage(audio_tokens: u64) -> Value {
    json!({
        "total_tokens": 20 + audio_tokens + 5,
        "input_tokens": 20,
        "output_tokens": audio_tokens + 5,
        "input_token_details": {"text_tokens": 10, "audio_tokens": 10, "cached_tokens": 0},
        "output_token_details": {"text_tokens": 5, "audio_tokens": audio_tokens}
    })
}

/// Merges a `session.update`'s session into the config (objects recursively, the rest replaced).
fn merge(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(ms: usize, amplitude: f64) -> Vec<u8> {
        (0..ms * 24).flat_map(|n| (((n as f64 / 24.0).sin() * amplitude) as i16).to_le_bytes()).collect()
    }

    #[test]
    fn energy_vad_reports_padding_and_silence_like_openai() {
        let mut vad = Vad::default();
        let mut out = Vec::new();
        let mut audio = tone(500, 0.0);
        audio.extend(tone(1000, 8000.0));
        audio.extend(tone(800, 0.0));
        // Split at odd places: windows carry over.
        for piece in audio.chunks(4801) {
            vad.push(piece, 24_000, 500, 300, &mut out);
        }
        let got: Vec<(bool, u64)> = out
            .iter()
            .map(|e| match e {
                VadEvent::Started { audio_start_ms } => (true, *audio_start_ms),
                VadEvent::Stopped { audio_end_ms } => (false, *audio_end_ms),
            })
            .collect();
        assert_eq!(got, vec![(true, 200), (false, 2000)]);
    }

    #[test]
    fn schedule_from_the_query() {
        let s = RealtimeSchedule::from_query("model=x&mock_first_audio_ms=400&mock_delta_ms=20");
        assert_eq!((s.first_audio_ms, s.delta_ms, s.audio_ms), (400, 20, 1_000));
    }
}
