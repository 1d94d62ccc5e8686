//! The per-request timeline: stamps taken on the forwarding path, relative to t0.
//!
//! Every stamp is a monotonic `Instant` turned into nanoseconds since t0. One wall-clock anchor,
//! read together with t0, converts them to wall time for records and exports. Intervals are never
//! computed from wall-clock readings.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use tokentap_record::ChunkStamp;

/// The two clocks of one request, read together at t0.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Anchor {
    pub t0: Instant,
    pub wall: SystemTime,
}

impl Anchor {
    pub(crate) fn now() -> Self {
        Self { t0: Instant::now(), wall: SystemTime::now() }
    }

    /// Nanoseconds from t0 to `at` (0 if `at` is earlier, which a monotonic clock never gives).
    pub(crate) fn since_t0(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.t0).as_nanos() as u64
    }

    pub(crate) fn elapsed_ns(&self) -> u64 {
        self.since_t0(Instant::now())
    }

    /// Wall-clock time of t0 as nanoseconds since the Unix epoch.
    pub(crate) fn wall_ns(&self) -> u128 {
        self.wall.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
    }
}

/// The bytes all requests together keep for analysis (`[timeline] max_kept_bytes`): taken as a
/// piece is kept (one atomic add on the body hook), given back when the body is released. A
/// request that finds the budget spent keeps no more (its analysis sees a prefix and says so), so
/// many large bodies at once cannot grow memory past it.
#[derive(Debug)]
pub(crate) struct KeptBudget {
    used: AtomicUsize,
    max: usize,
    /// Bodies that stopped keeping bytes because the budget was spent.
    hits: AtomicU64,
}

impl KeptBudget {
    pub(crate) fn new(max: usize) -> Arc<KeptBudget> {
        Arc::new(KeptBudget { used: AtomicUsize::new(0), max, hits: AtomicU64::new(0) })
    }

    fn take(&self, n: usize) -> bool {
        if self.used.fetch_add(n, Ordering::Relaxed) + n > self.max {
            self.used.fetch_sub(n, Ordering::Relaxed);
            self.hits.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn give(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::Relaxed);
    }

    /// Bytes kept now by all requests.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

impl Default for KeptBudget {
    fn default() -> Self {
        KeptBudget { used: AtomicUsize::new(0), max: usize::MAX, hits: AtomicU64::new(0) }
    }
}

/// Pieces at most this long are copied into a shared buffer instead of kept by reference. A kept
/// reference to a tiny piece holds its own allocation (and a shared header) for a byte or two,
/// so a body of one-byte chunks would cost a hundred times its bytes. A piece tokentap's relay
/// reads shares its read buffer (`forward::upstream_client`, 4–64 KiB): kept by reference, one
/// server-sent event (typically 150–400 bytes) would keep that whole buffer alive until the record
/// worker is done with it. A piece pingora's HTTP/1 client reads (HTTP/2 upstreams, `relay =
/// "pingora"`) is a `Bytes` made from a `Vec`: its first clone allocates a shared header, freed
/// later on the worker's thread. The copy is a `memcpy` of at most this many bytes into a buffer
/// with room (one allocation per buffer); larger pieces are kept by reference (a relay's piece
/// then keeps its whole read buffer alive, and is charged it: [`ReadBuffer`]).
const SMALL_PIECE: usize = 512;

/// The shared buffers small pieces are copied into; each is charged whole to the budget when it
/// is started.
const SMALL_PIECE_BUFFER: usize = 4096;

/// What one kept piece's entry costs besides its bytes (its slot in `pieces`).
pub(crate) const PIECE_SLOT_COST: usize = std::mem::size_of::<(u64, Bytes)>();

/// The read buffer a piece was split from, when it shares one with other pieces (tokentap's relay
/// reads the answer into one buffer and splits each piece off it: `forward::upstream_client`). A
/// piece kept by reference keeps that whole buffer alive, so the first piece kept from a buffer is
/// charged the buffer's capacity and later ones from the same buffer nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadBuffer {
    /// The buffer's own number (process-wide, never reused).
    pub(crate) id: u64,
    pub(crate) capacity: usize,
}

/// Bytes kept for off-path analysis, up to a cap. `Bytes` clones are reference counts, not copies
/// (small pieces are copied into shared buffers, see [`SMALL_PIECE`]). What the pieces really
/// cost — their bytes, their entries' room and the shared buffers — is taken from the budget of
/// all requests, so that `max_kept_bytes` bounds the memory, not only the bytes.
#[derive(Debug, Default)]
pub(crate) struct CapturedBody {
    /// Kept pieces with their arrival time (ns since t0).
    pub pieces: Vec<(u64, Bytes)>,
    /// Body bytes kept (what the per-body cap counts).
    pub kept_bytes: usize,
    pub total_bytes: u64,
    pub truncated: bool,
    /// The budget of all requests, when there is one (`charged` of it are this body's).
    pub budget: Option<Arc<KeptBudget>>,
    /// Bytes taken from the budget: kept bytes of large pieces, entry room, shared buffers.
    charged: usize,
    /// The shared buffer small pieces are copied into now (its room is charged already).
    small: bytes::BytesMut,
    /// When the open run began: small pieces kept by [`CapturedBody::push_coalesced`] wait in
    /// `small`, behind the pieces already in `pieces`, until the run is closed into one entry
    /// (its slot in `pieces` is reserved and charged when the run opens).
    run_t_ns: Option<u64>,
    /// The read buffer already charged whole for a piece kept by reference ([`ReadBuffer`]).
    charged_buffer: Option<u64>,
    /// The body's length when its head says it ([`CapturedBody::expect`]).
    expected_bytes: Option<u64>,
}

impl CapturedBody {
    /// An empty body that takes its bytes from `budget`.
    #[cfg(test)]
    pub(crate) fn with_budget(budget: Arc<KeptBudget>) -> Self {
        let mut body = CapturedBody::default();
        body.budget = Some(budget);
        body
    }

    /// Like [`CapturedBody::push`], and at most `max_pieces` pieces: a WebSocket client that
    /// drips bytes in tiny reads would otherwise grow the piece list far beyond its bytes.
    pub(crate) fn push_at_most(&mut self, piece: &Bytes, t_ns: u64, cap: usize, max_pieces: usize) {
        if self.pieces.len() >= max_pieces {
            self.total_bytes += piece.len() as u64;
            self.stop();
            return;
        }
        self.push(piece, t_ns, cap);
    }

    pub(crate) fn push(&mut self, piece: &Bytes, t_ns: u64, cap: usize) {
        self.keep(piece, t_ns, cap, false, None);
    }

    /// Like [`CapturedBody::push`], for a piece split off a shared read buffer.
    pub(crate) fn push_from(&mut self, piece: &Bytes, t_ns: u64, cap: usize, buffer: Option<ReadBuffer>) {
        self.keep(piece, t_ns, cap, false, buffer);
    }

    /// The body's length, from its head's `Content-Length`: a shared buffer for its small pieces
    /// then has room for what is left of the body (at least the piece, at most
    /// [`SMALL_PIECE_BUFFER`]), so a 200-byte request body takes 200 bytes, not 4 KiB.
    pub(crate) fn expect(&mut self, length: u64) {
        self.expected_bytes = Some(length);
    }

    /// Like [`CapturedBody::push`], for a body that is only read back whole ([`CapturedBody::concat`]):
    /// consecutive small pieces are kept as one entry (stamped with the first one's time), so a
    /// body of one-byte chunks costs its bytes and an entry per shared buffer, not an entry per
    /// chunk. Until the run is closed (by a larger piece, a full buffer or the cap) its bytes are
    /// in `concat` but not yet in `pieces`.
    pub(crate) fn push_coalesced(&mut self, piece: &Bytes, t_ns: u64, cap: usize) {
        self.keep(piece, t_ns, cap, true, None);
    }

    fn keep(&mut self, piece: &Bytes, t_ns: u64, cap: usize, coalesce: bool, buffer: Option<ReadBuffer>) {
        self.total_bytes += piece.len() as u64;
        if self.truncated {
            return;
        }
        if self.kept_bytes + piece.len() > cap {
            self.stop();
            return;
        }
        let small = piece.len() <= SMALL_PIECE;
        let new_buffer = small && self.small.capacity() - self.small.len() < piece.len();
        // A new shared buffer's room: what is left of a body of known length (this piece's
        // bytes counted in `total_bytes` already, and a small piece never longer than the
        // buffer), else the usual size. Worked out only when a buffer is started.
        let buffer_room = match self.expected_bytes {
            Some(expected) if new_buffer => {
                let left = expected.saturating_sub(self.total_bytes - piece.len() as u64);
                usize::try_from(left).unwrap_or(usize::MAX).clamp(piece.len(), SMALL_PIECE_BUFFER)
            }
            _ => SMALL_PIECE_BUFFER,
        };
        // A small piece that fits the open run's buffer joins the run: no new entry.
        let joins = coalesce && small && !new_buffer && self.run_t_ns.is_some();
        // Entries taken or promised (the open run's); a new entry needs one more slot.
        let promised = self.pieces.len() + usize::from(self.run_t_ns.is_some());
        // What keeping this piece adds: room for more entries (doubling), a new shared buffer
        // for a small piece that does not fit the current one, or a large piece's bytes (the
        // whole read buffer it shares, the first time one of its pieces is kept).
        let grow = if !joins && promised == self.pieces.capacity() { promised.max(8) } else { 0 };
        let charge = grow * PIECE_SLOT_COST
            + if small {
                if new_buffer {
                    buffer_room
                } else {
                    0
                }
            } else {
                match buffer {
                    Some(b) if self.charged_buffer == Some(b.id) => 0,
                    Some(b) => b.capacity.max(piece.len()),
                    None => piece.len(),
                }
            };
        if charge > 0 {
            if self.budget.as_ref().is_some_and(|b| !b.take(charge)) {
                self.stop();
                return;
            }
            self.charged += charge;
        }
        if !small {
            if let Some(b) = buffer {
                self.charged_buffer = Some(b.id);
            }
        }
        if grow > 0 {
            self.pieces.reserve_exact(promised + grow - self.pieces.len());
        }
        if !joins {
            self.close_run();
        }
        let kept = if small {
            if new_buffer {
                self.small = bytes::BytesMut::with_capacity(buffer_room);
            }
            self.small.extend_from_slice(piece);
            if coalesce {
                self.run_t_ns.get_or_insert(t_ns);
                None
            } else {
                Some(self.small.split().freeze())
            }
        } else {
            Some(piece.clone())
        };
        self.kept_bytes += piece.len();
        if let Some(kept) = kept {
            self.pieces.push((t_ns, kept));
        }
    }

    /// Keeps nothing more: the open run becomes an entry (into its reserved slot).
    fn stop(&mut self) {
        self.truncated = true;
        self.close_run();
    }

    /// The open run of small pieces, if any, becomes one entry (its slot is reserved).
    fn close_run(&mut self) {
        if let Some(t_ns) = self.run_t_ns.take() {
            let run = self.small.split().freeze();
            self.pieces.push((t_ns, run));
        }
    }

    /// Lets go of the kept bytes (overload): the counts stay, the pieces are released.
    pub(crate) fn shed(&mut self) {
        self.pieces = Vec::new();
        self.small = bytes::BytesMut::new();
        self.run_t_ns = None;
        if let Some(budget) = &self.budget {
            budget.give(self.charged);
        }
        self.charged = 0;
        self.kept_bytes = 0;
    }

    /// Bytes taken from the budget of all requests for this body.
    #[cfg(test)]
    pub(crate) fn charged(&self) -> usize {
        self.charged
    }

    /// The kept bytes as one contiguous buffer (the open run's included).
    pub(crate) fn concat(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.kept_bytes);
        for (_, p) in &self.pieces {
            out.extend_from_slice(p);
        }
        if self.run_t_ns.is_some() {
            out.extend_from_slice(&self.small);
        }
        out
    }
}

impl Drop for CapturedBody {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.give(self.charged);
        }
    }
}

/// One upstream chunk as the forwarding path stamps it: where its bytes lie in the body, when it
/// arrived, and when it was handed to the client. 32 bytes, against the record's 72-byte
/// [`ChunkStamp`] (whose ACK times the record worker fills in): an open stream keeps one per
/// chunk until it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HandoffStamp {
    pub offset: u64,
    pub t_up_ns: u64,
    /// [`NOT_HANDED_OFF`] until the chunk's last byte is handed to the client.
    t_handoff_ns: u64,
    pub len: u32,
}

/// A chunk not (yet) handed off: no real stamp is this late (584 years after t0).
const NOT_HANDED_OFF: u64 = u64::MAX;

impl HandoffStamp {
    pub(crate) fn t_handoff_ns(&self) -> Option<u64> {
        (self.t_handoff_ns != NOT_HANDED_OFF).then_some(self.t_handoff_ns)
    }

    /// The record's stamp (its ACK times are the worker's to fill in).
    pub(crate) fn chunk_stamp(&self) -> ChunkStamp {
        ChunkStamp {
            offset: self.offset,
            len: self.len,
            t_up_ns: self.t_up_ns,
            t_handoff_ns: self.t_handoff_ns(),
            t_acked_ns: None,
            t_ack_after_ns: None,
        }
    }
}

/// What one chunk entry costs in memory: its stamp and the client-socket reading taken at its
/// handoff (`AckTracker::at_handoff`, which never holds more readings than there are entries).
pub(crate) const STAMP_COST: usize =
    std::mem::size_of::<HandoffStamp>() + std::mem::size_of::<tokentap_record::ack::AckSample>();

/// The response side of the timeline: one entry per upstream body chunk, bounded by
/// `max_chunks` and, with the body's budget, by bytes: room for entries is taken from the budget
/// of all requests as the vector grows (a few atomic adds per request, not one per chunk).
#[derive(Debug, Default)]
pub(crate) struct ChunkTimeline {
    pub chunks: Vec<HandoffStamp>,
    /// Bytes of entry room taken from the body's budget (given back on drop).
    pub stamp_bytes: usize,
    /// Pieces whose bytes are kept for analysis, parallel to `chunks` while not truncated.
    pub body: CapturedBody,
    pub chunk_count: u64,
    pub chunks_truncated: bool,
    /// Bytes handed downstream so far (to match handoffs to chunks).
    pub handed_off_bytes: u64,
    next_handoff: usize,
    /// When the first and last chunk arrived (kept even when entries are truncated).
    pub first_chunk_ns: Option<u64>,
    pub last_chunk_ns: Option<u64>,
    /// Largest handoff − arrival seen, over all chunks.
    pub max_handoff_lag_ns: u64,
    /// Spans in which tokentap held the provider: its upstream window closed by back-pressure
    /// from the client (`forward::upstream_queue`), at most `MAX_HELD_SPANS`.
    pub upstream_held: Vec<(u64, u64)>,
}

impl ChunkTimeline {
    /// Records an upstream chunk. Called from the upstream body hook: push only, no parsing.
    /// `buffer`: the read buffer the piece shares with others (tokentap's relay), if any.
    pub(crate) fn on_upstream_chunk(
        &mut self,
        piece: &Bytes,
        t_up_ns: u64,
        max_chunks: usize,
        max_bytes: usize,
        buffer: Option<ReadBuffer>,
    ) {
        let offset = self.body.total_bytes;
        self.chunk_count += 1;
        self.first_chunk_ns.get_or_insert(t_up_ns);
        self.last_chunk_ns = Some(t_up_ns);
        if self.chunks.len() < max_chunks && self.room_for_one_more(max_chunks) {
            self.chunks.push(HandoffStamp { offset, t_up_ns, t_handoff_ns: NOT_HANDED_OFF, len: piece.len() as u32 });
        } else {
            self.chunks_truncated = true;
        }
        self.body.push_from(piece, t_up_ns, max_bytes, buffer);
    }

    /// Makes sure the entry vector has room for one more entry, growing it (by doubling, up to
    /// `max_chunks`) only with room taken from the budget; false when the budget is spent.
    fn room_for_one_more(&mut self, max_chunks: usize) -> bool {
        if self.chunks.len() < self.chunks.capacity() {
            return true;
        }
        let len = self.chunks.len();
        let grow = len.max(8).min(max_chunks - len);
        if let Some(budget) = &self.body.budget {
            if !budget.take(grow * STAMP_COST) {
                return false;
            }
            self.stamp_bytes += grow * STAMP_COST;
        }
        self.chunks.reserve_exact(grow);
        true
    }

    /// Records that `len` more bytes were handed to the downstream connection at `t_ns`.
    pub(crate) fn on_handoff(&mut self, len: usize, t_ns: u64) {
        self.handed_off_bytes += len as u64;
        while let Some(chunk) = self.chunks.get_mut(self.next_handoff) {
            if chunk.offset + u64::from(chunk.len) > self.handed_off_bytes {
                break;
            }
            chunk.t_handoff_ns = t_ns.min(NOT_HANDED_OFF - 1);
            self.max_handoff_lag_ns = self.max_handoff_lag_ns.max(t_ns.saturating_sub(chunk.t_up_ns));
            self.next_handoff += 1;
        }
    }
}

impl Drop for ChunkTimeline {
    fn drop(&mut self) {
        if let Some(budget) = &self.body.budget {
            budget.give(self.stamp_bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_of_all_requests_bounds_what_they_keep_together_and_is_given_back() {
        // One large piece costs its bytes and the room of 8 entries.
        let one = 8 * PIECE_SLOT_COST + 800;
        let budget = KeptBudget::new(2 * one + 100);
        let piece = Bytes::from(vec![b'x'; 800]);
        let mut a = CapturedBody::with_budget(budget.clone());
        let mut b = CapturedBody::with_budget(budget.clone());
        a.push(&piece, 0, 1 << 20);
        b.push(&piece, 0, 1 << 20);
        a.push(&piece, 1, 1 << 20);
        assert!(a.truncated && !b.truncated, "the third piece would pass the budget");
        assert_eq!((budget.used(), budget.hits()), (2 * one, 1));
        assert_eq!(a.total_bytes, 1600, "counts go on");
        b.shed();
        assert_eq!(budget.used(), one);
        drop(a);
        assert_eq!(budget.used(), 0, "released bodies give their bytes back");
        let mut c = CapturedBody::with_budget(budget.clone());
        c.push(&Bytes::from(vec![b'y'; 1000]), 0, 1 << 20);
        assert!(!c.truncated);
    }

    #[test]
    fn event_sized_pieces_are_copied_into_one_buffer_and_larger_ones_kept_by_reference() {
        let budget = KeptBudget::new(1 << 20);
        let mut body = CapturedBody::with_budget(budget.clone());
        // Pieces as an HTTP/1 upstream's reads arrive: each its own `Vec`.
        let events: Vec<Bytes> = (0..10u8).map(|i| Bytes::from(vec![b'a' + i; 300])).collect();
        for (i, e) in events.iter().enumerate() {
            body.push(e, i as u64, 1 << 20);
        }
        let large = Bytes::from(vec![b'z'; SMALL_PIECE + 1]);
        body.push(&large, 10, 1 << 20);
        let kept: Vec<&Bytes> = body.pieces.iter().map(|(_, p)| p).collect();
        for (k, e) in kept.iter().zip(&events) {
            assert_eq!(k, &e, "the same bytes");
            assert_ne!(k.as_ptr(), e.as_ptr(), "copied, not a reference to the upstream's read");
        }
        // Ten 300-byte copies fit one 4 KiB buffer, back to back.
        assert!(kept[..10].windows(2).all(|w| w[1].as_ptr() as usize == w[0].as_ptr() as usize + 300));
        assert_eq!(kept[10].as_ptr(), large.as_ptr(), "a larger piece is kept by reference");
        assert_eq!(body.charged(), 8 * PIECE_SLOT_COST + 8 * PIECE_SLOT_COST + SMALL_PIECE_BUFFER + SMALL_PIECE + 1);
    }

    /// A body whose length its head said takes shared buffers sized to what is left of it: a small
    /// body its bytes, a larger one 4 KiB buffers until its last; a body longer than it said (or
    /// split in any pieces) is still kept whole.
    #[test]
    fn a_body_of_known_length_takes_buffers_of_its_size() {
        let cases = [
            (200usize, vec![200usize]),
            (200, vec![50, 50, 100]),
            (10_000, vec![400; 25]),
            (100, vec![300, 300]),
            (200_000, vec![1000, 100, 60_000, 300]),
        ];
        for (length, pieces) in cases {
            let budget = KeptBudget::new(1 << 20);
            let mut body = CapturedBody::with_budget(budget.clone());
            body.expect(length as u64);
            let bytes: Vec<u8> = (0..pieces.iter().sum::<usize>()).map(|i| (i % 251) as u8).collect();
            let mut at = 0;
            for (i, n) in pieces.iter().enumerate() {
                body.push_coalesced(&Bytes::copy_from_slice(&bytes[at..at + n]), i as u64, 1 << 20);
                at += n;
            }
            assert_eq!(body.concat(), bytes, "{length} {pieces:?}");
            let sent: usize = pieces.iter().sum();
            let buffers = body.charged() - 8 * PIECE_SLOT_COST * body.pieces.capacity().div_ceil(8).max(1);
            if sent <= length && length <= SMALL_PIECE_BUFFER {
                assert_eq!(buffers, length, "one buffer of the body's size: {pieces:?}");
            } else {
                assert!(buffers < sent + SMALL_PIECE_BUFFER, "{length} {pieces:?}: {buffers}");
            }
        }
    }

    /// Pieces split off one read buffer (tokentap's relay): the first kept by reference is charged
    /// the whole buffer it keeps alive, later ones from it nothing more, a piece of a new buffer
    /// that buffer; copied pieces charge their shared copy buffer as ever.
    #[test]
    fn pieces_kept_from_a_shared_read_buffer_are_charged_the_buffer_once() {
        let budget = KeptBudget::new(1 << 20);
        let mut body = CapturedBody::with_budget(budget.clone());
        let first = ReadBuffer { id: 7, capacity: 4096 };
        let second = ReadBuffer { id: 8, capacity: 8192 };
        let large = Bytes::from(vec![b'z'; SMALL_PIECE + 1]);
        let small = Bytes::from(vec![b'a'; 100]);
        body.push_from(&small, 0, 1 << 20, Some(first));
        assert_eq!(body.charged(), 8 * PIECE_SLOT_COST + SMALL_PIECE_BUFFER, "a copied piece keeps no read buffer");
        body.push_from(&large, 1, 1 << 20, Some(first));
        body.push_from(&large, 2, 1 << 20, Some(first));
        assert_eq!(body.charged(), 8 * PIECE_SLOT_COST + SMALL_PIECE_BUFFER + 4096);
        body.push_from(&large, 3, 1 << 20, Some(second));
        assert_eq!(body.charged(), 8 * PIECE_SLOT_COST + SMALL_PIECE_BUFFER + 4096 + 8192);
        // A piece larger than the capacity noted (never from the relay) is charged its bytes.
        let huge = Bytes::from(vec![b'h'; 10_000]);
        body.push_from(&huge, 4, 1 << 20, Some(ReadBuffer { id: 9, capacity: 4096 }));
        assert_eq!(body.charged(), 8 * PIECE_SLOT_COST + SMALL_PIECE_BUFFER + 4096 + 8192 + 10_000);
        assert_eq!(budget.used(), body.charged());
        assert_eq!(body.pieces.len(), 5);
        drop(body);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn small_pieces_share_buffers_and_every_kept_byte_of_memory_is_charged() {
        let budget = KeptBudget::new(1 << 20);
        let mut body = CapturedBody::with_budget(budget.clone());
        let one = Bytes::from_static(b"x");
        for i in 0..100_000 {
            body.push(&one, i, 1 << 30);
        }
        assert!(body.truncated, "the budget stops a body of one-byte pieces");
        let kept = body.pieces.len();
        // Each kept piece costs its entry and its byte in a shared buffer: the charge covers both.
        let real = body.pieces.capacity() * PIECE_SLOT_COST + kept.div_ceil(SMALL_PIECE_BUFFER) * SMALL_PIECE_BUFFER;
        assert!(body.charged() >= real, "charged {} < real {real}", body.charged());
        assert!(body.charged() <= 1 << 20);
        assert_eq!(budget.used(), body.charged());
        // The bytes read back as they came, each piece with its own time.
        assert!(body.pieces.iter().enumerate().all(|(i, (t, p))| *t == i as u64 && p.as_ref() == b"x"));
        assert_eq!(body.concat().len(), kept);
        drop(body);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_body_read_back_whole_keeps_runs_of_small_pieces_as_one_entry() {
        let budget = KeptBudget::new(1 << 20);
        let mut body = CapturedBody::with_budget(budget.clone());
        let mut sent = Vec::new();
        let one = Bytes::from_static(b"x");
        for i in 0..10_000 {
            body.push_coalesced(&one, i, 1 << 20);
            sent.push(b'x');
        }
        // A larger piece closes the run and is kept by reference; small ones open a new run.
        let large = Bytes::from(vec![b'L'; SMALL_PIECE + 1]);
        body.push_coalesced(&large, 10_000, 1 << 20);
        sent.extend_from_slice(&large);
        for i in 0..3u8 {
            let piece = Bytes::from(vec![b'a' + i; 3]);
            body.push_coalesced(&piece, 10_001 + u64::from(i), 1 << 20);
            sent.extend_from_slice(&piece);
        }
        assert_eq!(body.concat(), sent, "the bytes read back as they came, the open run included");
        assert_eq!(body.kept_bytes, sent.len());
        // 10,000 one-byte pieces fill three 4 KiB buffers: three entries, then the large piece.
        let runs: Vec<(u64, usize)> = body.pieces.iter().map(|(t, p)| (*t, p.len())).collect();
        assert_eq!(runs, [(0, 4096), (4096, 4096), (8192, 1808), (10_000, SMALL_PIECE + 1)]);
        assert_eq!(body.pieces[3].1.as_ptr(), large.as_ptr());
        // The three small pieces after the large one fit the third buffer's room.
        let real = body.pieces.capacity() * PIECE_SLOT_COST + 3 * SMALL_PIECE_BUFFER + large.len();
        assert_eq!(body.charged(), real, "entries' room, three buffers and the large piece");
        assert_eq!(budget.used(), body.charged());
        // The cap closes the open run into its reserved slot.
        body.push_coalesced(&Bytes::from(vec![b'z'; 2]), 20_000, body.kept_bytes + 1);
        assert!(body.truncated);
        assert_eq!(body.pieces.last().map(|(t, p)| (*t, p.as_ref())), Some((10_001, &b"aaabbbccc"[..])));
        assert_eq!(body.concat(), sent);
        body.shed();
        assert_eq!((budget.used(), body.concat().len()), (0, 0));
    }

    #[test]
    fn a_coalesced_body_of_one_byte_pieces_is_stopped_by_the_budget_at_its_bytes() {
        let budget = KeptBudget::new(64 << 10);
        let mut body = CapturedBody::with_budget(budget.clone());
        let one = Bytes::from_static(b"x");
        for i in 0..1_000_000 {
            body.push_coalesced(&one, i, 1 << 30);
        }
        assert!(body.truncated, "the budget stops the body");
        assert_eq!(body.total_bytes, 1_000_000, "counts go on");
        // Nearly all of the budget holds bytes: one entry per 4 KiB buffer.
        assert!(body.kept_bytes >= 60 << 10, "kept {}", body.kept_bytes);
        assert!(body.pieces.len() <= 16 && body.charged() <= 64 << 10);
        assert_eq!(body.concat().len(), body.kept_bytes);
    }

    #[test]
    fn chunk_entries_take_their_room_from_the_budget_and_give_it_back() {
        let budget = KeptBudget::new(1000 * STAMP_COST);
        let mut t = ChunkTimeline::default();
        t.body.budget = Some(budget.clone());
        let piece = Bytes::from_static(b"x");
        for i in 0..5000 {
            t.on_upstream_chunk(&piece, i, 50_000, 0, None);
        }
        assert!(t.chunks_truncated, "the budget, not max_chunks, stopped the entries");
        assert!(t.chunks.len() < 1000 && t.chunks.capacity() * STAMP_COST <= t.stamp_bytes);
        assert_eq!(budget.used(), t.stamp_bytes);
        assert_eq!(t.chunk_count, 5000, "counts go on");
        let mut other = ChunkTimeline::default();
        other.body.budget = Some(budget.clone());
        other.on_upstream_chunk(&piece, 0, 50_000, 0, None);
        assert!(budget.used() <= 1000 * STAMP_COST);
        drop(t);
        drop(other);
        assert_eq!(budget.used(), 0, "dropped timelines give their room back");
        let mut capped = ChunkTimeline::default();
        capped.body.budget = Some(budget.clone());
        for i in 0..100 {
            capped.on_upstream_chunk(&piece, i, 20, 0, None);
        }
        assert_eq!(capped.chunks.len(), 20);
        assert_eq!(capped.chunks.capacity(), 20, "never grown past max_chunks");
    }

    #[test]
    fn a_stamp_kept_per_chunk_is_small_and_becomes_the_records_stamp() {
        assert_eq!(std::mem::size_of::<HandoffStamp>(), 32, "what an open stream keeps per chunk");
        let mut t = ChunkTimeline::default();
        t.on_upstream_chunk(&Bytes::from_static(b"abc"), 10, 10, 100, None);
        t.on_upstream_chunk(&Bytes::from_static(b"de"), 20, 10, 100, None);
        t.on_handoff(3, u64::MAX);
        let stamps: Vec<ChunkStamp> = t.chunks.iter().map(HandoffStamp::chunk_stamp).collect();
        let expected = |offset, len, t_up_ns, t_handoff_ns| ChunkStamp {
            offset,
            len,
            t_up_ns,
            t_handoff_ns,
            t_acked_ns: None,
            t_ack_after_ns: None,
        };
        // A handoff at the last nanosecond is still a handoff, not "not handed off".
        assert_eq!(stamps, [expected(0, 3, 10, Some(u64::MAX - 1)), expected(3, 2, 20, None)]);
    }

    #[test]
    fn handoffs_match_chunks_by_byte_range() {
        let mut t = ChunkTimeline::default();
        t.on_upstream_chunk(&Bytes::from_static(b"abc"), 10, 10, 100, None);
        t.on_upstream_chunk(&Bytes::from_static(b"de"), 20, 10, 100, None);
        t.on_handoff(3, 11);
        assert_eq!(t.chunks[0].t_handoff_ns(), Some(11));
        assert_eq!(t.chunks[1].t_handoff_ns(), None);
        t.on_handoff(2, 25);
        assert_eq!(t.chunks[1].t_handoff_ns(), Some(25));
        assert_eq!(t.chunks[1].offset, 3);
        assert_eq!(t.max_handoff_lag_ns, 5);
    }

    #[test]
    fn caps_bound_memory_but_counts_continue() {
        let mut t = ChunkTimeline::default();
        for i in 0..10 {
            t.on_upstream_chunk(&Bytes::from_static(b"0123456789"), i, 4, 25, None);
        }
        assert_eq!(t.chunks.len(), 4);
        assert!(t.chunks_truncated);
        assert_eq!(t.chunk_count, 10);
        assert_eq!(t.body.kept_bytes, 20);
        assert!(t.body.truncated);
        assert_eq!(t.body.total_bytes, 100);
        assert_eq!(t.last_chunk_ns, Some(9));
    }
}
