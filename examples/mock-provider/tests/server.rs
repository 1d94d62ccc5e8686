//! End-to-end tests of the mock over real sockets (port 0), with hyper's client connections.
//! No fixed ports, no sleeps: timing knobs are set to ~0 and synchronisation uses `/_mock/wait`.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokentap_mock::{vocabulary, MockConfig, MockServer};
use tokio::net::TcpStream;

async fn start() -> SocketAddr {
    let config = MockConfig { ttft_ms: 1, itl_ms: 0, tokens: 8, ..MockConfig::default() };
    let server = MockServer::bind("127.0.0.1:0".parse().unwrap(), config).await.unwrap();
    let addr = server.local_addr();
    tokio::spawn(server.run());
    addr
}

fn post(path: &str, headers: &[(&str, &str)], body: Value) -> Request<Full<Bytes>> {
    let mut builder = Request::post(path).header("host", "mock").header("content-type", "application/json");
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    builder.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

fn get(path: &str) -> Request<Full<Bytes>> {
    Request::get(path).header("host", "mock").body(Full::new(Bytes::new())).unwrap()
}

/// No Nagle: hyper writes headers and body separately, and a delayed ACK would add 40 ms.
async fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// Sends one request on a fresh HTTP/1.1 connection.
async fn send_h1(addr: SocketAddr, request: Request<Full<Bytes>>) -> Response<Incoming> {
    let io = TokioIo::new(connect(addr).await);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(connection);
    sender.send_request(request).await.unwrap()
}

/// Sends one request on a fresh HTTP/2 prior-knowledge (h2c) connection.
async fn send_h2(addr: SocketAddr, request: Request<Full<Bytes>>) -> Response<Incoming> {
    let io = TokioIo::new(connect(addr).await);
    let (mut sender, connection) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await.unwrap();
    tokio::spawn(connection);
    sender.send_request(request).await.unwrap()
}

/// Reads the body frame by frame: Ok(frames) on a clean end, Err(frames so far) on an abnormal end.
async fn frames(response: Response<Incoming>) -> Result<Vec<Bytes>, Vec<Bytes>> {
    let mut body = response.into_body();
    let mut frames = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    frames.push(data);
                }
            }
            Err(_) => return Err(frames),
        }
    }
    Ok(frames)
}

fn sse_data(frames: &[Bytes]) -> Vec<String> {
    let all: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
    String::from_utf8(all)
        .unwrap()
        .replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|block| block.lines().find_map(|l| l.strip_prefix("data: ")).map(str::to_owned))
        .collect()
}

async fn json_of(response: Response<Incoming>) -> Value {
    serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap()
}

#[tokio::test]
async fn chat_stream_over_h1_is_chunked_one_frame_per_event_and_complete() {
    let addr = start().await;
    let response = send_h1(addr, post("/v1/chat/completions", &[], json!({"model": "gpt-x", "stream": true}))).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().get("content-length").is_none());
    assert_eq!(response.headers()["cache-control"], "no-cache");
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let frames = frames(response).await.expect("clean end");
    // role chunk + 8 content + finish + [DONE], each its own frame.
    assert_eq!(frames.len(), 11);
    assert!(frames.iter().all(|f| f.ends_with(b"\n\n")));
    let data = sse_data(&frames);
    assert_eq!(data.last().unwrap(), "[DONE]");
    let text: String = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, vocabulary::answer_text(0, 8));
    assert!(data.iter().all(|d| d == "[DONE]" || d.contains("\"model\":\"gpt-x\"")));
}

#[tokio::test]
async fn identical_requests_give_identical_bytes() {
    let addr = start().await;
    let body = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let headers = [("x-mock-scenario", "reasoning_tool"), ("x-mock-jitter-ms", "1")];
    let a = frames(send_h1(addr, post("/v1/messages", &headers, body.clone())).await).await.unwrap();
    let b = frames(send_h2(addr, post("/v1/messages", &headers, body)).await).await.unwrap();
    assert_eq!(a, b);
}

#[tokio::test]
async fn reset_is_an_abnormal_end_on_h1_and_h2_and_is_counted() {
    let addr = start().await;
    let request = || post("/v1/chat/completions", &[("x-mock-reset-at", "2")], json!({"model": "m", "stream": true}));
    let partial = frames(send_h1(addr, request()).await).await.expect_err("h1 must end abnormally");
    // role chunk + content events 0, 1, 2 arrived before the abort.
    assert_eq!(sse_data(&partial).len(), 4);
    let partial = frames(send_h2(addr, request()).await).await.expect_err("h2 must end abnormally");
    assert_eq!(sse_data(&partial).len(), 4);
    let stats = json_of(send_h1(addr, get("/_mock/wait?reset=2&timeout_ms=10000")).await).await;
    assert_eq!(stats["reset"], 2);
    assert_eq!(stats["completed"], 0);
}

#[tokio::test]
async fn client_going_away_is_counted_as_cancelled_promptly() {
    let addr = start().await;
    // A first content event a minute away: only a prompt disconnect detection can count it.
    let io = TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
    let connection = tokio::spawn(connection);
    let request = post("/v1/messages", &[("x-mock-ttft-ms", "60000")], json!({"model": "m", "stream": true}));
    let response = sender.send_request(request).await.unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(first.starts_with(b"event: message_start"));
    drop(body);
    drop(sender);
    connection.abort();

    let response = send_h1(addr, get("/_mock/wait?cancelled=1&timeout_ms=20000")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let stats = json_of(response).await;
    assert_eq!((stats["requests"].as_u64(), stats["cancelled"].as_u64()), (Some(1), Some(1)));
    assert_eq!(stats["in_flight"], 0);
}

#[tokio::test]
async fn wait_times_out_with_408() {
    let addr = start().await;
    let response = send_h1(addr, get("/_mock/wait?completed=1&timeout_ms=1")).await;
    assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
}

#[tokio::test]
async fn mock_status_gives_provider_shaped_errors() {
    let addr = start().await;
    let response =
        send_h1(addr, post("/v1/chat/completions", &[("x-mock-status", "429")], json!({"model": "m", "stream": true})))
            .await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "1");
    assert_eq!(json_of(response).await["error"]["code"], "rate_limit_exceeded");

    let response = send_h1(addr, post("/v1/messages", &[("x-mock-status", "529")], json!({"model": "m"}))).await;
    assert_eq!(response.status().as_u16(), 529);
    let body = json_of(response).await;
    assert_eq!((body["type"].as_str(), body["error"]["type"].as_str()), (Some("error"), Some("overloaded_error")));
}

#[tokio::test]
async fn midstream_error_then_clean_end() {
    let addr = start().await;
    let response = send_h1(
        addr,
        post("/v1/messages", &[("x-mock-scenario", "error_midstream")], json!({"model": "m", "stream": true})),
    )
    .await;
    let frames = frames(response).await.expect("clean end after the error event");
    let last = String::from_utf8(frames.last().unwrap().to_vec()).unwrap();
    assert!(last.starts_with("event: error\n"), "{last}");
    assert!(!frames.iter().any(|f| f.starts_with(b"event: message_stop")));
}

#[tokio::test]
async fn last_request_records_headers_and_body_hash() {
    let addr = start().await;
    let body = json!({"model": "m", "messages": []});
    let response = send_h1(
        addr,
        post("/v1/chat/completions?x=1", &[("x-custom", "kept"), ("authorization", "Bearer t")], body.clone()),
    )
    .await;
    // The route ignores the query; non-streaming bodies have a content-length.
    assert!(response.headers().get("content-length").is_some());
    let completion = json_of(response).await;
    assert_eq!(completion["object"], "chat.completion");
    let last = json_of(send_h1(addr, get("/_mock/last_request")).await).await;
    assert_eq!(last["method"], "POST");
    assert_eq!(last["path_and_query"], "/v1/chat/completions?x=1");
    assert_eq!(last["body_len"], body.to_string().len());
    let headers = last["headers"].as_array().unwrap();
    assert!(headers.contains(&json!(["x-custom", "kept"])));
    assert!(headers.contains(&json!(["authorization", "Bearer t"])));
    assert_eq!(last["body_sha256"].as_str().unwrap().len(), 64);
}

#[tokio::test]
async fn other_formats_stream_their_shapes() {
    let addr = start().await;
    // Gemini: whole responses, no [DONE], finishReason at the end.
    let response =
        send_h2(addr, post("/v1beta/models/gemini-x:streamGenerateContent?alt=sse", &[], json!({"contents": []})))
            .await;
    let data = sse_data(&frames(response).await.unwrap());
    assert_eq!(data.len(), 9);
    let last: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert_eq!(last["modelVersion"], "gemini-x");

    // Ollama: NDJSON, streams by default.
    let response =
        send_h1(addr, post("/api/chat", &[("x-mock-reasoning-tokens", "2")], json!({"model": "llama"}))).await;
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let frames_ = frames(response).await.unwrap();
    assert_eq!(frames_.len(), 2 + 8 + 1);
    let last: Value = serde_json::from_slice(frames_.last().unwrap()).unwrap();
    assert_eq!(last["done"], true);
    assert_eq!(last["eval_count"], 10);

    // Responses: every event named and numbered.
    let response =
        send_h1(addr, post("/v1/responses", &[], json!({"model": "m", "input": "hi", "stream": true}))).await;
    let frames_ = frames(response).await.unwrap();
    for (i, frame) in frames_.iter().enumerate() {
        let text = std::str::from_utf8(frame).unwrap();
        let data: Value = serde_json::from_str(text.lines().nth(1).unwrap().strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(data["sequence_number"], i);
        assert_eq!(text.lines().next().unwrap(), format!("event: {}", data["type"].as_str().unwrap()));
    }
}

#[tokio::test]
async fn huge_events_are_padded() {
    let addr = start().await;
    let response = send_h1(
        addr,
        post("/v1/chat/completions", &[("x-mock-event-bytes", "100000")], json!({"model": "m", "stream": true})),
    )
    .await;
    // The client's reads do not follow the server's frames for big events: count parsed events.
    let data = sse_data(&frames(response).await.unwrap());
    let big = data.iter().filter(|d| d.len() > 99_000).count();
    assert_eq!(big, 8);
}

#[test]
fn spawn_background_serves_from_its_own_runtime() {
    let addr = tokentap_mock::spawn_background("127.0.0.1:0".parse().unwrap(), MockConfig::default()).unwrap();
    assert_ne!(addr.port(), 0);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let stats = runtime.block_on(async { json_of(send_h1(addr, get("/_mock/stats")).await).await });
    assert_eq!(stats["requests"], 0);
}

#[tokio::test]
async fn a_body_declared_over_32_mib_is_refused_unread() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = start().await;
    let mut stream = connect(addr).await;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: mock\r\nconnection: close\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        32 * 1024 * 1024 + 1
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    assert!(answer.contains(r#""type":"invalid_request_error""#), "{answer}");
    let stats = json_of(send_h1(addr, get("/_mock/stats")).await).await;
    assert_eq!((stats["requests"].as_u64(), stats["completed"].as_u64()), (Some(1), Some(1)));
}
