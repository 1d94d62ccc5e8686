//! A scripted raw HTTP/1.1 upstream running in the test process: it answers each request with a
//! response the test registered under the request path, piece by piece on an absolute schedule,
//! and remembers the request bodies it received.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the response body is framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Chunked,
    ContentLength,
    /// No length, body ends when the connection closes.
    Close,
}

/// One scripted response.
#[derive(Debug, Clone)]
pub struct Script {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub framing: Framing,
    /// Body pieces, each written (and flushed) on its own at `at` after the request arrived.
    pub pieces: Vec<(Duration, Vec<u8>)>,
}

impl Script {
    pub fn body(&self) -> Vec<u8> {
        self.pieces.iter().flat_map(|(_, p)| p.iter().copied()).collect()
    }
}

/// Builds the response to the `index`-th request (0-based, in arrival order) on a path from its body.
pub type Responder = Arc<dyn Fn(usize, &[u8]) -> Script + Send + Sync>;

#[derive(Default)]
struct State {
    scripts: HashMap<String, Script>,
    responders: HashMap<String, Responder>,
    received: HashMap<String, Vec<u8>>,
    /// Every request body per path, in arrival order.
    history: HashMap<String, Vec<Vec<u8>>>,
}

/// The running upstream. It lives on its own thread and runtime until the test process ends.
#[derive(Clone)]
pub struct ScriptedUpstream {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl ScriptedUpstream {
    pub fn start() -> ScriptedUpstream {
        let state = Arc::new(Mutex::new(State::default()));
        let (tx, rx) = std::sync::mpsc::channel();
        let serve_state = state.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                loop {
                    let (stream, _) = listener.accept().await.unwrap();
                    let state = serve_state.clone();
                    tokio::spawn(async move {
                        let _ = serve_connection(stream, state).await;
                    });
                }
            });
        });
        let addr = rx.recv().expect("upstream address");
        ScriptedUpstream { addr, state }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn register(&self, path: &str, script: Script) {
        self.state.lock().unwrap().scripts.insert(path.to_string(), script);
    }

    /// Answers every request on `path` with what `responder` builds from its arrival index and body.
    pub fn register_with(&self, path: &str, responder: impl Fn(usize, &[u8]) -> Script + Send + Sync + 'static) {
        self.state.lock().unwrap().responders.insert(path.to_string(), Arc::new(responder));
    }

    /// Every request body received on `path`, in arrival order.
    pub fn history(&self, path: &str) -> Vec<Vec<u8>> {
        self.state.lock().unwrap().history.get(path).cloned().unwrap_or_default()
    }

    /// The request body received for `path`, if the request arrived.
    pub fn received(&self, path: &str) -> Option<Vec<u8>> {
        self.state.lock().unwrap().received.get(path).cloned()
    }
}

async fn serve_connection(mut stream: TcpStream, state: Arc<Mutex<State>>) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = Vec::new();
    loop {
        // Read one request head.
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            let mut tmp = [0u8; 16384];
            let n = stream.read(&mut tmp).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&tmp[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        buf.drain(..head_end + 4);
        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
        let mut content_length = 0usize;
        let mut chunked = false;
        for line in head.split("\r\n").skip(1) {
            if let Some((k, v)) = line.split_once(':') {
                if k.trim().eq_ignore_ascii_case("content-length") {
                    content_length = v.trim().parse().unwrap_or(0);
                }
                if k.trim().eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked") {
                    chunked = true;
                }
            }
        }
        let body = if chunked {
            read_chunked(&mut stream, &mut buf).await?
        } else {
            while buf.len() < content_length {
                let mut tmp = [0u8; 16384];
                let n = stream.read(&mut tmp).await?;
                if n == 0 {
                    return Ok(());
                }
                buf.extend_from_slice(&tmp[..n]);
            }
            buf.drain(..content_length).collect()
        };
        let (script, responder, index) = {
            let mut st = state.lock().unwrap();
            let history = st.history.entry(path.clone()).or_default();
            history.push(body.clone());
            let index = history.len() - 1;
            st.received.insert(path.clone(), body.clone());
            (st.scripts.get(&path).cloned(), st.responders.get(&path).cloned(), index)
        };
        let script = match responder {
            Some(responder) => Some(responder(index, &body)),
            None => script,
        };
        let Some(script) = script else {
            stream.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").await?;
            continue;
        };
        let start = tokio::time::Instant::now();
        let mut head = format!("HTTP/1.1 {} Scripted\r\n", script.status);
        for (k, v) in &script.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        match script.framing {
            Framing::Chunked => head.push_str("transfer-encoding: chunked\r\n"),
            Framing::ContentLength => head.push_str(&format!("content-length: {}\r\n", script.body().len())),
            Framing::Close => head.push_str("connection: close\r\n"),
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await?;
        stream.flush().await?;
        for (at, piece) in &script.pieces {
            tokio::time::sleep_until(start + *at).await;
            if piece.is_empty() {
                continue;
            }
            if script.framing == Framing::Chunked {
                let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
                framed.extend_from_slice(piece);
                framed.extend_from_slice(b"\r\n");
                stream.write_all(&framed).await?;
            } else {
                stream.write_all(piece).await?;
            }
            stream.flush().await?;
        }
        match script.framing {
            Framing::Chunked => stream.write_all(b"0\r\n\r\n").await?,
            Framing::ContentLength => {}
            Framing::Close => {
                stream.shutdown().await?;
                return Ok(());
            }
        }
        stream.flush().await?;
    }
}

async fn read_chunked(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                break i;
            }
            let mut tmp = [0u8; 16384];
            let n = stream.read(&mut tmp).await?;
            if n == 0 {
                return Ok(body);
            }
            buf.extend_from_slice(&tmp[..n]);
        };
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&buf[..line_end]).split(';').next().unwrap_or("0").trim(),
            16,
        )
        .unwrap_or(0);
        buf.drain(..line_end + 2);
        while buf.len() < size + 2 {
            let mut tmp = [0u8; 16384];
            let n = stream.read(&mut tmp).await?;
            if n == 0 {
                return Ok(body);
            }
            buf.extend_from_slice(&tmp[..n]);
        }
        body.extend(buf.drain(..size));
        buf.drain(..2);
        if size == 0 {
            return Ok(body);
        }
    }
}

/// A port that refuses connections for as long as this lives: a socket bound to it that never
/// listens. No other process can take the port meanwhile, as one could a port that was merely
/// free a moment ago.
pub struct RefusingPort {
    socket: socket2::Socket,
}

impl RefusingPort {
    pub fn new() -> RefusingPort {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
        socket.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).expect("bind a free port");
        RefusingPort { socket }
    }

    pub fn addr(&self) -> SocketAddr {
        self.socket.local_addr().expect("local addr").as_socket().expect("an IP address")
    }
}

impl Default for RefusingPort {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_refusing_port_refuses() {
        let port = super::RefusingPort::new();
        let error = std::net::TcpStream::connect(port.addr()).expect_err("nothing listens");
        assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
    }
}
