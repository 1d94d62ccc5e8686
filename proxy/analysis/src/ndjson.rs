//! Incremental newline-delimited JSON framer (one JSON value per line, as Ollama streams).
//!
//! Lines end with LF (a CR before it is dropped). Blank lines are skipped. A final line without a
//! newline is delivered by [`NdjsonFramer::finish`], because NDJSON writers often omit the last LF.
//! Lines longer than `max_line_bytes` are skipped and counted, never buffered whole.

use memchr::memchr;

/// One complete line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NdjsonLine<'a> {
    pub data: &'a [u8],
    /// Body offset just past the line's LF (or the end of the body for the final line).
    pub end_offset: u64,
}

#[derive(Debug)]
pub struct NdjsonFramer {
    max_line_bytes: usize,
    line: Vec<u8>,
    overflow: bool,
    offset: u64,
    oversized_lines: u64,
}

impl NdjsonFramer {
    pub fn new(max_line_bytes: usize) -> Self {
        NdjsonFramer {
            max_line_bytes: max_line_bytes.max(1),
            line: Vec::new(),
            overflow: false,
            offset: 0,
            oversized_lines: 0,
        }
    }

    /// Lines skipped because they exceeded the bound.
    pub fn oversized_lines(&self) -> u64 {
        self.oversized_lines
    }

    pub fn push(&mut self, chunk: &[u8], emit: &mut impl FnMut(NdjsonLine<'_>)) {
        let mut pos = 0;
        while pos < chunk.len() {
            let Some(found) = memchr(b'\n', &chunk[pos..]) else {
                self.append(&chunk[pos..]);
                break;
            };
            let end = pos + found;
            let end_offset = self.offset + end as u64 + 1;
            if self.line.is_empty() && !self.overflow {
                if end - pos > self.max_line_bytes {
                    self.oversized_lines += 1;
                } else {
                    Self::deliver(&chunk[pos..end], end_offset, emit);
                }
            } else {
                self.append(&chunk[pos..end]);
                self.complete_line(end_offset, emit);
            }
            pos = end + 1;
        }
        self.offset += chunk.len() as u64;
    }

    /// Delivers a final line that had no terminating newline.
    pub fn finish(&mut self, emit: &mut impl FnMut(NdjsonLine<'_>)) {
        if !self.line.is_empty() || self.overflow {
            let end_offset = self.offset;
            self.complete_line(end_offset, emit);
        }
    }

    fn complete_line(&mut self, end_offset: u64, emit: &mut impl FnMut(NdjsonLine<'_>)) {
        if self.overflow {
            self.overflow = false;
            self.oversized_lines += 1;
        } else {
            Self::deliver(&self.line, end_offset, emit);
        }
        self.line.clear();
    }

    fn deliver(line: &[u8], end_offset: u64, emit: &mut impl FnMut(NdjsonLine<'_>)) {
        let data = line.strip_suffix(b"\r").unwrap_or(line);
        if data.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        emit(NdjsonLine { data, end_offset });
    }

    fn append(&mut self, bytes: &[u8]) {
        if self.overflow {
            return;
        }
        if self.line.len() + bytes.len() > self.max_line_bytes {
            self.overflow = true;
            self.line = Vec::new();
        } else {
            self.line.extend_from_slice(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(chunks: &[&[u8]], max: usize) -> (Vec<(String, u64)>, u64) {
        let mut framer = NdjsonFramer::new(max);
        let mut out = Vec::new();
        let mut emit = |l: NdjsonLine<'_>| out.push((String::from_utf8_lossy(l.data).into_owned(), l.end_offset));
        for c in chunks {
            framer.push(c, &mut emit);
        }
        framer.finish(&mut emit);
        (out, framer.oversized_lines())
    }

    #[test]
    fn splits_lines_and_keeps_unterminated_last_line() {
        let input = b"{\"a\":1}\r\n\n  \n{\"b\":2}\n{\"c\":3}";
        let (whole, _) = lines(&[input], 1024);
        assert_eq!(whole, vec![("{\"a\":1}".into(), 9), ("{\"b\":2}".into(), 21), ("{\"c\":3}".into(), 28)]);
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(lines(&bytes, 1024).0, whole);
    }

    #[test]
    fn long_lines_are_skipped() {
        let mut input = vec![b'x'; 50];
        input.extend_from_slice(b"\n{}\n");
        input.extend(vec![b'y'; 50]);
        let (whole, oversized) = lines(&[&input], 10);
        assert_eq!(whole, vec![("{}".into(), 54)]);
        assert_eq!(oversized, 2);
        let split: Vec<&[u8]> = input.chunks(3).collect();
        assert_eq!(lines(&split, 10), (whole, 2));
    }
}
