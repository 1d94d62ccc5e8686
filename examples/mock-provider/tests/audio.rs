//! The audio endpoints over real sockets (port 0): multipart uploads in, transcripts and chunked
//! PCM / WAV / SSE out, errors and the request counters. No sleeps: the pacing headers are set
//! to ~0 and the counters are read after the bodies end.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokentap_mock::{MockConfig, MockServer};
use tokio::net::TcpStream;

async fn start() -> SocketAddr {
    let server = MockServer::bind("127.0.0.1:0".parse().unwrap(), MockConfig::default()).await.unwrap();
    let addr = server.local_addr();
    tokio::spawn(server.run());
    addr
}

async fn send(addr: SocketAddr, request: Request<Full<Bytes>>) -> Response<Incoming> {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    sender.send_request(request).await.unwrap()
}

const FAST_STT: [(&str, &str); 2] = [("x-mock-stt-first-ms", "0"), ("x-mock-stt-delta-ms", "0")];
const FAST_TTS: [(&str, &str); 2] = [("x-mock-tts-first-ms", "0"), ("x-mock-tts-rtf", "0.0001")];

fn request(path: &str, content_type: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Request<Full<Bytes>> {
    let mut builder = Request::post(path).header("host", "mock").header("content-type", content_type);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Full::new(Bytes::from(body))).unwrap()
}

/// A 16 kHz mono 16-bit WAV file of `ms` milliseconds of silence.
fn wav(ms: u32) -> Vec<u8> {
    let data = ms * 32;
    let mut file = b"RIFF".to_vec();
    file.extend_from_slice(&(36 + data).to_le_bytes());
    file.extend_from_slice(b"WAVEfmt \x10\0\0\0\x01\0\x01\0");
    file.extend_from_slice(&16_000u32.to_le_bytes());
    file.extend_from_slice(&32_000u32.to_le_bytes());
    file.extend_from_slice(b"\x02\0\x10\0data");
    file.extend_from_slice(&data.to_le_bytes());
    file.resize(file.len() + data as usize, 0);
    file
}

/// A multipart form the way the SDK sends it: the fields, then the file (if any).
fn form(fields: &[(&str, &str)], file: Option<&[u8]>) -> (String, Vec<u8>) {
    let boundary = "3f1c0e9d2b7a4c5e8f6a";
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes(),
        );
    }
    if let Some(file) = file {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"speech.wav\"\r\n\
                 Content-Type: audio/wav\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(file);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

async fn transcribe(addr: SocketAddr, fields: &[(&str, &str)], headers: &[(&str, &str)]) -> Response<Incoming> {
    let (content_type, body) = form(fields, Some(&wav(1000)));
    let headers: Vec<(&str, &str)> = FAST_STT.iter().chain(headers).copied().collect();
    send(addr, request("/v1/audio/transcriptions", &content_type, &headers, body)).await
}

async fn speak(addr: SocketAddr, body: Value, headers: &[(&str, &str)]) -> Response<Incoming> {
    let headers: Vec<(&str, &str)> = FAST_TTS.iter().chain(headers).copied().collect();
    send(addr, request("/v1/audio/speech", "application/json", &headers, body.to_string().into_bytes())).await
}

async fn frames(response: Response<Incoming>) -> Vec<Bytes> {
    let mut body = response.into_body();
    let mut frames = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            frames.push(data);
        }
    }
    frames
}

async fn text_of(response: Response<Incoming>) -> String {
    String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

async fn json_of(response: Response<Incoming>) -> Value {
    serde_json::from_str(&text_of(response).await).unwrap()
}

fn sse_events(frames: &[Bytes]) -> Vec<Value> {
    let text = String::from_utf8(frames.concat()).unwrap();
    text.split("\n\n")
        .filter(|event| !event.is_empty())
        .map(|event| serde_json::from_str(event.strip_prefix("data: ").expect("data line")).unwrap())
        .collect()
}

#[tokio::test]
async fn transcription_json_text_and_verbose() {
    let addr = start().await;
    let response = transcribe(addr, &[("model", "gpt-4o-transcribe")], &[("x-mock-transcript", "Hello there.")]).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert!(response.headers()["x-request-id"].to_str().unwrap().starts_with("req_"));
    let body = json_of(response).await;
    assert_eq!(body["text"], "Hello there.");
    assert_eq!(body["usage"]["type"], "tokens");
    assert_eq!(body["usage"]["input_token_details"]["audio_tokens"], 10, "1 s of WAV");
    assert_eq!(body["usage"]["output_tokens"], 2);

    let response = transcribe(addr, &[("model", "whisper-1"), ("response_format", "text")], &[]).await;
    assert_eq!(response.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(text_of(response).await, "What is the weather in Paris today?\n");

    let verbose = transcribe(addr, &[("model", "whisper-1"), ("response_format", "verbose_json")], &[]).await;
    let body = json_of(verbose).await;
    assert_eq!(body["duration"], 1.0);
    assert_eq!(body["usage"], json!({"type": "duration", "seconds": 1}));

    let (content_type, body) = form(&[("model", "whisper-1")], Some(&wav(500)));
    let translation = send(addr, request("/v1/audio/translations", &content_type, &FAST_STT, body)).await;
    assert_eq!(json_of(translation).await["usage"]["seconds"], 1);
}

#[tokio::test]
async fn streamed_transcription_is_one_delta_per_word_then_done() {
    let addr = start().await;
    let response = transcribe(addr, &[("model", "gpt-4o-mini-transcribe"), ("stream", "true")], &[]).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert!(response.headers().get("content-length").is_none());
    let frames = frames(response).await;
    let events = sse_events(&frames);
    assert_eq!(events.len(), 8, "7 words and the done event");
    let deltas: String = events[..7].iter().map(|e| e["delta"].as_str().unwrap()).collect();
    assert_eq!(deltas, "What is the weather in Paris today?");
    assert_eq!(events[7]["type"], "transcript.text.done");
    assert_eq!(events[7]["text"], deltas);
    assert_eq!(events[7]["usage"]["total_tokens"], 17);
    assert!(!String::from_utf8(frames.concat()).unwrap().contains("[DONE]"));

    // whisper-1 ignores `stream`.
    let response = transcribe(addr, &[("model", "whisper-1"), ("stream", "true")], &[]).await;
    assert_eq!(response.headers()["content-type"], "application/json");
}

#[tokio::test]
async fn speech_pcm_wav_and_sse() {
    let addr = start().await;
    let body = json!({"model": "gpt-4o-mini-tts", "voice": "alloy", "input": "Hi", "response_format": "pcm"});
    let response = speak(addr, body.clone(), &[("x-mock-tts-audio-ms", "300"), ("x-mock-tts-silence-ms", "200")]).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/octet-stream");
    assert!(response.headers().get("content-length").is_none(), "chunked, as a stream");
    let pcm = frames(response).await.concat();
    assert_eq!(pcm.len(), 24_000, "500 ms of 24 kHz 16-bit mono");
    assert!(pcm[..9600].iter().all(|b| *b == 0), "200 ms of silence");
    assert_ne!(&pcm[9600..9602], &[0, 0], "then speech");

    let wav = speak(addr, with(&body, "response_format", json!("wav")), &[("x-mock-tts-audio-ms", "300")]).await;
    assert_eq!(wav.headers()["content-type"], "audio/wav");
    let file = frames(wav).await.concat();
    assert_eq!(file.len(), 44 + 24_000);
    assert_eq!(&file[..4], b"RIFF");
    assert_eq!(&file[40..44], &[0xFF; 4]);

    let sse = speak(addr, with(&body, "stream_format", json!("sse")), &[("x-mock-tts-audio-ms", "300")]).await;
    assert_eq!(sse.headers()["content-type"], "text/event-stream");
    let events = sse_events(&frames(sse).await);
    assert_eq!(events.len(), 6);
    assert!(events[..5]
        .iter()
        .all(|e| e["type"] == "speech.audio.delta" && e["audio"].as_str().unwrap().len() == 6400));
    assert_eq!(
        events[5],
        json!({"type": "speech.audio.done",
        "usage": {"input_tokens": 1, "output_tokens": 25, "total_tokens": 26}})
    );
}

fn with(body: &Value, key: &str, value: Value) -> Value {
    let mut body = body.clone();
    body[key] = value;
    body
}

#[tokio::test]
async fn refusals_are_openai_shaped_and_counted() {
    let addr = start().await;
    let speech = json!({"model": "tts-1", "voice": "alloy", "input": "Hello"});
    let mp3 = speak(addr, speech.clone(), &[]).await;
    assert_eq!(mp3.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        json_of(mp3).await,
        json!({"error": {"message": "the mock provider produces pcm and wav audio only",
            "type": "invalid_request_error", "param": "response_format", "code": null}})
    );
    let no_voice = speak(addr, json!({"model": "tts-1", "input": "Hello", "response_format": "pcm"}), &[]).await;
    assert_eq!(json_of(no_voice).await["error"]["param"], "voice");

    let (content_type, body) = form(&[("model", "whisper-1")], None);
    let no_file = send(addr, request("/v1/audio/transcriptions", &content_type, &[], body)).await;
    assert_eq!(no_file.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        json_of(no_file).await,
        json!({"error": {"message": "Missing required parameter: 'file'.", "type": "invalid_request_error",
            "param": "file", "code": null}})
    );
    let not_a_form = send(addr, request("/v1/audio/transcriptions", "application/json", &[], b"{}".to_vec())).await;
    assert_eq!(not_a_form.status(), StatusCode::BAD_REQUEST);
    let typo = speak(addr, with(&speech, "response_format", json!("pcm")), &[("x-mock-tts-chunk-ms", "soon")]).await;
    assert_eq!(typo.status(), StatusCode::BAD_REQUEST);

    // x-mock-status answers as for the text endpoints.
    let limited = transcribe(addr, &[("model", "gpt-4o-transcribe")], &[("x-mock-status", "429")]).await;
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.headers()["retry-after"], "1");
    assert_eq!(json_of(limited).await["error"]["code"], "rate_limit_exceeded");

    let stats =
        json_of(send(addr, Request::get("/_mock/stats").header("host", "mock").body(Full::default()).unwrap()).await)
            .await;
    assert_eq!(stats["requests"], 6);
    assert_eq!(stats["completed"], 6);
    assert_eq!(stats["in_flight"], 0);
}

#[tokio::test]
async fn reset_at_aborts_the_audio_stream() {
    let addr = start().await;
    let body = json!({"model": "tts-1", "voice": "alloy", "input": "Hello there", "response_format": "pcm"});
    let response = speak(addr, body, &[("x-mock-reset-at", "1")]).await;
    let mut body = response.into_body();
    let mut bytes = 0;
    let ended = loop {
        match body.frame().await {
            Some(Ok(frame)) => bytes += frame.into_data().map_or(0, |data| data.len()),
            Some(Err(_)) => break "aborted",
            None => break "clean",
        }
    };
    assert_eq!((bytes, ended), (2 * 4800, "aborted"), "two 100 ms chunks, then the abort");
    let stats = json_of(
        send(addr, Request::get("/_mock/wait?reset=1").header("host", "mock").body(Full::default()).unwrap()).await,
    )
    .await;
    assert_eq!(stats["reset"], 1);
}
