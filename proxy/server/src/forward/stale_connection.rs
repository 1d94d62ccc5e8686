//! A stale connection: a pooled upstream connection the server closed while it was idle, found
//! closed by the request that reused it. Such a request is sent again, once, on another
//! connection when the server provably closed its side before any byte of the request reached it
//! (ARCHITECTURE.md, "One retry").
//!
//! Both proofs are the server's own TCP segments, read from the socket's counters (`TCP_INFO`):
//! - [`Reuse::ClosedByServer`]: before the request head is written, the socket is already past
//!   the server's FIN. Nothing is written: the request is sent on another connection.
//! - [`StaleProbe::closed_before_request`]: the attempt ended with the server's FIN, no response
//!   byte arrived, and the server acknowledged no byte of the request. The FIN carries the
//!   server's acknowledgement of everything its TCP stack had received, and the kernel applies
//!   that acknowledgement before it reports the end of stream: the server closed before any of the
//!   request reached it.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use pingora::protocols::SocketDigest;
use rustix::process::{getpid, pidfd_getfd, pidfd_open, PidfdFlags, PidfdGetfdFlags};

/// What the counters of a reused connection say before the request head is written.
pub(crate) enum Reuse {
    /// The server's FIN has already arrived: it will send nothing more on this connection.
    ClosedByServer,
    /// Open: the counters to compare with should the attempt fail.
    Open(StaleProbe),
    /// No TCP information, or the socket could not be duplicated: never retried.
    Unknown,
}

/// The socket counters of a reused connection, read before the request was written, and a
/// duplicate of its descriptor (pingora closes the connection before its error reaches
/// `error_while_proxy`).
pub(crate) struct StaleProbe {
    socket: OwnedFd,
    before: Counters,
}

/// This process as a pidfd: duplicating a descriptor by number through it is a safe call.
fn this_process() -> Option<&'static OwnedFd> {
    static PIDFD: OnceLock<Option<OwnedFd>> = OnceLock::new();
    PIDFD.get_or_init(|| pidfd_open(getpid(), PidfdFlags::empty()).ok()).as_ref()
}

impl Reuse {
    /// Reads `fd`'s counters (one getsockopt); when open, keeps a duplicate of it
    /// (`pidfd_getfd`, Linux 5.6).
    pub(crate) fn before_write(fd: RawFd) -> Reuse {
        let Some(process) = this_process() else { return Reuse::Unknown };
        let Ok(socket) = pidfd_getfd(process, fd, PidfdGetfdFlags::empty()) else { return Reuse::Unknown };
        match counters(&socket) {
            None => Reuse::Unknown,
            Some(c) if c.fin_received => Reuse::ClosedByServer,
            Some(before) => Reuse::Open(StaleProbe { socket, before }),
        }
    }
}

impl StaleProbe {
    /// True when the server's FIN has arrived, it had acknowledged no request byte, and nothing
    /// but the FIN was received (the FIN takes one sequence number, counted as a received byte).
    pub(crate) fn closed_before_request(&self) -> bool {
        counters(&self.socket).is_some_and(|now| {
            now.fin_received && now.acked == self.before.acked && now.received == self.before.received + 1
        })
    }
}

/// Linux TCP states after the peer's FIN: CLOSE (a reset followed), CLOSE_WAIT, LAST_ACK.
const TCP_CLOSE: u8 = 7;
const TCP_CLOSE_WAIT: u8 = 8;
const TCP_LAST_ACK: u8 = 9;

struct Counters {
    /// Bytes of ours the server acknowledged.
    acked: u64,
    /// Sequence numbers received from the server: its bytes, and one for its FIN.
    received: u64,
    fin_received: bool,
}

fn counters(socket: &OwnedFd) -> Option<Counters> {
    let info = SocketDigest::from_raw_fd(socket.as_raw_fd()).tcp_info()?;
    Some(Counters {
        acked: info.tcpi_bytes_acked,
        received: info.tcpi_bytes_received,
        fin_received: matches!(info.tcpi_state, TCP_CLOSE | TCP_CLOSE_WAIT | TCP_LAST_ACK),
    })
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::*;

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    fn open(client: &TcpStream) -> StaleProbe {
        match Reuse::before_write(client.as_raw_fd()) {
            Reuse::Open(probe) => probe,
            Reuse::ClosedByServer => panic!("closed"),
            Reuse::Unknown => panic!("no TCP information"),
        }
    }

    #[test]
    fn a_connection_the_server_already_closed_is_found_before_writing() {
        let (mut client, server) = pair();
        drop(server);
        // The end of stream has arrived once a peek returns it.
        let mut buf = [0u8; 16];
        assert_eq!(client.peek(&mut buf).unwrap(), 0);
        assert!(matches!(Reuse::before_write(client.as_raw_fd()), Reuse::ClosedByServer));
        assert_eq!(client.read(&mut buf).unwrap(), 0);
    }

    #[test]
    fn a_server_that_closed_before_the_request_arrived_acknowledged_none_of_it() {
        let (mut client, server) = pair();
        let probe = open(&client);
        drop(server);
        let mut buf = [0u8; 16];
        assert_eq!(client.read(&mut buf).unwrap(), 0);
        assert!(probe.closed_before_request());
    }

    #[test]
    fn a_server_that_read_the_request_and_closed_acknowledged_it() {
        let (mut client, mut server) = pair();
        let probe = open(&client);
        client.write_all(b"POST / HTTP/1.1\r\n\r\n").unwrap();
        let mut buf = [0u8; 64];
        assert!(server.read(&mut buf).unwrap() > 0);
        drop(server);
        assert_eq!(client.read(&mut buf).unwrap(), 0);
        assert!(!probe.closed_before_request());
    }

    #[test]
    fn a_server_that_answered_part_and_closed_sent_bytes() {
        let (mut client, mut server) = pair();
        let probe = open(&client);
        server.write_all(b"HTTP/1.1 200").unwrap();
        drop(server);
        let mut buf = [0u8; 64];
        while client.read(&mut buf).unwrap() > 0 {}
        assert!(!probe.closed_before_request());
    }
}
