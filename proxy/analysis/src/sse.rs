//! Incremental server-sent-events framer following the WHATWG parsing rules.
//!
//! It is fed body chunks exactly as they came off the network and reports each complete event
//! together with the byte offset where it ended, so the caller can tie the event to the chunk (and
//! arrival time) that completed it. Memory is bounded: a line or event larger than
//! `max_event_bytes` is never buffered whole; it is skipped up to the next blank line and counted.

use memchr::{memchr, memchr2};

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// One thing the framer recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseItem<'a> {
    /// A dispatched event (non-empty data).
    Event(SseEvent<'a>),
    /// A comment line (`:` ...), which servers use as keep-alive.
    Comment {
        /// Body offset just past the first byte of the comment's line ending.
        end_offset: u64,
    },
    /// An event that exceeded `max_event_bytes` and was skipped.
    Oversized {
        /// Body offset just past the first byte of the blank line's ending that closed it.
        end_offset: u64,
    },
}

/// A dispatched event. `data` has the multi-line values joined with LF, without the final LF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` field, `None` when absent or empty (the WHATWG default type "message").
    pub event_type: Option<&'a [u8]>,
    pub data: &'a [u8],
    /// The last event id seen so far (ids persist across events per WHATWG).
    pub last_event_id: Option<&'a [u8]>,
    /// Body offset just past the first byte of the line ending of the blank line that dispatched
    /// it. A CRLF counts as ending at its CR so that the offset does not depend on whether the LF
    /// arrived in the same network chunk.
    pub end_offset: u64,
}

/// The incremental framer. Feed it with [`SseFramer::push`]; an unterminated final block is
/// discarded, as the standard requires, so there is no flush step.
#[derive(Debug)]
pub struct SseFramer {
    max_event_bytes: usize,
    /// Bytes of the line in progress when a chunk ended mid-line.
    line: Vec<u8>,
    /// The line in progress exceeded the bound; its bytes are being dropped.
    line_overflow: bool,
    data: Vec<u8>,
    event_type: Vec<u8>,
    last_event_id: Option<Vec<u8>>,
    retry_ms: Option<u64>,
    /// The event in progress exceeded the bound; lines are ignored until the next blank line.
    event_oversized: bool,
    /// The previous chunk ended with CR, so a leading LF in the next chunk belongs to it.
    pending_cr: bool,
    /// How many bytes of a leading BOM have matched so far; `None` once the check is over.
    bom_matched: Option<usize>,
    /// Body bytes consumed before the current chunk.
    offset: u64,
    oversized_events: u64,
}

impl SseFramer {
    pub fn new(max_event_bytes: usize) -> Self {
        SseFramer {
            max_event_bytes: max_event_bytes.max(1),
            line: Vec::new(),
            line_overflow: false,
            data: Vec::new(),
            event_type: Vec::new(),
            last_event_id: None,
            retry_ms: None,
            event_oversized: false,
            pending_cr: false,
            bom_matched: Some(0),
            offset: 0,
            oversized_events: 0,
        }
    }

    /// Number of events skipped because they exceeded `max_event_bytes`.
    pub fn oversized_events(&self) -> u64 {
        self.oversized_events
    }

    /// The last valid `retry:` value, in milliseconds.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// Total body bytes consumed.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Consumes one chunk and calls `emit` for every item it completes, in order.
    pub fn push(&mut self, chunk: &[u8], emit: &mut impl FnMut(SseItem<'_>)) {
        let mut input = chunk;
        if let Some(mut matched) = self.bom_matched {
            while matched < BOM.len() && !input.is_empty() && input[0] == BOM[matched] {
                matched += 1;
                input = &input[1..];
            }
            if matched == BOM.len() {
                self.offset += BOM.len() as u64;
                self.bom_matched = None;
            } else if input.is_empty() {
                // The chunk was a (possibly empty) prefix of a BOM; decide with the next chunk.
                self.bom_matched = Some(matched);
                return;
            } else {
                // Not a BOM after all: the bytes that looked like one are ordinary data.
                self.bom_matched = None;
                self.feed(&BOM[..matched], emit);
            }
        }
        self.feed(input, emit);
    }

    fn feed(&mut self, input: &[u8], emit: &mut impl FnMut(SseItem<'_>)) {
        let len = input.len();
        if len == 0 {
            // An empty chunk must not consume a pending CR's chance to pair with a following LF.
            return;
        }
        let mut pos = 0;
        if self.pending_cr {
            self.pending_cr = false;
            if input.first() == Some(&b'\n') {
                pos = 1;
            }
        }
        while pos < len {
            let Some(found) = memchr2(b'\n', b'\r', &input[pos..]) else {
                self.append_partial(&input[pos..]);
                break;
            };
            let end = pos + found;
            let mut next = end + 1;
            if input[end] == b'\r' {
                if next < len {
                    if input[next] == b'\n' {
                        next += 1;
                    }
                } else {
                    self.pending_cr = true;
                }
            }
            let end_offset = self.offset + end as u64 + 1;
            if self.line.is_empty() && !self.line_overflow {
                let line = &input[pos..end];
                if line.len() > self.max_event_bytes {
                    self.event_oversized = true;
                } else {
                    self.process_line(line, end_offset, emit);
                }
            } else {
                self.append_partial(&input[pos..end]);
                if self.line_overflow {
                    self.line_overflow = false;
                    self.event_oversized = true;
                } else {
                    let line = std::mem::take(&mut self.line);
                    self.process_line(&line, end_offset, emit);
                    self.line = line;
                }
                self.line.clear();
            }
            pos = next;
        }
        self.offset += len as u64;
    }

    fn append_partial(&mut self, bytes: &[u8]) {
        if self.line_overflow {
            return;
        }
        if self.line.len() + bytes.len() > self.max_event_bytes {
            self.line_overflow = true;
            self.line = Vec::new();
        } else {
            self.line.extend_from_slice(bytes);
        }
    }

    fn process_line(&mut self, line: &[u8], end_offset: u64, emit: &mut impl FnMut(SseItem<'_>)) {
        if line.is_empty() {
            self.dispatch(end_offset, emit);
            return;
        }
        if self.event_oversized {
            return;
        }
        if line[0] == b':' {
            emit(SseItem::Comment { end_offset });
            return;
        }
        let (field, value) = match memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match field {
            b"data" => {
                if self.data.len() + value.len() + 1 > self.max_event_bytes {
                    self.event_oversized = true;
                    self.data = Vec::new();
                } else {
                    self.data.extend_from_slice(value);
                    self.data.push(b'\n');
                }
            }
            b"event" => {
                self.event_type.clear();
                self.event_type.extend_from_slice(value);
            }
            b"id" if memchr(0, value).is_none() => self.last_event_id = Some(value.to_vec()),
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                self.retry_ms =
                    Some(value.iter().fold(0u64, |acc, d| acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))));
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, end_offset: u64, emit: &mut impl FnMut(SseItem<'_>)) {
        if self.event_oversized {
            self.event_oversized = false;
            self.oversized_events += 1;
            self.data.clear();
            self.event_type.clear();
            emit(SseItem::Oversized { end_offset });
            return;
        }
        if self.data.is_empty() {
            self.event_type.clear();
            return;
        }
        self.data.pop();
        emit(SseItem::Event(SseEvent {
            event_type: (!self.event_type.is_empty()).then_some(self.event_type.as_slice()),
            data: &self.data,
            last_event_id: self.last_event_id.as_deref(),
            end_offset,
        }));
        self.data.clear();
        self.event_type.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Owned copy of an item, for comparisons.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Owned {
        Event { event_type: Option<Vec<u8>>, data: Vec<u8>, id: Option<Vec<u8>>, end: u64 },
        Comment(u64),
        Oversized(u64),
    }

    fn frame(chunks: &[&[u8]], max: usize) -> Vec<Owned> {
        let mut framer = SseFramer::new(max);
        let mut out = Vec::new();
        for chunk in chunks {
            framer.push(chunk, &mut |item| {
                out.push(match item {
                    SseItem::Event(e) => Owned::Event {
                        event_type: e.event_type.map(<[u8]>::to_vec),
                        data: e.data.to_vec(),
                        id: e.last_event_id.map(<[u8]>::to_vec),
                        end: e.end_offset,
                    },
                    SseItem::Comment { end_offset } => Owned::Comment(end_offset),
                    SseItem::Oversized { end_offset } => Owned::Oversized(end_offset),
                })
            });
        }
        out
    }

    fn data_of(items: &[Owned]) -> Vec<String> {
        items
            .iter()
            .filter_map(|i| match i {
                Owned::Event { data, .. } => Some(String::from_utf8_lossy(data).into_owned()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn whatwg_field_rules() {
        let input = b"\xEF\xBB\xBFdata:a\r\ndata:  b\revent: x\nid: 7\nretry: 12x\nfoo: bar\n\n: hi\ndata\n\nevent: y\n\ndata: tail";
        let items = frame(&[input], 1 << 20);
        assert_eq!(
            items[0],
            Owned::Event { event_type: Some(b"x".to_vec()), data: b"a\n b".to_vec(), id: Some(b"7".to_vec()), end: 56 }
        );
        assert_eq!(items[1], Owned::Comment(61));
        // "data" without colon is a data field with an empty value: the buffer is "\n", one event "".
        assert_eq!(data_of(&items), vec!["a\n b".to_string(), String::new()]);
        // "event: y" followed by a blank line has no data: no event; the unterminated tail is dropped.
        assert_eq!(items.len(), 3);
    }

    #[test]
    fn cr_at_chunk_end_then_lf_is_one_line_end() {
        let items = frame(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"], 1024);
        assert_eq!(data_of(&items), vec!["a\nb"]);
        let whole = frame(&[b"data: a\r\ndata: b\r\n\r\n"], 1024);
        assert_eq!(items, whole);
    }

    #[test]
    fn id_with_nul_is_ignored_and_retry_needs_digits() {
        let mut framer = SseFramer::new(1024);
        let mut ids = Vec::new();
        framer.push(b"id: 1\nretry: 300\ndata: a\n\nid: x\0y\nretry: 4a\ndata: b\n\n", &mut |i| {
            if let SseItem::Event(e) = i {
                ids.push(e.last_event_id.map(<[u8]>::to_vec));
            }
        });
        assert_eq!(ids, vec![Some(b"1".to_vec()), Some(b"1".to_vec())]);
        assert_eq!(framer.retry_ms(), Some(300));
    }

    #[test]
    fn partial_bom_that_is_not_a_bom_is_data() {
        let items = frame(&[b"\xEF", b"data: x\n\n"], 1024);
        // "\xEFdata" is an unknown field name: ignored, so no event.
        assert!(data_of(&items).is_empty());
        let items = frame(&[b"\xEF\xBB", b"\xBFdata: x\n\n"], 1024);
        assert_eq!(data_of(&items), vec!["x"]);
    }

    #[test]
    fn oversized_event_is_skipped_and_framing_resyncs() {
        let big = vec![b'x'; 100];
        let mut input = b"data: ".to_vec();
        input.extend_from_slice(&big);
        input.extend_from_slice(b"\ndata: more\n\ndata: ok\n\n");
        let whole = frame(&[&input], 64);
        assert_eq!(data_of(&whole), vec!["ok"]);
        assert!(matches!(whole[0], Owned::Oversized(_)));
        let split: Vec<&[u8]> = input.chunks(7).collect();
        assert_eq!(frame(&split, 64), whole);
        // Many data lines that are each small but add up past the bound.
        let many = b"data: 0123456789\n".repeat(10);
        let mut input = many.clone();
        input.extend_from_slice(b"\ndata: ok\n\n");
        assert_eq!(data_of(&frame(&[&input], 64)), vec!["ok"]);
    }

    fn arb_line() -> impl Strategy<Value = String> {
        prop_oneof![
            "data: [a-z{}\":, ]{0,12}".prop_map(|s| s),
            "data:[a-z ]{0,5}".prop_map(|s| s),
            Just("data".to_string()),
            "event: [a-z_.]{0,8}".prop_map(|s| s),
            ": [a-z]{0,6}".prop_map(|s| s),
            "id: [0-9]{0,3}".prop_map(|s| s),
            "retry: [0-9a]{0,3}".prop_map(|s| s),
            "[a-z]{1,4}: x".prop_map(|s| s),
            Just(String::new()),
        ]
    }

    fn arb_stream() -> impl Strategy<Value = Vec<u8>> {
        (any::<bool>(), proptest::collection::vec((arb_line(), 0..3usize), 0..40)).prop_map(|(bom, lines)| {
            let mut out = Vec::new();
            if bom {
                out.extend_from_slice(&BOM);
            }
            for (line, ending) in lines {
                out.extend_from_slice(line.as_bytes());
                out.extend_from_slice([&b"\n"[..], b"\r\n", b"\r"][ending]);
            }
            out
        })
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_items(
            stream in arb_stream(),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
            max in prop_oneof![Just(1usize << 20), 8usize..40],
        ) {
            let whole = frame(&[&stream], max);
            let mut positions: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
            positions.sort_unstable();
            let mut chunks = Vec::new();
            let mut last = 0;
            for p in positions {
                chunks.push(&stream[last..p]);
                last = p;
            }
            chunks.push(&stream[last..]);
            prop_assert_eq!(frame(&chunks, max), whole.clone());
            let bytes: Vec<&[u8]> = stream.chunks(1).collect();
            prop_assert_eq!(frame(&bytes, max), whole);
        }
    }
}
