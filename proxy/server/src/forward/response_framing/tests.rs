use super::*;
use proptest::prelude::*;

/// How a body's bytes ended when fed to the decoder.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The body ended with this many bytes left after it in the buffer.
    End { after: usize },
    /// The decoder refused the bytes with this error kind.
    Refused(&'static str),
}

/// Feeds `wire` to a decoder in the pieces `cuts` makes (offsets, any order, any range), as
/// reads would bring them, then closes the connection when `closes`. The payload taken and how
/// it ended.
fn decode(framing: Framing, wire: &[u8], cuts: &[usize], closes: bool) -> (Vec<u8>, Outcome) {
    let mut offsets: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
    offsets.push(wire.len());
    offsets.sort_unstable();
    let mut decoder = BodyDecoder::new(framing);
    let mut buf = BytesMut::new();
    let mut payload = Vec::new();
    let mut start = 0;
    let refused = |e: Box<Error>| match e.etype() {
        ErrorType::Custom(name) => Outcome::Refused(name),
        other => Outcome::Refused(other.as_str()),
    };
    for end in offsets {
        buf.extend_from_slice(&wire[start..end]);
        start = end;
        loop {
            match decoder.decode(&mut buf) {
                Ok(Step::Piece(piece)) => {
                    assert!(!piece.is_empty(), "an empty piece");
                    payload.extend_from_slice(&piece);
                }
                Ok(Step::End) => return (payload, Outcome::End { after: buf.len() + wire.len() - start }),
                Ok(Step::More) => break,
                Err(e) => return (payload, refused(e)),
            }
        }
    }
    if !closes {
        return (payload, Outcome::Refused("not ended"));
    }
    match decoder.at_close() {
        Ok(()) => (payload, Outcome::End { after: 0 }),
        Err(e) => (payload, refused(e)),
    }
}

struct Case {
    framing: Framing,
    wire: Vec<u8>,
    closes: bool,
    payload: &'static [u8],
    outcome: Outcome,
}

fn case(framing: Framing, wire: impl Into<Vec<u8>>, closes: bool, payload: &'static [u8], outcome: Outcome) -> Case {
    Case { framing, wire: wire.into(), closes, payload, outcome }
}

fn cases() -> Vec<Case> {
    use Framing::*;
    use Outcome::*;
    let long_size_line = [b"1;".as_slice(), &[b'a'; 9000]].concat();
    let long_trailers =
        [b"5\r\nhello\r\n0\r\n".as_slice(), &b"X-T: aaaaaaaaaaaaaaa\r\n".repeat(3500), b"\r\n"].concat();
    vec![
        case(Length(5), "hello", false, b"hello", End { after: 0 }),
        case(Length(5), "hello world", false, b"hello", End { after: 6 }),
        case(Length(5), "hel", true, b"hel", Refused("ConnectionClosed")),
        case(Length(0), "", false, b"", End { after: 0 }),
        case(Length(0), "x", false, b"", End { after: 1 }),
        case(Chunked, "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", false, b"hello world", End { after: 0 }),
        case(
            Chunked,
            "A\r\n0123456789\r\na\r\nabcdefghij\r\n0\r\n\r\n",
            false,
            b"0123456789abcdefghij",
            End { after: 0 },
        ),
        case(Chunked, "5;name=value\r\nhello\r\n0;last\r\n\r\n", false, b"hello", End { after: 0 }),
        case(Chunked, "5\r\nhello\r\n0\r\nX-T: 1\r\nY: 2\r\n\r\n", false, b"hello", End { after: 0 }),
        case(Chunked, "5\r\nhello\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", false, b"hello", End { after: 19 }),
        case(Chunked, "0\r\n\r\n", false, b"", End { after: 0 }),
        case(Chunked, "5\r\nhelloX\r\n0\r\n\r\n", false, b"hello", Refused("InvalidChunk")),
        case(Chunked, "5\r\nhello\n0\r\n\r\n", false, b"hello", Refused("InvalidChunk")),
        case(Chunked, "zz\r\nhello\r\n", false, b"", Refused("InvalidChunk")),
        case(Chunked, "-5\r\nhello\r\n", false, b"", Refused("InvalidChunk")),
        case(Chunked, "FFFFFFFFFFFFFFFFF\r\n", false, b"", Refused("InvalidChunk")),
        case(Chunked, long_size_line, false, b"", Refused("InvalidChunk")),
        case(Chunked, long_trailers, false, b"hello", Refused("InvalidTrailerEnd")),
        case(Chunked, "5\r\nhel", true, b"hel", Refused("ConnectionClosed")),
        case(Chunked, "5\r\nhello\r\n", true, b"hello", Refused("ConnectionClosed")),
        case(Chunked, "5\r\nhello\r\n0\r\n", true, b"hello", Refused("ConnectionClosed")),
        case(UntilClose, "data: 1\n\ndata: 2\n\n", true, b"data: 1\n\ndata: 2\n\n", End { after: 0 }),
        case(UntilClose, "", true, b"", End { after: 0 }),
    ]
}

#[test]
fn bodies_decode_whole() {
    for (i, c) in cases().iter().enumerate() {
        let (payload, outcome) = decode(c.framing, &c.wire, &[], c.closes);
        assert_eq!(payload, c.payload, "case {i}");
        assert_eq!(outcome, c.outcome, "case {i}");
    }
}

#[test]
fn bodies_decode_a_byte_at_a_time() {
    for (i, c) in cases().iter().enumerate() {
        let cuts: Vec<usize> = (0..c.wire.len()).collect();
        let (payload, outcome) = decode(c.framing, &c.wire, &cuts, c.closes);
        assert_eq!(payload, c.payload, "case {i}");
        assert_eq!(outcome, c.outcome, "case {i}");
    }
}

proptest! {
    #[test]
    fn bodies_decode_the_same_at_random_splits(cuts in proptest::collection::vec(0usize..100_000, 0..40)) {
        for (i, c) in cases().iter().enumerate() {
            let (payload, outcome) = decode(c.framing, &c.wire, &cuts, c.closes);
            prop_assert_eq!(&payload[..], c.payload, "case {}", i);
            prop_assert_eq!(&outcome, &c.outcome, "case {}", i);
        }
    }

    /// Any payload, chunked at any sizes with or without extensions and trailers, and read at any
    /// splits, decodes to itself and ends where the encoding ends.
    #[test]
    fn any_chunked_body_decodes_to_its_payload(
        pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..300), 0..12),
        extension in any::<bool>(),
        trailers in any::<bool>(),
        after in proptest::collection::vec(any::<u8>(), 0..8),
        cuts in proptest::collection::vec(0usize..5_000, 0..30),
    ) {
        let mut wire = Vec::new();
        for piece in &pieces {
            wire.extend_from_slice(format!("{:x}", piece.len()).as_bytes());
            if extension {
                wire.extend_from_slice(b";x=\"y\"");
            }
            wire.extend_from_slice(b"\r\n");
            wire.extend_from_slice(piece);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"0\r\n");
        if trailers {
            wire.extend_from_slice(b"X-Checksum: abc\r\n");
        }
        wire.extend_from_slice(b"\r\n");
        wire.extend_from_slice(&after);
        let (payload, outcome) = decode(Framing::Chunked, &wire, &cuts, false);
        prop_assert_eq!(payload, pieces.concat());
        prop_assert_eq!(outcome, Outcome::End { after: after.len() });
    }

    /// A body with a length takes exactly that many bytes, at any splits.
    #[test]
    fn a_body_with_a_length_takes_exactly_its_length(
        body in proptest::collection::vec(any::<u8>(), 0..2_000),
        length in 0usize..2_000,
        cuts in proptest::collection::vec(0usize..2_000, 0..30),
    ) {
        let (payload, outcome) = decode(Framing::Length(length as u64), &body, &cuts, true);
        if length <= body.len() {
            prop_assert_eq!(&payload[..], &body[..length]);
            prop_assert_eq!(outcome, Outcome::End { after: body.len() - length });
        } else {
            prop_assert_eq!(&payload[..], &body[..]);
            prop_assert_eq!(outcome, Outcome::Refused("ConnectionClosed"));
        }
    }
}

/// The head from the front of `wire`, read at `cuts`: the head and the bytes left after it.
fn head_at_splits(wire: &[u8], cuts: &[usize]) -> Result<Option<(Box<ResponseHeader>, Vec<u8>)>> {
    let mut offsets: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
    offsets.push(wire.len());
    offsets.sort_unstable();
    let mut buf = BytesMut::new();
    let mut start = 0;
    for end in offsets {
        buf.extend_from_slice(&wire[start..end]);
        start = end;
        if let Some(head) = take_head(&mut buf)? {
            let mut rest = buf.to_vec();
            rest.extend_from_slice(&wire[start..]);
            return Ok(Some((head, rest)));
        }
    }
    Ok(None)
}

#[test]
fn heads_are_taken_with_pingoras_rules() {
    type Check = fn(&ResponseHeader);
    let cases: &[(&str, &str, Check)] = &[
        ("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata", "data", |h| {
            assert_eq!(h.status, 200);
            assert_eq!(h.version, http::Version::HTTP_11);
            assert_eq!(h.headers["content-type"], "text/event-stream");
        }),
        ("HTTP/1.0 404 Not Here\r\n\r\n", "", |h| {
            assert_eq!(h.version, http::Version::HTTP_10);
            assert_eq!(h.get_reason_phrase(), Some("Not Here"));
        }),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n", "", |h| {
            assert!(!h.headers.contains_key("content-length"));
            assert_eq!(Framing::of(h, false), Framing::Chunked);
        }),
        ("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3, 3\r\n\r\nabc", "abc", |h| {
            assert_eq!(Framing::of(h, false), Framing::Length(3));
        }),
        ("HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\n\r\n", "", |h| {
            let value = h.headers["x-folded"].as_bytes();
            assert!(!value.contains(&b'\r') && !value.contains(&b'\n'), "{value:?}");
        }),
        ("HTTP/1.1 200 OK\r\nServer : x\r\n\r\n", "", |h| assert_eq!(h.headers["server"], "x")),
        ("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", "HTTP/1.1 200 OK\r\n\r\n", |h| {
            assert_eq!(h.status, 100);
        }),
    ];
    for (wire, rest, check) in cases {
        for cuts in [vec![], (0..wire.len()).collect::<Vec<_>>(), vec![3, 17, 18, 30]] {
            let (head, after) = head_at_splits(wire.as_bytes(), &cuts).unwrap().expect(wire);
            assert_eq!(after, rest.as_bytes(), "{wire:?}");
            check(&head);
        }
    }
}

#[test]
fn bad_heads_are_refused() {
    let many = format!("HTTP/1.1 200 OK\r\n{}\r\n", "X-A: 1\r\n".repeat(257));
    let cases = [
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 3x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        "HTTP/1.1 2000 OK\r\n\r\n",
        "HTTP/2 200 OK\r\n\r\n",
        "garbage\r\n\r\n",
        "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
        &many,
    ];
    for wire in cases {
        let e = head_at_splits(wire.as_bytes(), &[]).err().unwrap_or_else(|| panic!("accepted {wire:?}"));
        assert_eq!(e.etype(), &ErrorType::InvalidHTTPHeader, "{wire:?}");
    }
    // A head that never ends is refused past 1 MiB, not buffered without bound.
    let mut buf = BytesMut::from(&b"HTTP/1.1 200 OK\r\n"[..]);
    let mut refused = false;
    for _ in 0..20_000 {
        buf.extend_from_slice(
            b"X-Long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
        );
        match take_head(&mut buf) {
            Ok(None) => {}
            Err(_) => {
                refused = true;
                break;
            }
            Ok(Some(_)) => panic!("a head without an end was taken"),
        }
    }
    assert!(refused && buf.len() <= MAX_HEAD_BYTES + 100, "{}", buf.len());
}

#[test]
fn the_framing_follows_rfc_9112() {
    let head = |status: u16, headers: &[(&str, &str)]| {
        let mut head = ResponseHeader::build(status, None).unwrap();
        for (name, value) in headers {
            head.append_header(name.to_string(), *value).unwrap();
        }
        head
    };
    /// The status, the headers, whether the request was a `HEAD`, the framing.
    type Case = (u16, &'static [(&'static str, &'static str)], bool, Framing);
    let cases: &[Case] = &[
        (200, &[], false, Framing::UntilClose),
        (200, &[("content-length", "12")], false, Framing::Length(12)),
        (200, &[("content-length", "12")], true, Framing::Length(0)),
        (204, &[], false, Framing::Length(0)),
        (304, &[("content-length", "12")], false, Framing::Length(0)),
        (200, &[("transfer-encoding", "chunked")], false, Framing::Chunked),
        (200, &[("transfer-encoding", "gzip, Chunked")], false, Framing::Chunked),
        (200, &[("transfer-encoding", "chunked"), ("transfer-encoding", "gzip")], false, Framing::UntilClose),
        (200, &[("transfer-encoding", "chunked, gzip")], false, Framing::UntilClose),
    ];
    for (status, headers, head_request, framing) in cases {
        assert_eq!(Framing::of(&head(*status, headers), *head_request), *framing, "{status} {headers:?}");
    }
}
