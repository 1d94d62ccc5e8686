//! A stale connection: a pooled upstream connection the server closed while it was idle, found
//! closed by the request that reused it. Such a request is retried once on a fresh connection when
//! the server provably never received any of it (docs/metrics.md, "Stale connections").
//!
//! The proof is the server's own TCP acknowledgement. Before the request head is written on a
//! reused connection, [`StaleProbe::before_write`] reads the socket's counters (one getsockopt)
//! and keeps a duplicate of the descriptor, which stays valid after pingora drops the connection.
//! When the attempt then fails with an end of stream before any response byte,
//! [`StaleProbe::closed_before_request`] reads the counters again: the server's FIN carries its
//! acknowledgement of everything its TCP stack had received, and the kernel processes that
//! acknowledgement before it reports the end of stream. If no request byte is acknowledged and no
//! response byte arrived, the server closed its side before a single request byte reached it: the
//! request was not read, so sending it again on a fresh connection cannot run it twice.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use pingora::protocols::SocketDigest;
use rustix::process::{getpid, pidfd_getfd, pidfd_open, PidfdFlags, PidfdGetfdFlags};

/// This process as a pidfd: duplicating a descriptor by number through it is a safe call.
fn this_process() -> Option<&'static OwnedFd> {
    static PIDFD: OnceLock<Option<OwnedFd>> = OnceLock::new();
    PIDFD.get_or_init(|| pidfd_open(getpid(), PidfdFlags::empty()).ok()).as_ref()
}

/// The socket counters of a reused connection, read before the request was written.
pub struct StaleProbe {
    socket: OwnedFd,
    acked: u64,
    received: u64,
}

impl StaleProbe {
    /// Reads `fd`'s counters and keeps a duplicate of it (`pidfd_getfd`, Linux 5.6); `None` when
    /// the socket gives no TCP information or cannot be duplicated: such a connection is never
    /// retried.
    pub fn before_write(fd: RawFd) -> Option<StaleProbe> {
        let socket = pidfd_getfd(this_process()?, fd, PidfdGetfdFlags::empty()).ok()?;
        let Counters { acked, received, .. } = counters(&socket)?;
        Some(StaleProbe { socket, acked, received })
    }

    /// True when the server's FIN has arrived, and it had acknowledged no request byte and sent no
    /// response byte: it closed the connection before any of the request reached it.
    pub fn closed_before_request(&self) -> bool {
        counters(&self.socket)
            .is_some_and(|now| now.fin_received && now.acked == self.acked && now.received == self.received)
    }
}

/// Linux TCP states after the peer's FIN: CLOSE (a reset followed), CLOSE_WAIT, LAST_ACK.
const TCP_CLOSE: u8 = 7;
const TCP_CLOSE_WAIT: u8 = 8;
const TCP_LAST_ACK: u8 = 9;

struct Counters {
    /// Bytes of ours the server acknowledged.
    acked: u64,
    /// Bytes the server sent us.
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

    #[test]
    fn a_server_that_closed_before_the_request_arrived_acknowledged_none_of_it() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        drop(server);
        let probe = StaleProbe::before_write(client.as_raw_fd()).expect("TCP information");
        let mut buf = [0u8; 16];
        assert_eq!(client.read(&mut buf).unwrap(), 0);
        let _ = client.write_all(b"POST / HTTP/1.1\r\n\r\n");
        assert!(probe.closed_before_request());
    }

    #[test]
    fn a_server_that_read_the_request_and_closed_acknowledged_it() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        let probe = StaleProbe::before_write(client.as_raw_fd()).expect("TCP information");
        client.write_all(b"POST / HTTP/1.1\r\n\r\n").unwrap();
        let mut buf = [0u8; 64];
        assert!(server.read(&mut buf).unwrap() > 0);
        drop(server);
        assert_eq!(client.read(&mut buf).unwrap(), 0);
        assert!(!probe.closed_before_request());
    }
}
