//! A stale connection: a pooled upstream connection the server closed while it was idle, found
//! closed by the request that reused it. Such a request is sent again, once, on another
//! connection when the server provably never took the request in: it closed its side before any
//! byte of the request reached it, or its application closed the connection without reading the
//! whole request (ARCHITECTURE.md, "One retry").
//!
//! Every proof is the server's own TCP segments, read from the socket's counters (`TCP_INFO`):
//! - [`Reuse::ClosedByServer`]: before the request head is written, the socket is already past
//!   the server's FIN. Nothing is written: the request is sent on another connection.
//! - [`StaleProbe::after_failure`]: the attempt failed, no data segment of the server's
//!   arrived since the request was written, and either
//!   - the server's FIN came and acknowledged no byte of the request (the FIN carries the
//!     server's acknowledgement of everything its TCP stack had received, and the kernel applies
//!     it before it reports the end of stream: the server closed before any of it arrived), or
//!   - the server reset the connection. A TCP stack resets a connection its application closes
//!     with received bytes still unread (RFC 2525, 2.17; Linux's `tcp_close`): the application
//!     did not read the whole request, so it never had a request to act on. The same holds for a
//!     FIN followed by a reset (a server that shuts its socket down, then closes it unread, as
//!     cpp-httplib, and so llama.cpp's server, does).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::time::Duration;

use pingora::protocols::l4::ext::get_tcp_info;
use rustix::process::{getpid, pidfd_getfd, pidfd_open, PidfdFlags, PidfdGetfdFlags};

/// What the counters of a reused connection say before the request head is written.
pub(crate) enum Reuse {
    /// The server's FIN has already arrived: it will send nothing more on this connection. `idle`:
    /// how long before the reuse its last data arrived.
    ClosedByServer { idle: Duration },
    /// Open: the counters to compare with should the attempt fail.
    Open(StaleProbe),
    /// No TCP information, or the socket could not be duplicated: never retried.
    Unknown,
}

/// How the server ended a reused connection whose attempt failed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Closure {
    /// It sent no data since the request was written and either reset the connection or sent its
    /// FIN acknowledging none of the request: it never took the request in (retried).
    RequestNotTaken,
    /// It closed (FIN) without a byte of answer after acknowledging request bytes: it may have
    /// read the request (not retried).
    WithoutAnswer,
    /// Still open, an answer byte arrived, or no TCP information.
    Unknown,
}

/// The socket counters of a reused connection, read before the request was written, and the
/// socket to read them from again should the attempt fail.
pub(crate) struct StaleProbe {
    socket: ProbeSocket,
    before: Counters,
}

/// The socket a [`StaleProbe`] reads after a failure.
enum ProbeSocket {
    /// A duplicate of the connection's descriptor: pingora's proxy closes the connection before
    /// its error reaches `error_while_proxy`.
    Duplicate(OwnedFd),
    /// The descriptor of a connection tokentap's relay (`exchange`) holds: the relay decides on
    /// the retry (or drops the probe) before it lets the connection go, so the descriptor is
    /// still this connection's whenever it is read. No duplicate to make and close per request.
    Held(RawFd),
}

impl ProbeSocket {
    fn fd(&self) -> RawFd {
        match self {
            ProbeSocket::Duplicate(socket) => socket.as_raw_fd(),
            ProbeSocket::Held(fd) => *fd,
        }
    }
}

/// This process as a pidfd: duplicating a descriptor by number through it is a safe call.
fn this_process() -> Option<&'static OwnedFd> {
    static PIDFD: OnceLock<Option<OwnedFd>> = OnceLock::new();
    PIDFD.get_or_init(|| pidfd_open(getpid(), PidfdFlags::empty()).ok()).as_ref()
}

/// A duplicate of this process's descriptor `fd` (`pidfd_getfd`, Linux 5.6), for reading a socket
/// pingora owns.
pub(crate) fn duplicate(fd: RawFd) -> Option<OwnedFd> {
    pidfd_getfd(this_process()?, fd, PidfdGetfdFlags::empty()).ok()
}

impl Reuse {
    /// Reads `fd`'s counters (one getsockopt); when open, keeps a duplicate of it
    /// (`pidfd_getfd`, Linux 5.6), for a connection pingora's proxy holds.
    pub(crate) fn before_write(fd: RawFd) -> Reuse {
        let Some(socket) = duplicate(fd) else { return Reuse::Unknown };
        Self::read(ProbeSocket::Duplicate(socket))
    }

    /// Reads `fd`'s counters (one getsockopt), for a connection tokentap's relay holds until the
    /// probe is used or dropped (no duplicate).
    pub(crate) fn before_held_write(fd: RawFd) -> Reuse {
        Self::read(ProbeSocket::Held(fd))
    }

    fn read(socket: ProbeSocket) -> Reuse {
        match counters(socket.fd()) {
            None => Reuse::Unknown,
            Some(c) if c.fin_received() => Reuse::ClosedByServer { idle: c.idle },
            Some(before) => Reuse::Open(StaleProbe { socket, before }),
        }
    }
}

impl StaleProbe {
    /// What the counters say after the attempt failed (one getsockopt).
    pub(crate) fn after_failure(&self) -> Closure {
        let Some(now) = counters(self.socket.fd()) else { return Closure::Unknown };
        if !now.fin_received() || now.data_segments_received != self.before.data_segments_received {
            return Closure::Unknown;
        }
        let reset = now.state == TCP_CLOSE;
        let fin_before_the_request = now.acked == self.before.acked;
        if reset || fin_before_the_request {
            Closure::RequestNotTaken
        } else {
            Closure::WithoutAnswer
        }
    }

    /// How long before the reuse the connection's last data from the server arrived.
    pub(crate) fn idle(&self) -> Duration {
        self.before.idle
    }
}

/// Linux TCP states after the peer's FIN or reset: CLOSE (a reset arrived), CLOSE_WAIT, LAST_ACK.
/// The duplicate descriptor keeps this side open, so CLOSE can only come from the peer's reset.
const TCP_CLOSE: u8 = 7;
const TCP_CLOSE_WAIT: u8 = 8;
const TCP_LAST_ACK: u8 = 9;

struct Counters {
    /// Bytes of ours the server acknowledged.
    acked: u64,
    /// Segments with data (not a bare FIN or reset) received from the server.
    data_segments_received: u32,
    state: u8,
    /// Since the last data from the server arrived (millisecond resolution).
    idle: Duration,
}

impl Counters {
    /// The server's FIN has arrived (or its reset, which ends the stream the same way).
    fn fin_received(&self) -> bool {
        matches!(self.state, TCP_CLOSE | TCP_CLOSE_WAIT | TCP_LAST_ACK)
    }
}

/// One getsockopt (not through a `SocketDigest`, whose first reading also asks the socket's
/// address); a socket that is not TCP has none.
fn counters(fd: RawFd) -> Option<Counters> {
    let info = get_tcp_info(fd).ok()?;
    Some(Counters {
        acked: info.tcpi_bytes_acked,
        data_segments_received: info.tcpi_data_segs_in,
        state: info.tcpi_state,
        idle: Duration::from_millis(u64::from(info.tcpi_last_data_recv)),
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

    /// Both kinds of probe of one open connection: through a duplicate (pingora's proxy) and
    /// through the descriptor itself (tokentap's relay, which holds the connection meanwhile).
    fn open(client: &TcpStream) -> [StaleProbe; 2] {
        [Reuse::before_write(client.as_raw_fd()), Reuse::before_held_write(client.as_raw_fd())].map(|reuse| match reuse
        {
            Reuse::Open(probe) => probe,
            Reuse::ClosedByServer { .. } => panic!("closed"),
            Reuse::Unknown => panic!("no TCP information"),
        })
    }

    fn assert_closure(probes: &[StaleProbe; 2], expected: Closure) {
        for probe in probes {
            assert_eq!(probe.after_failure(), expected);
        }
    }

    #[test]
    fn a_connection_the_server_already_closed_is_found_before_writing() {
        let (mut client, server) = pair();
        drop(server);
        // The end of stream has arrived once a peek returns it.
        let mut buf = [0u8; 16];
        assert_eq!(client.peek(&mut buf).unwrap(), 0);
        assert!(matches!(Reuse::before_write(client.as_raw_fd()), Reuse::ClosedByServer { .. }));
        assert!(matches!(Reuse::before_held_write(client.as_raw_fd()), Reuse::ClosedByServer { .. }));
        assert_eq!(client.read(&mut buf).unwrap(), 0);
    }

    #[test]
    fn a_server_that_closed_before_the_request_arrived_acknowledged_none_of_it() {
        let (mut client, server) = pair();
        let probes = open(&client);
        drop(server);
        let mut buf = [0u8; 16];
        assert_eq!(client.read(&mut buf).unwrap(), 0);
        assert_closure(&probes, Closure::RequestNotTaken);
    }

    #[test]
    fn a_server_that_read_the_request_and_closed_acknowledged_it() {
        let (mut client, mut server) = pair();
        let probes = open(&client);
        client.write_all(b"POST / HTTP/1.1\r\n\r\n").unwrap();
        let mut buf = [0u8; 64];
        assert!(server.read(&mut buf).unwrap() > 0);
        drop(server);
        assert_eq!(client.read(&mut buf).unwrap(), 0);
        assert_closure(&probes, Closure::WithoutAnswer);
    }

    #[test]
    fn a_server_that_answered_part_and_closed_sent_bytes() {
        let (mut client, mut server) = pair();
        let probes = open(&client);
        server.write_all(b"HTTP/1.1 200").unwrap();
        drop(server);
        let mut buf = [0u8; 64];
        while client.read(&mut buf).unwrap() > 0 {}
        assert_closure(&probes, Closure::Unknown);
    }

    /// Waits (polling the socket's state, no timer) until the server's reset has arrived.
    fn until_reset(client: &TcpStream) {
        while counters_of(client).state != TCP_CLOSE {
            std::thread::yield_now();
        }
    }

    fn counters_of(client: &TcpStream) -> Counters {
        counters(client.as_raw_fd()).unwrap()
    }

    const REQUEST: &[u8] = b"POST / HTTP/1.1\r\ncontent-length: 2\r\n\r\nhi";

    /// Returns once the whole request waits, unread, in the server's receive buffer.
    fn arrived_unread(server: &TcpStream) {
        let mut buf = [0u8; 64];
        while server.peek(&mut buf).unwrap() < REQUEST.len() {
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_server_that_closed_with_the_request_unread_reset_the_connection() {
        let (mut client, server) = pair();
        let probes = open(&client);
        client.write_all(REQUEST).unwrap();
        arrived_unread(&server);
        drop(server);
        until_reset(&client);
        let mut buf = [0u8; 16];
        assert!(client.read(&mut buf).is_err());
        assert_closure(&probes, Closure::RequestNotTaken);
    }

    #[test]
    fn a_server_that_shut_down_then_closed_with_the_request_unread_sent_a_fin_then_a_reset() {
        let (client, server) = pair();
        let probes = open(&client);
        (&client).write_all(REQUEST).unwrap();
        arrived_unread(&server);
        // The FIN acknowledges the request; only the reset that follows says it went unread.
        server.shutdown(std::net::Shutdown::Both).unwrap();
        while !counters_of(&client).fin_received() {
            std::thread::yield_now();
        }
        assert!(counters_of(&client).acked > probes[0].before.acked);
        assert_closure(&probes, Closure::WithoutAnswer);
        drop(server);
        until_reset(&client);
        assert_closure(&probes, Closure::RequestNotTaken);
    }

    #[test]
    fn a_server_that_answered_part_and_reset_sent_data() {
        let (mut client, mut server) = pair();
        let probes = open(&client);
        client.write_all(REQUEST).unwrap();
        arrived_unread(&server);
        server.write_all(b"HTTP/1.1 200").unwrap();
        drop(server);
        until_reset(&client);
        assert_closure(&probes, Closure::Unknown);
    }
}
