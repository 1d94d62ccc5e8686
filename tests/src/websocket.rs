//! Raw WebSocket sessions for the forwarding tests: an upstream that answers any upgrade with
//! `101`, then writes its scripted bytes while reading the client's, and a client that does the
//! same from the other end. Both keep every byte they received, so a test compares them with what
//! the other side sent. Frames are encoded here (RFC 6455), independently of tokentap's parser.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// How a scripted side ends its connection once it has sent and received everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// A FIN after the close frames in the scripts.
    Close,
    /// A reset (SO_LINGER 0), no close frame.
    Reset,
}

/// One session: what each side sends (in pieces, written one after another), and how the
/// upstream ends.
#[derive(Clone, Debug)]
pub struct WsSession {
    pub path: String,
    pub client_pieces: Vec<Vec<u8>>,
    pub server_pieces: Vec<Vec<u8>>,
    /// `Sec-WebSocket-Extensions` of the 101, if any.
    pub extensions: Option<String>,
    pub ending: Ending,
}

impl WsSession {
    pub fn client_bytes(&self) -> Vec<u8> {
        self.client_pieces.concat()
    }

    pub fn server_bytes(&self) -> Vec<u8> {
        self.server_pieces.concat()
    }
}

/// What the upstream received in one session.
pub struct UpstreamSide {
    pub head: String,
    pub received: Vec<u8>,
}

/// An upstream for one session at a time, on a free port.
pub struct WsUpstream {
    pub addr: SocketAddr,
    listener: TcpListener,
}

impl Default for WsUpstream {
    fn default() -> Self {
        Self::start()
    }
}

impl WsUpstream {
    pub fn start() -> WsUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        WsUpstream { addr: listener.local_addr().expect("addr"), listener }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Serves the next connection with `session` on a thread; the receiver yields what it got.
    /// The upstream ends its side (close or reset) only once `end` is sent: a reset drops bytes
    /// still in flight, so the test sends it after the client has received everything.
    pub fn serve(&self, session: &WsSession) -> (mpsc::Receiver<UpstreamSide>, mpsc::Sender<()>) {
        let listener = self.listener.try_clone().expect("clone listener");
        let session = session.clone();
        let (tx, rx) = mpsc::channel();
        let (end_tx, end_rx) = mpsc::channel::<()>();
        thread::spawn(move || {
            let (mut stream, _) = listener.accept().expect("accept");
            stream.set_read_timeout(Some(Duration::from_secs(30))).ok();
            let head = read_head(&mut stream);
            let mut answer = String::from(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n",
            );
            if let Some(ext) = &session.extensions {
                answer.push_str(&format!("Sec-WebSocket-Extensions: {ext}\r\n"));
            }
            answer.push_str("\r\n");
            stream.write_all(answer.as_bytes()).expect("write 101");
            let received = exchange(&mut stream, &session.server_pieces, session.client_bytes().len());
            let _ = end_rx.recv_timeout(Duration::from_secs(60));
            finish(stream, session.ending);
            let _ = tx.send(UpstreamSide { head, received });
        });
        (rx, end_tx)
    }
}

/// Reads one HTTP head byte by byte, so that nothing after it is consumed.
pub fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Writes `pieces` on a thread while reading `expect` bytes here; returns what was read.
fn exchange(stream: &mut TcpStream, pieces: &[Vec<u8>], expect: usize) -> Vec<u8> {
    let mut writer = stream.try_clone().expect("clone stream");
    let pieces = pieces.to_vec();
    let write = thread::spawn(move || {
        for p in pieces {
            if writer.write_all(&p).is_err() {
                break;
            }
            let _ = writer.flush();
        }
    });
    let mut received = Vec::with_capacity(expect);
    let mut buf = vec![0u8; 64 << 10];
    while received.len() < expect {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => received.extend_from_slice(&buf[..n]),
        }
    }
    let _ = write.join();
    received
}

fn finish(stream: TcpStream, ending: Ending) {
    match ending {
        Ending::Close => {
            let _ = stream.shutdown(Shutdown::Write);
        }
        Ending::Reset => {
            let socket = socket2::Socket::from(stream);
            let _ = socket.set_linger(Some(Duration::ZERO));
            drop(socket);
        }
    }
}

/// What the client received: the 101 head and the bytes after it.
pub struct ClientSide {
    pub head: String,
    pub received: Vec<u8>,
}

/// Runs the client side of `session` against `proxy`; `received_all` is called once the client
/// has read as many bytes as the upstream sent, before it waits for the upstream's end.
pub fn run_client(proxy: SocketAddr, session: &WsSession, received_all: impl FnOnce()) -> ClientSide {
    let mut stream = TcpStream::connect(proxy).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {proxy}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n",
        session.path
    );
    stream.write_all(request.as_bytes()).expect("write upgrade");
    let head = read_head(&mut stream);
    let received = exchange(&mut stream, &session.client_pieces, session.server_bytes().len());
    received_all();
    // The client waits for the upstream's end, then closes (a reset shows as an error or EOF).
    let mut rest = [0u8; 1024];
    while let Ok(n) = stream.read(&mut rest) {
        if n == 0 {
            break;
        }
    }
    drop(stream);
    ClientSide { head, received }
}

/// Encodes one frame: `mask` for client frames.
pub fn frame(fin: bool, rsv1: bool, opcode: u8, mask: Option<[u8; 4]>, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 14);
    out.push(u8::from(fin) << 7 | u8::from(rsv1) << 6 | (opcode & 0x0F));
    let m = if mask.is_some() { 0x80 } else { 0 };
    let n = payload.len();
    if n < 126 {
        out.push(m | n as u8);
    } else if n <= 0xFFFF {
        out.push(m | 126);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(m | 127);
        out.extend_from_slice(&(n as u64).to_be_bytes());
    }
    match mask {
        Some(k) => {
            out.extend_from_slice(&k);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
    out
}
