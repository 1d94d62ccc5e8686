//! RFC 6455 framing, incremental: bytes of one direction go in as they arrived (any split, with
//! the arrival stamp of each piece) and come out as messages (data frames reassembled across
//! fragments, unmasked) and control frames. Memory is bounded in bytes: a frame header is at most
//! 14 bytes, control payloads at most 125, and a message keeps at most `max_message_bytes` of its
//! payload (the rest is counted, and the message says it was cut).
//!
//! A protocol violation (a reserved opcode, a fragmented or oversized control frame, a
//! continuation with nothing to continue, a 64-bit length with its top bit set) stops decoding of
//! that direction: the decoder says why and ignores the rest. It never affects forwarding, which
//! does not parse.

use serde::{Deserialize, Serialize};

/// A frame's opcode (RFC 6455 §5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Opcode {
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

impl Opcode {
    fn from_bits(bits: u8) -> Option<Self> {
        match bits {
            0x0 => Some(Self::Continuation),
            0x1 => Some(Self::Text),
            0x2 => Some(Self::Binary),
            0x8 => Some(Self::Close),
            0x9 => Some(Self::Ping),
            0xA => Some(Self::Pong),
            _ => None,
        }
    }

    fn is_control(self) -> bool {
        matches!(self, Self::Close | Self::Ping | Self::Pong)
    }
}

/// Why a direction could not be decoded further.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum FrameError {
    #[error("reserved opcode")]
    ReservedOpcode,
    #[error("control frame longer than 125 bytes")]
    ControlFrameTooLong,
    #[error("fragmented control frame")]
    FragmentedControlFrame,
    #[error("continuation frame without a message to continue")]
    UnexpectedContinuation,
    #[error("new data frame inside a fragmented message")]
    UnfinishedMessage,
    #[error("64-bit payload length with the most significant bit set")]
    LengthTooLarge,
    #[error("reserved bits set without an extension that defines them")]
    ReservedBits,
}

/// A reassembled data message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub opcode: Opcode,
    /// RSV1 on the first frame: compressed with permessage-deflate.
    pub compressed: bool,
    /// The payload as received (still compressed when `compressed`), at most the cap.
    pub payload: Vec<u8>,
    /// Payload bytes received in total (may exceed `payload.len()`).
    pub payload_len: u64,
    /// The payload was cut at `max_message_bytes`.
    pub truncated: bool,
    pub frames: u32,
    /// Arrival of the piece holding the message's first byte, and of the one holding its last.
    pub first_t_ns: u64,
    pub last_t_ns: u64,
}

/// A control frame (payload at most 125 bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Control {
    pub opcode: Opcode,
    pub payload: Vec<u8>,
    pub t_ns: u64,
}

impl Control {
    /// A close frame's status code, when it has one.
    pub fn close_code(&self) -> Option<u16> {
        (self.opcode == Opcode::Close && self.payload.len() >= 2)
            .then(|| u16::from_be_bytes([self.payload[0], self.payload[1]]))
    }
}

/// What the decoder yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded {
    Message(Message),
    Control(Control),
}

/// Counts kept while decoding one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameCounts {
    pub frames: u64,
    pub bytes: u64,
    pub masked_frames: u64,
    pub messages: u64,
    pub fragmented_messages: u64,
    pub pings: u64,
    pub pongs: u64,
    pub closes: u64,
    /// Messages whose payload exceeded the per-message cap.
    pub messages_truncated: u64,
}

#[derive(Clone, Copy, Debug)]
struct Header {
    fin: bool,
    rsv1: bool,
    opcode: Opcode,
    mask: Option<[u8; 4]>,
    len: u64,
}

#[derive(Debug)]
enum State {
    /// Collecting a header (at most 14 bytes).
    Header,
    /// Reading `remaining` payload bytes of the current frame.
    Payload { header: Header, remaining: u64, offset: u64 },
    /// A protocol error: the rest of the direction is ignored.
    Failed(FrameError),
}

/// The incremental decoder of one direction.
#[derive(Debug)]
pub struct FrameDecoder {
    max_message_bytes: usize,
    /// Whether RSV1 is defined (permessage-deflate negotiated).
    rsv1_allowed: bool,
    state: State,
    header_buf: [u8; 14],
    header_len: usize,
    /// The data message being assembled (fragmentation).
    message: Option<Message>,
    control_payload: Vec<u8>,
    counts: FrameCounts,
    /// Stamp of the piece that held the current frame's first header byte.
    frame_t_ns: u64,
}

impl FrameDecoder {
    pub fn new(max_message_bytes: usize, rsv1_allowed: bool) -> Self {
        Self {
            max_message_bytes,
            rsv1_allowed,
            state: State::Header,
            header_buf: [0; 14],
            header_len: 0,
            message: None,
            control_payload: Vec::new(),
            counts: FrameCounts::default(),
            frame_t_ns: 0,
        }
    }

    pub fn counts(&self) -> FrameCounts {
        self.counts
    }

    pub fn error(&self) -> Option<FrameError> {
        match self.state {
            State::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// Whether a frame or message was left unfinished (the bytes ended inside it).
    pub fn mid_frame(&self) -> bool {
        match self.state {
            State::Header => self.header_len > 0 || self.message.is_some(),
            State::Payload { .. } => true,
            State::Failed(_) => false,
        }
    }

    /// Feeds one piece that arrived at `t_ns`; complete messages and control frames go to `out`.
    pub fn push(&mut self, mut bytes: &[u8], t_ns: u64, out: &mut Vec<Decoded>) {
        self.counts.bytes += bytes.len() as u64;
        while !bytes.is_empty() {
            match &mut self.state {
                State::Failed(_) => return,
                State::Header => {
                    if self.header_len == 0 {
                        self.frame_t_ns = t_ns;
                    }
                    let need = self.header_needed();
                    let take = (need - self.header_len).min(bytes.len());
                    self.header_buf[self.header_len..self.header_len + take].copy_from_slice(&bytes[..take]);
                    self.header_len += take;
                    bytes = &bytes[take..];
                    // The needed length grows once the length byte is known.
                    if self.header_len == self.header_needed() {
                        match self.parse_header() {
                            Ok(header) => self.begin_frame(header, t_ns, out),
                            Err(e) => self.state = State::Failed(e),
                        }
                    }
                }
                State::Payload { header, remaining, offset } => {
                    let take = (*remaining).min(bytes.len() as u64) as usize;
                    let (chunk, rest) = bytes.split_at(take);
                    bytes = rest;
                    let header = *header;
                    let start = *offset;
                    *remaining -= take as u64;
                    *offset += take as u64;
                    let done = *remaining == 0;
                    self.take_payload(&header, chunk, start, t_ns);
                    if done {
                        self.end_frame(header, t_ns, out);
                    }
                }
            }
        }
    }

    fn header_needed(&self) -> usize {
        if self.header_len < 2 {
            return 2;
        }
        let masked = self.header_buf[1] & 0x80 != 0;
        let ext = match self.header_buf[1] & 0x7F {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        2 + ext + if masked { 4 } else { 0 }
    }

    fn parse_header(&self) -> Result<Header, FrameError> {
        let b0 = self.header_buf[0];
        let b1 = self.header_buf[1];
        let fin = b0 & 0x80 != 0;
        let rsv1 = b0 & 0x40 != 0;
        if b0 & 0x30 != 0 || (rsv1 && !self.rsv1_allowed) {
            return Err(FrameError::ReservedBits);
        }
        let opcode = Opcode::from_bits(b0 & 0x0F).ok_or(FrameError::ReservedOpcode)?;
        let mut at = 2;
        let len = match b1 & 0x7F {
            126 => {
                at += 2;
                u64::from(u16::from_be_bytes([self.header_buf[2], self.header_buf[3]]))
            }
            127 => {
                at += 8;
                let mut b = [0u8; 8];
                b.copy_from_slice(&self.header_buf[2..10]);
                let len = u64::from_be_bytes(b);
                if len >> 63 != 0 {
                    return Err(FrameError::LengthTooLarge);
                }
                len
            }
            n => u64::from(n),
        };
        let mask = (b1 & 0x80 != 0).then(|| {
            let mut m = [0u8; 4];
            m.copy_from_slice(&self.header_buf[at..at + 4]);
            m
        });
        if opcode.is_control() {
            if len > 125 {
                return Err(FrameError::ControlFrameTooLong);
            }
            if !fin {
                return Err(FrameError::FragmentedControlFrame);
            }
            if rsv1 {
                return Err(FrameError::ReservedBits);
            }
        } else if opcode == Opcode::Continuation {
            if self.message.is_none() {
                return Err(FrameError::UnexpectedContinuation);
            }
        } else if self.message.is_some() {
            return Err(FrameError::UnfinishedMessage);
        }
        Ok(Header { fin, rsv1, opcode, mask, len })
    }

    fn begin_frame(&mut self, header: Header, t_ns: u64, out: &mut Vec<Decoded>) {
        self.header_len = 0;
        self.counts.frames += 1;
        if header.mask.is_some() {
            self.counts.masked_frames += 1;
        }
        if header.opcode.is_control() {
            self.control_payload.clear();
        } else if header.opcode != Opcode::Continuation {
            self.message = Some(Message {
                opcode: header.opcode,
                compressed: header.rsv1,
                payload: Vec::new(),
                payload_len: 0,
                truncated: false,
                frames: 0,
                first_t_ns: self.frame_t_ns,
                last_t_ns: t_ns,
            });
        }
        if let Some(m) = self.message.as_mut().filter(|_| !header.opcode.is_control()) {
            m.frames += 1;
        }
        if header.len == 0 {
            self.end_frame(header, t_ns, out);
        } else {
            self.state = State::Payload { header, remaining: header.len, offset: 0 };
        }
    }

    fn take_payload(&mut self, header: &Header, chunk: &[u8], start: u64, t_ns: u64) {
        let sink = if header.opcode.is_control() {
            &mut self.control_payload
        } else {
            let Some(m) = self.message.as_mut() else { return };
            m.payload_len += chunk.len() as u64;
            m.last_t_ns = t_ns;
            let room = self.max_message_bytes.saturating_sub(m.payload.len());
            if chunk.len() > room {
                m.truncated = true;
            }
            let keep = chunk.len().min(room);
            let at = m.payload.len();
            m.payload.extend_from_slice(&chunk[..keep]);
            if let Some(mask) = header.mask {
                unmask(&mut m.payload[at..], mask, start);
            }
            return;
        };
        let at = sink.len();
        sink.extend_from_slice(chunk);
        if let Some(mask) = header.mask {
            unmask(&mut sink[at..], mask, start);
        }
    }

    fn end_frame(&mut self, header: Header, t_ns: u64, out: &mut Vec<Decoded>) {
        self.state = State::Header;
        if header.opcode.is_control() {
            match header.opcode {
                Opcode::Ping => self.counts.pings += 1,
                Opcode::Pong => self.counts.pongs += 1,
                _ => self.counts.closes += 1,
            }
            out.push(Decoded::Control(Control {
                opcode: header.opcode,
                payload: std::mem::take(&mut self.control_payload),
                t_ns,
            }));
            return;
        }
        if !header.fin {
            return;
        }
        if let Some(mut m) = self.message.take() {
            m.last_t_ns = t_ns;
            self.counts.messages += 1;
            if m.frames > 1 {
                self.counts.fragmented_messages += 1;
            }
            if m.truncated {
                self.counts.messages_truncated += 1;
            }
            out.push(Decoded::Message(m));
        }
    }
}

fn unmask(bytes: &mut [u8], mask: [u8; 4], start: u64) {
    for (i, b) in bytes.iter_mut().enumerate() {
        *b ^= mask[((start + i as u64) % 4) as usize];
    }
}

/// Encodes one frame (for tests and the mock's fixtures): `mask` for client frames.
pub fn encode_frame(fin: bool, rsv1: bool, opcode_bits: u8, mask: Option<[u8; 4]>, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 14);
    out.push(u8::from(fin) << 7 | u8::from(rsv1) << 6 | (opcode_bits & 0x0F));
    let m = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(m | n as u8),
        n if n <= 0xFFFF => {
            out.push(m | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(m | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_split(bytes: &[u8], cuts: &[usize], cap: usize) -> (Vec<Decoded>, FrameDecoder) {
        let mut d = FrameDecoder::new(cap, true);
        let mut out = Vec::new();
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut at = 0;
        for c in cuts.into_iter().chain([bytes.len()]) {
            // Stamps count pieces, so the message times say which piece held which byte.
            d.push(&bytes[at..c], c as u64, &mut out);
            at = c;
        }
        (out, d)
    }

    fn texts(out: &[Decoded]) -> Vec<(Opcode, Vec<u8>)> {
        out.iter()
            .map(|d| match d {
                Decoded::Message(m) => (m.opcode, m.payload.clone()),
                Decoded::Control(c) => (c.opcode, c.payload.clone()),
            })
            .collect()
    }

    #[test]
    fn masked_fragmented_message_with_interleaved_ping() {
        let mut wire = encode_frame(false, false, 0x1, Some([1, 2, 3, 4]), b"hel");
        wire.extend(encode_frame(true, false, 0x9, Some([9, 9, 9, 9]), b"p"));
        wire.extend(encode_frame(true, false, 0x0, Some([5, 6, 7, 8]), b"lo"));
        wire.extend(encode_frame(true, false, 0x8, None, &[0x03, 0xE8]));
        let (out, d) = decode_split(&wire, &[], 1 << 20);
        assert_eq!(
            texts(&out),
            vec![(Opcode::Ping, b"p".to_vec()), (Opcode::Text, b"hello".to_vec()), (Opcode::Close, vec![3, 0xE8])]
        );
        let Decoded::Control(c) = &out[2] else { panic!() };
        assert_eq!(c.close_code(), Some(1000));
        let c = d.counts();
        assert_eq!(
            (c.frames, c.messages, c.fragmented_messages, c.pings, c.closes, c.masked_frames),
            (4, 1, 1, 1, 1, 3)
        );
    }

    #[test]
    fn lengths_of_all_three_encodings() {
        for n in [0usize, 125, 126, 65_535, 65_536, 200_000] {
            let payload: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let wire = encode_frame(true, false, 0x2, Some([7, 1, 2, 3]), &payload);
            let (out, _) = decode_split(&wire, &[1, 3, 9], 1 << 20);
            assert_eq!(texts(&out), vec![(Opcode::Binary, payload)], "{n}");
        }
    }

    #[test]
    fn a_huge_message_is_cut_and_counted() {
        let payload = vec![b'a'; 10_000];
        let wire = encode_frame(true, false, 0x1, None, &payload);
        let (out, d) = decode_split(&wire, &[5000], 100);
        let Decoded::Message(m) = &out[0] else { panic!() };
        assert!(m.truncated);
        assert_eq!(m.payload.len(), 100);
        assert_eq!(m.payload_len, 10_000);
        assert_eq!(d.counts().messages_truncated, 1);
    }

    #[test]
    fn endless_fragmentation_stays_bounded() {
        let mut wire = encode_frame(false, false, 0x1, None, b"x");
        for _ in 0..10_000 {
            wire.extend(encode_frame(false, false, 0x0, None, b"yyyyyyyyyy"));
        }
        let (out, d) = decode_split(&wire, &[], 64);
        assert!(out.is_empty());
        assert!(d.mid_frame());
        assert!(d.message.as_ref().unwrap().payload.len() <= 64);
    }

    #[test]
    fn protocol_errors_stop_the_direction() {
        let cases: Vec<(Vec<u8>, FrameError)> = vec![
            (vec![0x83, 0x00], FrameError::ReservedOpcode),
            (encode_frame(true, false, 0x9, None, &[0; 126]), FrameError::ControlFrameTooLong),
            (encode_frame(false, false, 0x9, None, b""), FrameError::FragmentedControlFrame),
            (encode_frame(true, false, 0x0, None, b"a"), FrameError::UnexpectedContinuation),
            (
                [encode_frame(false, false, 0x1, None, b"a"), encode_frame(true, false, 0x1, None, b"b")].concat(),
                FrameError::UnfinishedMessage,
            ),
            (vec![0x82, 0x7F, 0x80, 0, 0, 0, 0, 0, 0, 0], FrameError::LengthTooLarge),
            (vec![0xA1, 0x00], FrameError::ReservedBits),
        ];
        for (wire, err) in cases {
            let mut more = wire.clone();
            more.extend(encode_frame(true, false, 0x1, None, b"after"));
            let (out, d) = decode_split(&more, &[1], 1024);
            assert_eq!(d.error(), Some(err));
            assert!(texts(&out).iter().all(|(_, p)| p != b"after"));
        }
        // RSV1 without permessage-deflate.
        let mut d = FrameDecoder::new(1024, false);
        d.push(&encode_frame(true, true, 0x1, None, b"a"), 0, &mut Vec::new());
        assert_eq!(d.error(), Some(FrameError::ReservedBits));
    }

    #[test]
    fn message_times_are_the_pieces_that_held_its_first_and_last_bytes() {
        let wire = encode_frame(true, false, 0x1, None, b"0123456789");
        let (out, _) = decode_split(&wire, &[1, 6], 1024);
        let Decoded::Message(m) = &out[0] else { panic!() };
        assert_eq!((m.first_t_ns, m.last_t_ns), (1, 12));
    }

    proptest! {
        #[test]
        fn any_split_decodes_the_same(
            frames in proptest::collection::vec((any::<bool>(), proptest::collection::vec(any::<u8>(), 0..300), any::<[u8; 4]>(), any::<bool>()), 1..12),
            cuts in proptest::collection::vec(any::<usize>(), 0..16),
        ) {
            let mut wire = Vec::new();
            for (i, (binary, payload, mask, masked)) in frames.iter().enumerate() {
                wire.extend(encode_frame(true, false, if *binary { 2 } else { 1 }, masked.then_some(*mask), payload));
                if i % 3 == 0 {
                    wire.extend(encode_frame(true, false, 0xA, None, b"pong"));
                }
            }
            let (whole, _) = decode_split(&wire, &[], 1 << 20);
            let (split, _) = decode_split(&wire, &cuts, 1 << 20);
            prop_assert_eq!(texts(&whole), texts(&split));
            let payloads: Vec<Vec<u8>> = frames.iter().map(|f| f.1.clone()).collect();
            let got: Vec<Vec<u8>> = texts(&whole).into_iter().filter(|(o, _)| *o != Opcode::Pong).map(|(_, p)| p).collect();
            prop_assert_eq!(got, payloads);
        }
    }
}
