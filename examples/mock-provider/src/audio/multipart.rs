//! `multipart/form-data` (RFC 7578, in the multipart syntax of RFC 2046 §5.1.1), parsed from the
//! whole request body: the boundary from the content type, then each part's headers
//! (`Content-Disposition` with `name` and `filename`, `Content-Type`) and its bytes, which share
//! the body's buffer instead of being copied.
//!
//! The body is read whole (and capped) before parsing, so the parser never sees a delimiter split
//! across reads.

use bytes::Bytes;

/// One form field or file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FormPart {
    pub(crate) name: String,
    pub(crate) filename: Option<String>,
    pub(crate) content_type: Option<String>,
    pub(crate) body: Bytes,
}

impl FormPart {
    /// The value of a text field; `None` when it is not UTF-8.
    pub(crate) fn text(&self) -> Option<&str> {
        std::str::from_utf8(&self.body).ok()
    }
}

/// Why a body is not a form this parser reads.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum FormError {
    #[error("the content type is not multipart/form-data")]
    NotFormData,
    #[error("the content type has no boundary parameter")]
    NoBoundary,
    #[error("the boundary is not 1 to 70 characters")]
    BadBoundary,
    #[error("the body does not start with the boundary")]
    NoOpeningBoundary,
    #[error("a boundary line of part {0} has text after the boundary")]
    BadBoundaryLine(usize),
    #[error("the headers of part {0} do not end within {MAX_HEADER_BYTES} bytes")]
    UnterminatedHeaders(usize),
    #[error("part {0} has a header line that is not `name: value`")]
    BadHeaderLine(usize),
    #[error("part {0} has no `Content-Disposition: form-data` with a name")]
    NoFieldName(usize),
    #[error("the body ends before the closing boundary")]
    NoClosingBoundary,
    #[error("the form has more than {MAX_PARTS} parts")]
    TooManyParts,
}

/// The most parts a form may have.
pub(crate) const MAX_PARTS: usize = 64;
/// The most header bytes one part may have.
pub(crate) const MAX_HEADER_BYTES: usize = 16 * 1024;

/// The `boundary` parameter of a `multipart/form-data` content type (RFC 2046: 1..=70 characters).
pub(crate) fn boundary(content_type: &str) -> Result<String, FormError> {
    let mut params = parameters(content_type);
    let mime = params.next().map(|(name, _)| name).unwrap_or_default();
    if !mime.eq_ignore_ascii_case("multipart/form-data") {
        return Err(FormError::NotFormData);
    }
    let boundary =
        params.find(|(name, _)| name.eq_ignore_ascii_case("boundary")).map(|(_, v)| v).ok_or(FormError::NoBoundary)?;
    if boundary.is_empty() || boundary.len() > 70 {
        return Err(FormError::BadBoundary);
    }
    Ok(boundary)
}

/// The parts of a form body sent with `content_type`.
pub(crate) fn parse(content_type: &str, body: &Bytes) -> Result<Vec<FormPart>, FormError> {
    let delimiter = format!("--{}", boundary(content_type)?).into_bytes();
    let next_delimiter = {
        let mut line_break_delimiter = b"\r\n".to_vec();
        line_break_delimiter.extend_from_slice(&delimiter);
        move |from: usize| find(&body[from..], &line_break_delimiter).map(|i| from + i)
    };
    // A preamble before the first delimiter is allowed (and ignored).
    let mut at =
        if body.starts_with(&delimiter) { 0 } else { next_delimiter(0).ok_or(FormError::NoOpeningBoundary)? + 2 };
    let mut parts = Vec::new();
    loop {
        let index = parts.len();
        // `at` is at a delimiter: `--boundary--` closes the form, `--boundary` + padding + CRLF opens a part.
        let after = at + delimiter.len();
        if body[after..].starts_with(b"--") {
            return Ok(parts);
        }
        let padding = body[after..].iter().take_while(|b| matches!(b, b' ' | b'\t')).count();
        if !body[after + padding..].starts_with(b"\r\n") {
            return Err(if body.len() <= after + padding + 1 {
                FormError::NoClosingBoundary
            } else {
                FormError::BadBoundaryLine(index)
            });
        }
        if index == MAX_PARTS {
            return Err(FormError::TooManyParts);
        }
        let start = after + padding + 2;
        let (headers, content_start) = if body[start..].starts_with(b"\r\n") {
            (&body[start..start], start + 2)
        } else {
            let window = &body[start..body.len().min(start + MAX_HEADER_BYTES)];
            let end = find(window, b"\r\n\r\n").ok_or(FormError::UnterminatedHeaders(index))?;
            (&body[start..start + end], start + end + 4)
        };
        // The part's content ends at the CRLF before the next delimiter.
        let end = next_delimiter(content_start.saturating_sub(2)).ok_or(FormError::NoClosingBoundary)?;
        let content = body.slice(content_start.min(end)..end);
        parts.push(part(index, headers, content)?);
        at = end + 2;
    }
}

fn part(index: usize, headers: &[u8], body: Bytes) -> Result<FormPart, FormError> {
    let mut disposition = None;
    let mut content_type = None;
    let text = String::from_utf8_lossy(headers);
    for line in text.split("\r\n").filter(|line| !line.is_empty()) {
        let (name, value) = line.split_once(':').ok_or(FormError::BadHeaderLine(index))?;
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("content-disposition") {
            disposition = Some(value.to_owned());
        } else if name.eq_ignore_ascii_case("content-type") {
            content_type = Some(value.to_owned());
        }
    }
    let disposition = disposition.ok_or(FormError::NoFieldName(index))?;
    let mut params = parameters(&disposition);
    if !params.next().is_some_and(|(kind, _)| kind.eq_ignore_ascii_case("form-data")) {
        return Err(FormError::NoFieldName(index));
    }
    let (mut name, mut filename) = (None, None);
    for (key, value) in params {
        if key.eq_ignore_ascii_case("name") {
            name = Some(value);
        } else if key.eq_ignore_ascii_case("filename") {
            filename = Some(value);
        }
    }
    Ok(FormPart { name: name.ok_or(FormError::NoFieldName(index))?, filename, content_type, body })
}

/// `value; key=token; key="quoted \"string\""`: the leading value as `(value, "")`, then each
/// parameter as `(key, value)` with quotes and backslash escapes removed.
fn parameters(header: &str) -> impl Iterator<Item = (String, String)> + '_ {
    let mut rest = header;
    let mut first = true;
    std::iter::from_fn(move || loop {
        rest = rest.trim_start_matches([' ', '\t', ';']);
        if rest.is_empty() {
            return None;
        }
        let key_end = rest.find([';', '=']).unwrap_or(rest.len());
        let key = rest[..key_end].trim().to_owned();
        rest = &rest[key_end..];
        let value = match rest.strip_prefix('=') {
            None => String::new(),
            Some(after) => {
                let after = after.trim_start();
                if let Some(quoted) = after.strip_prefix('"') {
                    let mut value = String::new();
                    let mut chars = quoted.char_indices();
                    let mut end = quoted.len();
                    while let Some((i, c)) = chars.next() {
                        match c {
                            '\\' => value.extend(chars.next().map(|(_, c)| c)),
                            '"' => {
                                end = i + 1;
                                break;
                            }
                            c => value.push(c),
                        }
                    }
                    rest = &quoted[end..];
                    value
                } else {
                    let end = after.find(';').unwrap_or(after.len());
                    rest = &after[end..];
                    after[..end].trim().to_owned()
                }
            }
        };
        if first {
            first = false;
            return Some((key, value));
        }
        if !key.is_empty() {
            return Some((key, value));
        }
    })
}

/// Index of the first occurrence of `needle` in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    let (first, rest) = (needle[0], &needle[1..]);
    let last_start = haystack.len() - needle.len();
    let mut from = 0;
    while from <= last_start {
        let offset = haystack[from..=last_start].iter().position(|b| *b == first)?;
        let at = from + offset;
        if &haystack[at + 1..at + needle.len()] == rest {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A form body the way HTTP clients write it.
    pub(crate) fn form(boundary: &str, fields: &[(&str, Option<&str>, &[u8])]) -> Bytes {
        let mut body = Vec::new();
        for (name, filename, value) in fields {
            body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
            match filename {
                Some(file) => body.extend_from_slice(
                    format!(
                        "Content-Disposition: form-data; name=\"{name}\"; filename=\"{file}\"\r\n\
                         Content-Type: audio/wav\r\n\r\n"
                    )
                    .as_bytes(),
                ),
                None => body
                    .extend_from_slice(format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes()),
            }
            body.extend_from_slice(value);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        Bytes::from(body)
    }

    #[test]
    fn reads_fields_and_files() {
        let file: &[u8] = b"RIFF\r\n--notaboundary\r\n\r\n\x00\xff";
        let body = form("b0undary", &[("model", None, b"whisper-1"), ("file", Some("a.wav"), file), ("x", None, b"")]);
        let parts = parse("multipart/form-data; boundary=b0undary", &body).unwrap();
        assert_eq!(parts.len(), 3);
        assert_eq!((parts[0].name.as_str(), parts[0].text()), ("model", Some("whisper-1")));
        assert_eq!(parts[1].filename.as_deref(), Some("a.wav"));
        assert_eq!(parts[1].content_type.as_deref(), Some("audio/wav"));
        assert_eq!(&parts[1].body[..], file);
        assert_eq!(parts[2].text(), Some(""));
    }

    #[test]
    fn boundary_parameter_forms() {
        assert_eq!(boundary("multipart/form-data; boundary=abc").unwrap(), "abc");
        assert_eq!(boundary("Multipart/Form-Data;charset=utf-8; BOUNDARY=\"a b;c\"").unwrap(), "a b;c");
        assert_eq!(boundary("application/json"), Err(FormError::NotFormData));
        assert_eq!(boundary("multipart/form-data"), Err(FormError::NoBoundary));
        assert_eq!(boundary("multipart/form-data; boundary=\"\""), Err(FormError::BadBoundary));
        assert_eq!(boundary(&format!("multipart/form-data; boundary={}", "x".repeat(71))), Err(FormError::BadBoundary));
    }

    #[test]
    fn preamble_padding_epilogue_and_escapes() {
        let body = Bytes::from_static(
            b"preamble\r\n--xx  \r\ncontent-disposition: form-data; name=\"f\"; filename=\"say \\\"hi\\\".wav\"\r\n\r\n\
              data\r\n--xx\r\n\r\nno headers\r\n--xx--\r\nepilogue",
        );
        let error = parse("multipart/form-data; boundary=xx", &body).unwrap_err();
        assert_eq!(error, FormError::NoFieldName(1), "a part without a name is refused");
        let body = Bytes::from_static(
            b"preamble\r\n--xx  \r\ncontent-disposition: form-data; name=\"f\"; filename=\"say \\\"hi\\\".wav\"\r\n\r\n\
              data\r\n--xx--\r\nepilogue",
        );
        let parts = parse("multipart/form-data; boundary=xx", &body).unwrap();
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].filename.as_deref(), Some("say \"hi\".wav"));
        assert_eq!(&parts[0].body[..], b"data");
    }

    #[test]
    fn broken_forms_are_errors() {
        let ct = "multipart/form-data; boundary=b";
        let whole = form("b", &[("model", None, b"m"), ("file", Some("f.wav"), b"abc")]);
        // Every cut of a valid body is an error, never a panic or a silently shorter form.
        for cut in 0..whole.len() - 2 {
            assert!(parse(ct, &whole.slice(..cut)).is_err(), "cut at {cut}");
        }
        let bad = |body: &'static [u8]| parse(ct, &Bytes::from_static(body)).unwrap_err();
        assert_eq!(bad(b"no boundary here"), FormError::NoOpeningBoundary);
        assert_eq!(bad(b"--bX\r\n"), FormError::BadBoundaryLine(0));
        assert_eq!(bad(b"--b\r\nno colon\r\n\r\nv\r\n--b--"), FormError::BadHeaderLine(0));
        assert_eq!(bad(b"--b\r\nContent-Type: text/plain\r\n\r\nv\r\n--b--"), FormError::NoFieldName(0));
        assert_eq!(
            bad(b"--b\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\nv\r\n--b--"),
            FormError::NoFieldName(0)
        );
        let endless_headers = format!("--b\r\nX: {}", "y".repeat(MAX_HEADER_BYTES));
        assert_eq!(parse(ct, &Bytes::from(endless_headers)).unwrap_err(), FormError::UnterminatedHeaders(0));
        let many: Vec<(&str, Option<&str>, &[u8])> = vec![("f", None, b"v"); MAX_PARTS + 1];
        assert_eq!(parse(ct, &form("b", &many)).unwrap_err(), FormError::TooManyParts);
        assert_eq!(parse(ct, &form("b", &many[..MAX_PARTS])).unwrap().len(), MAX_PARTS);
    }

    #[test]
    fn find_locates_needles() {
        assert_eq!(find(b"abcabd", b"abd"), Some(3));
        assert_eq!(find(b"ab", b"abc"), None);
        assert_eq!(find(b"aaab", b"ab"), Some(2));
        assert_eq!(find(b"", b"a"), None);
    }
}
