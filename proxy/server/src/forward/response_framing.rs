//! The upstream's HTTP/1 response as tokentap's relay reads it, without IO: the head taken from
//! the bytes read so far, the body's framing chosen from the head (RFC 9112 §6.3), and the body's
//! payload taken out of the read buffer piece by piece. A piece is a `Bytes` that shares the read
//! buffer (`BytesMut::split_to`): no copy and no allocation per piece.
//!
//! The rules are those of pingora's HTTP/1 client, which the relay read with before
//! (`pingora::protocols::http::v1::client`), so that the relay is no more and no less lenient:
//! - the head: at most 256 headers and 1 MiB, spaces after a header name and obsolete line
//!   folding accepted (a folded value's CR and LF become spaces), `Content-Length` dropped when
//!   `Transfer-Encoding` is present, and a `Content-Length` that is not one decimal number (or
//!   identical ones, repeated) refused;
//! - the body: none for `HEAD`, 204 and 304; chunked when `chunked` is the last transfer coding;
//!   else the `Content-Length`; else it ends when the upstream closes the connection;
//! - chunks: the size line (hex, extensions ignored) at most 8 KiB, the CRLF after a chunk's data
//!   required, trailers (not passed on) at most 64 KiB;
//! - bytes after the body's end (a response longer than it says) are not a next response: the
//!   connection is not reused.

use bytes::{Buf, Bytes, BytesMut};
use pingora::http::{header_value_from_raw, IntoCaseHeaderName, ResponseHeader};
use pingora::{Error, ErrorType, Result};

/// A response head larger than this is refused (pingora's bound).
pub(super) const MAX_HEAD_BYTES: usize = 1_048_575;
/// At most this many header lines (pingora's bound).
const MAX_HEADERS: usize = 256;
/// A chunk's size line (with its extensions) longer than this is refused.
const MAX_CHUNK_SIZE_LINE: usize = 8 * 1024;
/// Trailers longer than this are refused.
const MAX_TRAILERS: usize = 64 * 1024;

/// The error kinds pingora's body reader names (the record's `error.kind`).
pub(super) const INVALID_CHUNK: ErrorType = ErrorType::Custom("InvalidChunk");
pub(super) const INVALID_TRAILER_END: ErrorType = ErrorType::Custom("InvalidTrailerEnd");

fn invalid_head(why: &'static str) -> Box<Error> {
    Error::explain(ErrorType::InvalidHTTPHeader, why)
}

/// Takes a complete response head from the front of `buf`; `None` while more bytes are needed.
/// The head's names and values share its bytes (one `Bytes`), as pingora's do: a copy of its own
/// size, not a part of `buf`, since the head lives as long as the answer and would keep the whole
/// read buffer alive with it.
pub(super) fn take_head(buf: &mut BytesMut) -> Result<Option<Box<ResponseHeader>>> {
    /// A header's name and value as offsets into the head.
    struct Field {
        name: (usize, usize),
        value: (usize, usize),
    }
    let (len, code, version, reason, fields) = {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        let mut parser = httparse::ParserConfig::default();
        parser.allow_spaces_after_header_name_in_responses(true);
        parser.allow_obsolete_multiline_headers_in_responses(true);
        let status = parser
            .parse_response(&mut response, buf)
            .map_err(|e| Error::because(ErrorType::InvalidHTTPHeader, "the response head", e))?;
        let httparse::Status::Complete(len) = status else {
            if buf.len() > MAX_HEAD_BYTES {
                return Err(invalid_head("a response head larger than 1 MiB"));
            }
            return Ok(None);
        };
        let base = buf.as_ptr() as usize;
        let at = |s: &[u8]| (s.as_ptr() as usize - base, s.len());
        let fields: Vec<Field> = response
            .headers
            .iter()
            .filter(|h| !h.name.is_empty())
            .map(|h| Field { name: at(h.name.as_bytes()), value: at(h.value) })
            .collect();
        let code = response.code.ok_or_else(|| invalid_head("a response head without a status"))?;
        let version = match response.version {
            Some(1) => http::Version::HTTP_11,
            Some(0) => http::Version::HTTP_10,
            _ => http::Version::HTTP_09,
        };
        let reason = response.reason.map(|r| (r.as_ptr() as usize - base, r.len()));
        (len, code, version, reason, fields)
    };
    let raw = Bytes::copy_from_slice(&buf[..len]);
    buf.advance(len);
    let slice = |(start, len): (usize, usize)| raw.slice(start..start + len);
    let mut head = ResponseHeader::build(code, Some(fields.len()))?;
    head.set_version(version);
    if let Some(reason) = reason {
        let reason = std::str::from_utf8(&raw[reason.0..reason.0 + reason.1]).ok();
        head.set_reason_phrase(reason)?;
    }
    for field in fields {
        // The value's CR, LF and NUL (a folded line) become spaces.
        let value = header_value_from_raw(slice(field.value));
        head.append_header(slice(field.name).into_case_header_name(), value)
            .map_err(|_| invalid_head("an invalid header in the response head"))?;
    }
    // Transfer-Encoding overrides Content-Length (RFC 9112 §6.3): the length goes.
    if head.headers.contains_key(http::header::TRANSFER_ENCODING) {
        head.remove_header(&http::header::CONTENT_LENGTH);
    } else if head.headers.contains_key(http::header::CONTENT_LENGTH) && content_length(&head.headers).is_none() {
        return Err(invalid_head("an invalid Content-Length"));
    }
    Ok(Some(Box::new(head)))
}

/// The one length every `Content-Length` value names (identical repeats and lists collapse), or
/// `None` when there is none, one is not a decimal number, or two differ.
pub(super) fn content_length(headers: &http::HeaderMap) -> Option<u64> {
    let mut length: Option<u64> = None;
    for value in headers.get_all(http::header::CONTENT_LENGTH) {
        for token in value.as_bytes().split(|b| *b == b',') {
            let token = token.trim_ascii();
            // Digits only: `parse` alone would take a sign.
            if token.is_empty() || !token.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let n: u64 = std::str::from_utf8(token).ok()?.parse().ok()?;
            match length {
                Some(previous) if previous != n => return None,
                _ => length = Some(n),
            }
        }
    }
    length
}

/// Whether `chunked` is the last transfer coding of the last `Transfer-Encoding` line.
pub(super) fn is_chunked(headers: &http::HeaderMap) -> bool {
    headers.get_all(http::header::TRANSFER_ENCODING).iter().next_back().is_some_and(|value| {
        let bytes = value.as_bytes();
        let last = bytes.rsplit(|b| *b == b',').next().unwrap_or(bytes);
        last.trim_ascii().eq_ignore_ascii_case(b"chunked")
    })
}

/// How the body of a final (non-1xx) response ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// This many bytes (zero for `HEAD`, 204 and 304).
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// When the upstream closes the connection.
    UntilClose,
}

impl Framing {
    /// The framing of a final response's body (RFC 9112 §6.3).
    pub(super) fn of(head: &ResponseHeader, head_request: bool) -> Framing {
        if head_request || matches!(head.status.as_u16(), 204 | 304) {
            Framing::Length(0)
        } else if is_chunked(&head.headers) {
            Framing::Chunked
        } else {
            match content_length(&head.headers) {
                Some(n) => Framing::Length(n),
                None => Framing::UntilClose,
            }
        }
    }
}

/// What the decoder took from the buffer.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Payload bytes.
    Piece(Bytes),
    /// The body is complete.
    End,
    /// More bytes are needed.
    More,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Bytes left of a body with a length.
    Length(u64),
    /// The next chunk's size line.
    ChunkSize,
    /// Bytes left of a chunk's data.
    ChunkData(u64),
    /// The CRLF after a chunk's data.
    ChunkEnd,
    /// Trailers after the last chunk, this many bytes of them read.
    Trailers(usize),
    UntilClose,
    Done,
}

/// The body's payload taken out of the read buffer (see the module's comment).
#[derive(Debug)]
pub(super) struct BodyDecoder {
    state: State,
}

impl BodyDecoder {
    pub(super) fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::ChunkSize,
            Framing::UntilClose => State::UntilClose,
        };
        Self { state }
    }

    /// Whether the body is complete.
    pub(super) fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Whether the body ends only when the upstream closes (the connection is never reused).
    pub(super) fn until_close(&self) -> bool {
        self.state == State::UntilClose
    }

    /// Takes the next piece of payload (or the body's end) from the front of `buf`.
    pub(super) fn decode(&mut self, buf: &mut BytesMut) -> Result<Step> {
        loop {
            match self.state {
                State::Done => return Ok(Step::End),
                State::Length(left) | State::ChunkData(left) => {
                    if buf.is_empty() {
                        return Ok(Step::More);
                    }
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    let left = left - n as u64;
                    self.state = match self.state {
                        State::Length(_) if left == 0 => State::Done,
                        State::Length(_) => State::Length(left),
                        _ if left == 0 => State::ChunkEnd,
                        _ => State::ChunkData(left),
                    };
                    return Ok(Step::Piece(buf.split_to(n).freeze()));
                }
                State::UntilClose => {
                    if buf.is_empty() {
                        return Ok(Step::More);
                    }
                    return Ok(Step::Piece(buf.split().freeze()));
                }
                State::ChunkSize => match httparse::parse_chunk_size(buf) {
                    Ok(httparse::Status::Complete((used, size))) => {
                        buf.advance(used);
                        self.state = if size == 0 { State::Trailers(0) } else { State::ChunkData(size) };
                    }
                    Ok(httparse::Status::Partial) if buf.len() > MAX_CHUNK_SIZE_LINE => {
                        return Err(Error::explain(INVALID_CHUNK, "a chunk size line longer than 8 KiB"));
                    }
                    Ok(httparse::Status::Partial) => return Ok(Step::More),
                    Err(_) => return Err(Error::explain(INVALID_CHUNK, "an invalid chunk size")),
                },
                State::ChunkEnd => match buf.get(..2) {
                    None if buf.first().is_none_or(|b| *b == b'\r') => return Ok(Step::More),
                    Some(b"\r\n") => {
                        buf.advance(2);
                        self.state = State::ChunkSize;
                    }
                    _ => return Err(Error::explain(INVALID_CHUNK, "a chunk's data not followed by CRLF")),
                },
                State::Trailers(read) => {
                    // The last chunk's size line ended with its CRLF: an empty line ends the body,
                    // else trailer lines follow until an empty one.
                    if read == 0 {
                        match buf.get(..2) {
                            Some(b"\r\n") => {
                                buf.advance(2);
                                self.state = State::Done;
                                continue;
                            }
                            None if buf.first().is_none_or(|b| *b == b'\r') => return Ok(Step::More),
                            _ => {}
                        }
                    }
                    let Some(end) = memchr::memmem::find(buf, b"\r\n\r\n") else {
                        let read = read + buf.len();
                        if read > MAX_TRAILERS {
                            return Err(Error::explain(INVALID_TRAILER_END, "trailers longer than 64 KiB"));
                        }
                        // The last three bytes may begin the end; the rest is dropped and counted.
                        let keep = buf.len().min(3);
                        buf.advance(buf.len() - keep);
                        self.state = State::Trailers(read - keep);
                        return Ok(Step::More);
                    };
                    if read + end > MAX_TRAILERS {
                        return Err(Error::explain(INVALID_TRAILER_END, "trailers longer than 64 KiB"));
                    }
                    buf.advance(end + 4);
                    self.state = State::Done;
                }
            }
        }
    }

    /// The upstream closed the connection with nothing left to decode: the end of a body that ends
    /// at the close (`Ok`), else a body cut short.
    pub(super) fn at_close(&mut self) -> Result<()> {
        match self.state {
            State::Done => Ok(()),
            State::UntilClose => {
                self.state = State::Done;
                Ok(())
            }
            _ => Err(Error::explain(
                ErrorType::ConnectionClosed,
                "the upstream closed the connection before the body's end",
            )),
        }
    }
}

#[cfg(test)]
mod tests;
