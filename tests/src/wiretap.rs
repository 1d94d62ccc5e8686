//! A TCP relay on a free port that forwards every connection to a target unchanged and keeps a copy
//! of the bytes each side sent: an independent witness of what an upstream put on the wire, to
//! compare with what a client received through tokentap (and of what a client sent, to compare
//! with what the upstream received).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// Per accepted connection, in accept order: every byte the target sent on it.
type Captured = Arc<Mutex<Vec<Vec<u8>>>>;

pub struct WireTap {
    pub addr: SocketAddr,
    from_target: Captured,
    from_client: Captured,
}

impl WireTap {
    pub fn start(target: SocketAddr) -> WireTap {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind wire tap");
        let addr = listener.local_addr().expect("wire tap address");
        let from_target = Arc::new(Mutex::new(Vec::new()));
        let from_client = Arc::new(Mutex::new(Vec::new()));
        let captured = from_target.clone();
        let sent = from_client.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let Ok(server) = TcpStream::connect(target) else { continue };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let index = {
                    let mut all = captured.lock().unwrap();
                    all.push(Vec::new());
                    sent.lock().unwrap().push(Vec::new());
                    all.len() - 1
                };
                let (client_r, server_w) = (client.try_clone().expect("clone"), server.try_clone().expect("clone"));
                let sent = sent.clone();
                std::thread::spawn(move || pump(client_r, server_w, Some((sent, index))));
                let captured = captured.clone();
                std::thread::spawn(move || pump(server, client, Some((captured, index))));
            }
        });
        WireTap { addr, from_target, from_client }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bytes the target sent, per connection. A byte is kept before it is forwarded, so once
    /// the client has a response its bytes are all here.
    pub fn from_target(&self) -> Vec<Vec<u8>> {
        self.from_target.lock().unwrap().clone()
    }

    /// The bytes clients sent, per connection (same order as [`WireTap::from_target`]).
    pub fn from_client(&self) -> Vec<Vec<u8>> {
        self.from_client.lock().unwrap().clone()
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, keep: Option<(Captured, usize)>) {
    let mut buf = [0u8; 65536];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some((all, index)) = &keep {
            all.lock().unwrap()[*index].extend_from_slice(&buf[..n]);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
