//! tokentap's relay of an HTTP/1.1 exchange (one loop per exchange): the request body and the
//! answer travel at once, and the upstream connection is reused only when both ended whole.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use tokentap_e2e::http1::read_head;
use tokentap_e2e::Tokentap;

fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One message: its head and its `content-length` body.
fn read_message(conn: &mut TcpStream) -> (String, Vec<u8>) {
    let head = read_head(conn);
    let mut body = vec![0u8; content_length(&head)];
    conn.read_exact(&mut body).expect("the whole body before the deadline");
    (head, body)
}

/// An upstream that answers as soon as it has a request's head and reads the body after: the
/// answer reaches the client while the client is still sending its body, the rest of the body
/// still reaches the upstream, and the one upstream connection then serves the next request.
#[test]
fn an_answer_that_comes_before_the_request_body_ends_is_relayed_while_the_body_streams() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (bodies, received) = mpsc::channel::<Vec<u8>>();
    let server = std::thread::spawn(move || {
        // One connection only: the second request must come on it.
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        for _ in 0..2 {
            let head = read_head(&mut conn);
            let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}";
            conn.write_all(answer.as_bytes()).unwrap();
            let mut body = vec![0u8; content_length(&head)];
            conn.read_exact(&mut body).unwrap();
            bodies.send(body).unwrap();
        }
    });
    let tokentap = Tokentap::start(&url, &[]);
    let mut feed = tokentap.feed();
    let mut client = TcpStream::connect(tokentap.addr).unwrap();
    // Deadlines, so a relay that waits for the whole body before reading the answer fails the
    // test instead of hanging it.
    client.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).unwrap();
    client.write_all(&body[..1000]).unwrap();
    // The answer, with most of the body not sent yet.
    let (answer_head, answer) = read_message(&mut client);
    assert!(answer_head.starts_with("HTTP/1.1 200"), "{answer_head}");
    assert_eq!(answer, b"{\"ok\":true}");
    // An answer complete before the request's body: pingora's server session closes the client's
    // connection after it (the next request comes on another).
    assert!(answer_head.to_ascii_lowercase().contains("connection: close"), "{answer_head}");
    client.write_all(&body[1000..]).unwrap();
    let got = received.recv_timeout(Duration::from_secs(30)).expect("the whole body upstream");
    assert!(got == body, "the body differs upstream ({} bytes of {})", got.len(), body.len());
    // Recorded after the relay gave the upstream connection back: the next request, on a new
    // client connection, is sent on that same upstream connection (pooled, the body written whole).
    let record = feed.next_record_for("/v1/chat/completions");
    assert_eq!((record["outcome"].as_str(), record["status"].as_u64()), (Some("ok"), Some(200)), "{record:#}");
    let mut client = TcpStream::connect(tokentap.addr).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let second = "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n\
                  content-length: 2\r\nconnection: close\r\n\r\n{}";
    client.write_all(second.as_bytes()).unwrap();
    let (answer_head, answer) = read_message(&mut client);
    assert!(answer_head.starts_with("HTTP/1.1 200"), "{answer_head}");
    assert_eq!(answer, b"{\"ok\":true}");
    assert_eq!(received.recv_timeout(Duration::from_secs(30)).expect("the second body"), b"{}");
    server.join().unwrap();
    let record = feed.next_record_for("/v1/chat/completions");
    assert_eq!((record["outcome"].as_str(), record["status"].as_u64()), (Some("ok"), Some(200)), "{record:#}");
    assert_eq!(record["timeline"]["connection"]["reused"], true, "{record:#}");
}
