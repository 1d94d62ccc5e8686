//! Upstream bytes that waited in tokentap's own socket. pingora reads the next upstream piece
//! only once the previous one is written to the client; when a slow client's socket buffer is
//! full, that write waits, and the provider's next bytes wait in tokentap's upstream socket
//! meanwhile. Stamped when read, they would show the client's pace as the provider's: a stall the
//! provider never had, a slower inter-token latency and output rate.
//!
//! So after a gap between two reads, and then at every read while bytes that waited are still
//! queued, the upstream socket is read (a getsockopt and an ioctl on a duplicate of its descriptor, taken at
//! the first such read): each reading is an **observation** that the socket had received
//! `tcpi_bytes_received` bytes by then, and by `tcpi_last_data_recv` earlier (less one kernel
//! clock tick, the counter's resolution), since nothing arrived after that. The bytes read so far
//! end at `tcpi_bytes_received` − the bytes still queued (`FIONREAD`), so the piece just read had
//! arrived by the earliest observation that had received that many. Never early: an upper bound.
//! Nothing is read while pieces come in quick succession, as in a stream that keeps up.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use pingora::protocols::l4::ext::get_tcp_info;

/// A read this long after the one before is checked: a gap the provider or the client made.
/// Streams whose events come faster cost nothing more; one whose events are this far apart costs
/// two system calls per event, at most ten a second.
pub(crate) const CHECK_GAP_NS: u64 = 100_000_000;
/// A closed window held the provider only when nothing had arrived for this long.
const HELD_MIN_NS: u64 = 50_000_000;
/// The coarsest kernel clock tick (HZ = 100); `tcpi_last_data_recv` counts whole ticks.
const TICK_NS: u64 = 10_000_000;
/// Observations kept per response (the oldest that still date unread bytes come first).
const MAX_OBSERVATIONS: usize = 16;

/// One response's upstream socket and what its readings said.
#[derive(Debug, Default)]
pub(crate) struct UpstreamQueue {
    fd: Option<RawFd>,
    socket: Option<OwnedFd>,
    /// When the last piece was read (as stamped, not as dated).
    last_read_ns: Option<u64>,
    /// The last reading dated its piece earlier and found bytes still queued behind it: read at
    /// the next piece too.
    catching_up: bool,
    /// (by when, bytes received by then), both increasing.
    observations: VecDeque<(u64, u64)>,
    /// The socket was read before the read that ends this gap (`before_read`).
    read_before: bool,
}

/// One reading of the socket.
#[derive(Debug, Clone, Copy)]
struct Reading {
    /// Bytes the socket has received in all.
    received: u64,
    /// Of those, not yet read by pingora.
    queued: u64,
    /// Since its last data segment arrived.
    since_last_data_ns: u64,
    /// The receive window tokentap advertises is closed (under one segment): the provider
    /// cannot send.
    window_closed: bool,
}

/// Spans kept per response in which tokentap held the provider (`timeline.upstream_held`).
pub(crate) const MAX_HELD_SPANS: usize = 64;

impl UpstreamQueue {
    /// The connection this response comes on (again after a retry on a new one).
    pub(crate) fn connected(&mut self, fd: Option<RawFd>) {
        *self = UpstreamQueue { fd, ..UpstreamQueue::default() };
    }

    /// The response's body has ended: the duplicate descriptor is closed (it would keep open a
    /// connection pingora closes).
    pub(crate) fn finished(&mut self) {
        *self = UpstreamQueue::default();
    }

    /// tokentap's own relay, before it reads the upstream again: after a gap since the last read
    /// (its write to a slow client held it), the socket is read first. The read itself opens the
    /// window, and on a fast path the provider's held bytes are in before the piece is stamped:
    /// read after, the socket would show neither the hold nor the wait.
    #[inline]
    pub(crate) fn before_read(&mut self, now_ns: u64, held: &mut Vec<(u64, u64)>) {
        if self.read_before || self.last_read_ns.is_none_or(|last| now_ns.saturating_sub(last) < CHECK_GAP_NS) {
            return;
        }
        let Some(reading) = self.read_socket() else { return };
        self.read_before = true;
        if let Some(span) = held_span(now_ns, reading) {
            note_held(held, span);
        }
        self.observe(now_ns, reading);
    }

    /// Whether a piece was read yet (`before_read` has nothing to compare before that).
    #[inline]
    pub(crate) fn has_read(&self) -> bool {
        self.last_read_ns.is_some()
    }

    /// When the piece read at `read_ns` had arrived: `read_ns`, or earlier when the socket says
    /// its bytes were waiting (never before `previous_ns`, the previous piece's arrival). A gap
    /// at whose end the socket's window was closed with bytes waiting since is a span in which
    /// tokentap held the provider: added to `held` (`[start, end]`, at most [`MAX_HELD_SPANS`]).
    #[inline]
    pub(crate) fn arrival(&mut self, read_ns: u64, previous_ns: Option<u64>, held: &mut Vec<(u64, u64)>) -> u64 {
        let last = self.last_read_ns.replace(read_ns);
        let gap = last.is_some_and(|last| read_ns.saturating_sub(last) >= CHECK_GAP_NS);
        if !gap && !self.catching_up {
            return read_ns;
        }
        let read_before = std::mem::take(&mut self.read_before);
        let Some(reading) = self.read_socket() else {
            self.catching_up = false;
            return read_ns;
        };
        if gap && !read_before {
            if let Some(span) = held_span(read_ns, reading) {
                note_held(held, span);
            }
        }
        self.date(read_ns, reading, previous_ns)
    }

    /// Keeps a reading taken at `now_ns`: everything received had arrived by the last data
    /// segment (one tick late at most).
    fn observe(&mut self, now_ns: u64, reading: Reading) {
        let by = now_ns.saturating_sub(reading.since_last_data_ns.saturating_sub(TICK_NS));
        if self.observations.back().is_none_or(|&(_, received)| received < reading.received) {
            if self.observations.len() == MAX_OBSERVATIONS {
                self.observations.pop_back();
            }
            self.observations.push_back((by, reading.received));
        }
    }

    fn read_socket(&mut self) -> Option<Reading> {
        if self.socket.is_none() {
            self.socket = super::stale_connection::duplicate(self.fd.take()?);
        }
        let socket = self.socket.as_ref()?;
        let info = get_tcp_info(socket.as_raw_fd()).ok()?;
        let queued = rustix::io::ioctl_fionread(socket).ok()?;
        Some(Reading {
            received: info.tcpi_bytes_received,
            queued,
            since_last_data_ns: u64::from(info.tcpi_last_data_recv) * 1_000_000,
            window_closed: info.tcpi_rcv_wnd < info.tcpi_rcv_mss.max(1),
        })
    }

    /// Dates the piece read at `read_ns` by the observations, this reading's included.
    fn date(&mut self, read_ns: u64, reading: Reading, previous_ns: Option<u64>) -> u64 {
        self.observe(read_ns, reading);
        // The bytes read so far end here; observations that had received fewer date nothing more.
        let read_end = reading.received.saturating_sub(reading.queued);
        while self.observations.front().is_some_and(|&(_, received)| received < read_end) {
            self.observations.pop_front();
        }
        let arrived = self.observations.front().map_or(read_ns, |&(by, _)| by.min(read_ns));
        let arrived = previous_ns.map_or(arrived, |p| arrived.max(p)).min(read_ns);
        // Reading on only while it still dates pieces earlier: bytes that keep arriving as fast
        // as they are read (a bulk body) would otherwise cost two system calls per piece.
        self.catching_up = reading.queued > 0 && arrived < read_ns;
        arrived
    }
}

/// The span in which tokentap held the provider, read at the end of a gap: its window closed
/// with bytes unread, nothing received since the last data segment (so from then, one tick
/// late at most, to this read). `None` when the provider was free to send.
fn held_span(read_ns: u64, reading: Reading) -> Option<(u64, u64)> {
    if !reading.window_closed || reading.queued == 0 || reading.since_last_data_ns < HELD_MIN_NS {
        return None;
    }
    Some((read_ns.saturating_sub(reading.since_last_data_ns.saturating_sub(TICK_NS)), read_ns))
}

/// Adds `span` to `held`, merged with the last one when they meet; at most [`MAX_HELD_SPANS`].
fn note_held(held: &mut Vec<(u64, u64)>, span: (u64, u64)) {
    if let Some(last) = held.last_mut().filter(|last| span.0 <= last.1) {
        last.1 = last.1.max(span.1);
    } else if held.len() < MAX_HELD_SPANS {
        held.push(span);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    const MS: u64 = 1_000_000;

    fn reading(received: u64, queued: u64, since_last_data_ms: u64) -> Reading {
        Reading { received, queued, since_last_data_ns: since_last_data_ms * MS, window_closed: false }
    }

    #[test]
    fn a_gap_ending_on_a_closed_window_with_bytes_waiting_is_held() {
        let closed = Reading { window_closed: true, ..reading(1_000_000, 100_000, 1_800) };
        assert_eq!(held_span(3_000 * MS, closed), Some((1_210 * MS, 3_000 * MS)));
        assert_eq!(held_span(3_000 * MS, reading(1_000_000, 100_000, 1_800)), None, "window open: free to send");
        assert_eq!(held_span(3_000 * MS, Reading { queued: 0, ..closed }), None, "nothing waiting");
        assert_eq!(held_span(3_000 * MS, Reading { since_last_data_ns: 20 * MS, ..closed }), None, "fresh bytes");
        let mut held = Vec::new();
        note_held(&mut held, (10, 20));
        note_held(&mut held, (15, 30));
        note_held(&mut held, (40, 50));
        assert_eq!(held, [(10, 30), (40, 50)]);
        for i in 0..100 {
            note_held(&mut held, (100 + 10 * i, 105 + 10 * i));
        }
        assert_eq!(held.len(), MAX_HELD_SPANS);
    }

    #[test]
    fn bytes_queued_since_an_observation_are_dated_by_it() {
        let mut queue = UpstreamQueue::default();
        // After a 2 s gap: 1 MB received, the last of it 1.8 s ago, 900 KB of it unread.
        assert_eq!(queue.date(3_000 * MS, reading(1_000_000, 900_000, 1_800), Some(1_100 * MS)), 1_210 * MS);
        assert!(queue.catching_up);
        // Reading on while the provider sends more (its last data just now): the bytes read are
        // still among the first million, received by 1.21 s.
        assert_eq!(queue.date(3_001 * MS, reading(1_200_000, 700_000, 0), Some(1_210 * MS)), 1_210 * MS);
        assert_eq!(queue.date(3_002 * MS, reading(1_300_000, 350_000, 0), Some(1_210 * MS)), 1_210 * MS);
        // Past the first million: dated by the reading at 3.001 s that had received them.
        assert_eq!(queue.date(3_003 * MS, reading(1_300_000, 200_000, 0), Some(1_210 * MS)), 3_001 * MS);
        // Caught up: nothing queued, read as it came.
        assert_eq!(queue.date(3_100 * MS, reading(1_400_000, 0, 0), Some(3_001 * MS)), 3_100 * MS);
        assert!(!queue.catching_up);
        // Bytes queued, but arriving as fast as they are read: nothing to date, nothing more read.
        assert_eq!(queue.date(4_000 * MS, reading(2_000_000, 50_000, 0), Some(3_100 * MS)), 4_000 * MS);
        assert!(!queue.catching_up);
    }

    #[test]
    fn a_piece_is_never_dated_before_the_previous_one_nor_after_its_read() {
        let mut queue = UpstreamQueue::default();
        assert_eq!(queue.date(5_000 * MS, reading(10, 0, 2_000), Some(4_000 * MS)), 4_000 * MS);
        let mut queue = UpstreamQueue::default();
        assert_eq!(queue.date(5_000 * MS, reading(10, 0, 5), None), 5_000 * MS, "within a tick: no wait");
    }

    #[test]
    fn reads_in_quick_succession_are_not_checked() {
        let mut queue = UpstreamQueue::default();
        let mut held = Vec::new();
        assert_eq!(queue.arrival(100 * MS, None, &mut held), 100 * MS, "the first read is not checked");
        assert_eq!(queue.arrival(130 * MS, Some(100 * MS), &mut held), 130 * MS);
        // A gap, but no socket to read: read as it came.
        assert_eq!(queue.arrival(300 * MS, Some(130 * MS), &mut held), 300 * MS);
        assert!(held.is_empty());
    }

    /// A connected pair of real sockets, the receiving one watched by a queue.
    fn watched_socket() -> (TcpStream, TcpStream, UpstreamQueue) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (receiver, _) = listener.accept().unwrap();
        let mut queue = UpstreamQueue::default();
        queue.connected(Some(receiver.as_raw_fd()));
        (sender, receiver, queue)
    }

    /// The relay reads the socket before the read that ends a gap: bytes that arrive with that
    /// read (the window it opens lets them in) do not hide the wait of those before them.
    #[test]
    fn a_reading_before_the_read_dates_the_bytes_that_waited() {
        let (mut sender, mut receiver, mut queue) = watched_socket();
        let start = std::time::Instant::now();
        let now = || start.elapsed().as_nanos() as u64;
        let mut held = Vec::new();
        sender.write_all(b"first").unwrap();
        receiver.read_exact(&mut [0u8; 5]).unwrap();
        queue.arrival(now(), None, &mut held);
        queue.before_read(now(), &mut held);
        assert!(!queue.read_before, "no gap yet: nothing read");
        let sent = now();
        sender.write_all(b"second").unwrap();
        // The bytes wait unread (the scenario: the socket's own clock is under test).
        std::thread::sleep(std::time::Duration::from_millis(120));
        queue.before_read(now(), &mut held);
        assert!(queue.read_before);
        // More bytes arrive just before the read, as they do when the read opens the window; the
        // read takes the bytes that waited.
        sender.write_all(b"third").unwrap();
        receiver.read_exact(&mut [0u8; 6]).unwrap();
        let read = now();
        let arrived = queue.arrival(read, Some(0), &mut held);
        assert!(sent <= arrived && arrived + 50 * MS <= read, "sent {sent} <= arrived {arrived}, read {read}");
        assert!(!queue.read_before, "once per gap");
    }

    /// A real socket whose peer sent bytes that wait unread: the reading dates them.
    #[test]
    fn bytes_waiting_in_a_real_socket_are_dated_by_their_arrival() {
        let (mut sender, mut receiver, mut queue) = watched_socket();
        let start = std::time::Instant::now();
        let now = || start.elapsed().as_nanos() as u64;
        sender.write_all(b"first").unwrap();
        let mut buf = [0u8; 5];
        receiver.read_exact(&mut buf).unwrap();
        let mut held = Vec::new();
        assert_eq!(queue.arrival(now(), None, &mut held), queue.last_read_ns.unwrap());
        let sent = now();
        sender.write_all(b"secondthird").unwrap();
        // The bytes wait unread (the scenario, not a synchronisation: the socket's own clock is
        // what is under test); then half of them is read.
        std::thread::sleep(std::time::Duration::from_millis(120));
        receiver.read_exact(&mut [0u8; 6]).unwrap();
        let read = now();
        let arrived = queue.arrival(read, Some(0), &mut held);
        assert!(sent <= arrived && arrived + 50 * MS <= read, "sent {sent} <= arrived {arrived}, read {read}");
        assert!(queue.catching_up, "five bytes still queued");
        receiver.read_exact(&mut buf).unwrap();
        let later = queue.arrival(now(), Some(arrived), &mut held);
        assert_eq!(later, arrived, "the rest came with them");
        assert!(!queue.catching_up);
        assert!(held.is_empty(), "the window stayed open: {held:?}");
    }
}
