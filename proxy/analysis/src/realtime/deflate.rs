//! permessage-deflate (RFC 7692): what the handshake negotiated, and inflating one direction's
//! compressed messages with the shared window carried from message to message (context takeover)
//! unless the peer said `*_no_context_takeover`.
//!
//! Window bits: the negotiated `*_max_window_bits` only limit how far back the compressor may
//! refer; an inflater with the full 32 KiB window reads any smaller window's output, so the
//! value is recorded but inflation always uses 15 bits (miniz_oxide, pure Rust, has no smaller
//! window anyway).
//!
//! Senders' variants that RFC 7692 allows or that are seen in practice: a message ending the
//! stream with a BFINAL block (§7.2.3.3; the next message starts a new stream, as browsers read
//! it), and an empty message sent as an empty payload (read as empty, the window untouched).
//!
//! Decompression bombs: a message inflates into at most `max_message_bytes` (the rest is inflated
//! and thrown away, so the shared window stays right) and a direction inflates at most
//! `max_inflated_bytes` in all; past that its compressed messages are counted, not read.

use flate2::{Decompress, FlushDecompress, Status};
use serde::{Deserialize, Serialize};

/// The negotiated permessage-deflate parameters, from the 101 response's
/// `Sec-WebSocket-Extensions` (the server's answer is what both sides use).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeflateParams {
    pub server_no_context_takeover: bool,
    pub client_no_context_takeover: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub server_max_window_bits: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub client_max_window_bits: Option<u8>,
}

impl DeflateParams {
    /// Reads a `Sec-WebSocket-Extensions` value; `None` when permessage-deflate is not in it.
    pub fn from_extensions_header(value: &str) -> Option<Self> {
        // Extensions are comma-separated; the first permessage-deflate offer is the accepted one.
        let ext = value
            .split(',')
            .find(|e| e.split(';').next().is_some_and(|n| n.trim().eq_ignore_ascii_case("permessage-deflate")))?;
        let mut params = Self::default();
        for p in ext.split(';').skip(1) {
            let (name, val) = match p.split_once('=') {
                Some((n, v)) => (n.trim(), Some(v.trim().trim_matches('"'))),
                None => (p.trim(), None),
            };
            let bits = val.and_then(|v| v.parse::<u8>().ok()).filter(|b| (8..=15).contains(b));
            match name.to_ascii_lowercase().as_str() {
                "server_no_context_takeover" => params.server_no_context_takeover = true,
                "client_no_context_takeover" => params.client_no_context_takeover = true,
                "server_max_window_bits" => params.server_max_window_bits = bits.or(Some(15)),
                "client_max_window_bits" => params.client_max_window_bits = bits.or(Some(15)),
                _ => {}
            }
        }
        Some(params)
    }
}

/// Why a compressed message could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum InflateError {
    #[error("the compressed data is invalid")]
    Corrupt,
    #[error("an earlier message could not be inflated, and the window is shared")]
    ContextLost,
    #[error("the direction's inflated byte budget is spent")]
    BudgetSpent,
}

/// A message's inflated payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inflated {
    pub payload: Vec<u8>,
    /// Inflated size in total (may exceed `payload.len()`).
    pub len: u64,
    pub truncated: bool,
}

/// Inflates one direction's messages.
pub struct Inflater {
    inner: Decompress,
    context_takeover: bool,
    max_message_bytes: usize,
    budget_left: u64,
    context_lost: bool,
}

impl std::fmt::Debug for Inflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflater").field("context_takeover", &self.context_takeover).finish_non_exhaustive()
    }
}

const TAIL: [u8; 4] = [0x00, 0x00, 0xFF, 0xFF];

/// Where inflating a message's bytes left the sender's stream.
enum Flow {
    /// Open: the message's tail comes next.
    More,
    /// Ended by a block with BFINAL set: the rest of the message is not deflate data.
    StreamEnded,
}

impl Inflater {
    pub fn new(context_takeover: bool, max_message_bytes: usize, max_inflated_bytes: u64) -> Self {
        Self {
            inner: Decompress::new(false),
            context_takeover,
            max_message_bytes,
            budget_left: max_inflated_bytes,
            context_lost: false,
        }
    }

    /// Inflates a whole compressed message payload. `payload_complete` is false when the
    /// compressed payload itself was cut by the frame cap (then the shared window is lost).
    pub fn inflate(&mut self, payload: &[u8], payload_complete: bool) -> Result<Inflated, InflateError> {
        // The budget first: spending it also loses the shared window, but what stops every later
        // message is the budget (a deflate bomb), and the label says so.
        if self.budget_left == 0 {
            return Err(InflateError::BudgetSpent);
        }
        if self.context_lost {
            return Err(InflateError::ContextLost);
        }
        if payload.is_empty() && payload_complete {
            // RFC 7692 §7.2.1 has every compressed message end in (part of) an empty stored
            // block, so a conforming payload is never empty. Some senders skip it for an empty
            // message (zlib emits nothing for a second sync flush with no input). Appending the
            // tail to nothing would leave the inflater inside a stored block's length and garble
            // every later message of the window, so an empty payload is an empty message.
            return Ok(Inflated { payload: Vec::new(), len: 0, truncated: false });
        }
        if !self.context_takeover {
            self.inner.reset(false);
        }
        let mut out = Inflated { payload: Vec::new(), len: 0, truncated: false };
        let mut scratch = [0u8; 8192];
        let result = match self.run(payload, &mut scratch, &mut out) {
            Ok(Flow::More) => self.run(&TAIL, &mut scratch, &mut out).map(|_| ()),
            Ok(Flow::StreamEnded) => Ok(()),
            Err(e) => Err(e),
        };
        if result.is_err() || !payload_complete {
            self.context_lost = self.context_takeover;
        }
        result.map(|()| out)
    }

    fn run(&mut self, mut input: &[u8], scratch: &mut [u8], out: &mut Inflated) -> Result<Flow, InflateError> {
        loop {
            if self.budget_left == 0 {
                return Ok(Flow::More);
            }
            let in_before = self.inner.total_in();
            let out_before = self.inner.total_out();
            let status =
                self.inner.decompress(input, scratch, FlushDecompress::Sync).map_err(|_| InflateError::Corrupt)?;
            let consumed = (self.inner.total_in() - in_before) as usize;
            let produced = (self.inner.total_out() - out_before) as usize;
            input = &input[consumed..];
            out.len += produced as u64;
            let room = self.max_message_bytes.saturating_sub(out.payload.len());
            if produced > room {
                out.truncated = true;
            }
            out.payload.extend_from_slice(&scratch[..produced.min(room)]);
            self.budget_left = self.budget_left.saturating_sub(produced as u64);
            if self.budget_left == 0 {
                self.context_lost = true;
                out.truncated = true;
            }
            match status {
                // A block with BFINAL set ends the sender's stream (RFC 7692 §7.2.3.3 allows it
                // where the empty-block flush is not available). What follows in this message is
                // the empty block's header at most; the next message starts a new stream, with a
                // fresh inflater (as browsers read it).
                Status::StreamEnd => {
                    self.inner.reset(false);
                    return Ok(Flow::StreamEnded);
                }
                // No progress with input left means the data is stuck; none left means done.
                _ if input.is_empty() && produced < scratch.len() => return Ok(Flow::More),
                _ if consumed == 0 && produced == 0 => return Err(InflateError::Corrupt),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use flate2::{Compress, Compression, FlushCompress};

    /// A permessage-deflate compressor for tests: each message flushed with a sync flush and the
    /// 4-byte tail removed (RFC 7692 §7.2.1).
    pub(crate) struct Deflater {
        inner: Compress,
        context_takeover: bool,
    }

    impl Deflater {
        pub(crate) fn new(context_takeover: bool) -> Self {
            Self { inner: Compress::new(Compression::default(), false), context_takeover }
        }

        pub(crate) fn compress(&mut self, message: &[u8]) -> Vec<u8> {
            if !self.context_takeover {
                self.inner.reset();
            }
            let mut out = Vec::with_capacity(message.len() + 64);
            let mut input = message;
            loop {
                out.reserve(4096);
                let before = self.inner.total_in();
                self.inner.compress_vec(input, &mut out, FlushCompress::Sync).unwrap();
                input = &input[(self.inner.total_in() - before) as usize..];
                if input.is_empty() && out.len() < out.capacity() {
                    break;
                }
            }
            end_with_empty_stored_block(&mut out);
            out.truncate(out.len() - 4);
            out
        }
    }

    /// RFC 7692 §7.2.1 step 2: the compressed data ends with an empty stored block. zlib (which
    /// pingora's build of flate2 uses) emits nothing for a sync flush right after another with no
    /// input; the stream is then byte-aligned at a block boundary, where the whole block goes.
    fn end_with_empty_stored_block(out: &mut Vec<u8>) {
        if !out.ends_with(&TAIL) {
            out.extend_from_slice(&[0x00, 0x00, 0x00, 0xFF, 0xFF]);
        }
    }

    #[test]
    fn negotiation_is_read_from_the_response_header() {
        assert_eq!(DeflateParams::from_extensions_header("x-other"), None);
        let p = DeflateParams::from_extensions_header(
            "permessage-deflate; server_no_context_takeover; client_max_window_bits=10",
        )
        .unwrap();
        assert!(p.server_no_context_takeover && !p.client_no_context_takeover);
        assert_eq!((p.server_max_window_bits, p.client_max_window_bits), (None, Some(10)));
        let p = DeflateParams::from_extensions_header("foo, permessage-deflate;client_max_window_bits").unwrap();
        assert_eq!(p.client_max_window_bits, Some(15));
    }

    #[test]
    fn context_takeover_carries_the_window() {
        for takeover in [true, false] {
            let mut d = Deflater::new(takeover);
            let mut i = Inflater::new(takeover, 1 << 20, 1 << 30);
            for n in 0..20 {
                let msg = format!("{{\"type\":\"response.output_audio.delta\",\"delta\":\"AAAA{n}\"}}").repeat(3);
                let c = d.compress(msg.as_bytes());
                let got = i.inflate(&c, true).unwrap();
                assert_eq!(got.payload, msg.as_bytes());
            }
        }
    }

    #[test]
    fn a_bomb_is_cut_and_the_budget_holds() {
        let mut d = Deflater::new(true);
        let bomb = vec![b'0'; 5_000_000];
        let c = d.compress(&bomb);
        assert!(c.len() < 10_000);
        let mut i = Inflater::new(true, 1000, 1 << 30);
        let got = i.inflate(&c, true).unwrap();
        assert_eq!((got.payload.len(), got.len, got.truncated), (1000, 5_000_000, true));
        // The window survived: the next message reads.
        let c = d.compress(b"next");
        assert_eq!(i.inflate(&c, true).unwrap().payload, b"next");
        // A small session budget stops inflating altogether.
        let mut d = Deflater::new(true);
        let mut i = Inflater::new(true, 1000, 100_000);
        let got = i.inflate(&d.compress(&bomb), true).unwrap();
        assert!(got.truncated && got.len <= 100_000 + 8192);
        // Every later message says why: the budget, not the window it took with it.
        for _ in 0..2 {
            assert_eq!(i.inflate(&d.compress(b"x"), true), Err(InflateError::BudgetSpent));
        }
    }

    #[test]
    fn an_empty_message_keeps_the_window_whether_or_not_it_carries_the_empty_block() {
        let messages: [&[u8]; 4] =
            [br#"{"type":"session.update","n":0}"#, b"", br#"{"type":"session.update","n":2}"#, b""];
        // The empty message as RFC 7692 has it (the empty stored block's header, 0x00), and as
        // a sender that skips the block sends it (nothing).
        for empty in [&[0x00][..], &[][..]] {
            let mut d = Deflater::new(true);
            let mut i = Inflater::new(true, 1 << 20, 1 << 30);
            for m in messages {
                let c = if m.is_empty() { empty.to_vec() } else { d.compress(m) };
                let got = i.inflate(&c, true).unwrap();
                assert_eq!(got.payload, m, "empty sent as {empty:?}");
            }
        }
    }

    #[test]
    fn a_message_that_ends_the_stream_is_followed_by_a_fresh_one() {
        // RFC 7692 §7.2.3.3: "Hello" in a block with BFINAL set, then the empty block's header.
        let hello = [0xf3, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00, 0x00];
        for takeover in [true, false] {
            let mut i = Inflater::new(takeover, 1 << 20, 1 << 30);
            for _ in 0..3 {
                assert_eq!(i.inflate(&hello, true).unwrap().payload, b"Hello", "takeover {takeover}");
            }
            // A sender may mix both flushes: sync-flushed messages from a fresh stream follow.
            let mut d = Deflater::new(takeover);
            assert_eq!(i.inflate(&d.compress(b"next"), true).unwrap().payload, b"next");
            assert_eq!(i.inflate(&d.compress(b"next again"), true).unwrap().payload, b"next again");
        }
        // The final block without the empty block's header after it, then the RFC's form: both read.
        let mut i = Inflater::new(true, 1 << 20, 1 << 30);
        assert_eq!(i.inflate(&hello[..7], true).unwrap().payload, b"Hello");
        assert_eq!(i.inflate(&hello, true).unwrap().payload, b"Hello");
    }

    #[test]
    fn corrupt_data_is_an_error_not_a_panic() {
        let mut i = Inflater::new(true, 1000, 1 << 20);
        assert!(i.inflate(&[0xFF, 0xFF, 0xFF, 0x00, 0x12], true).is_err());
        assert_eq!(i.inflate(&[0x00], true), Err(InflateError::ContextLost));
    }
}
