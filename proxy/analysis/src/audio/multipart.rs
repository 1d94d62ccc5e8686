//! `multipart/form-data` request bodies (RFC 7578), as speech-to-text uploads send them: the form
//! fields tokentap reads (model, stream, response_format, language) and the audio file's size,
//! type and, for WAV, duration. The body may be a captured prefix; what is past it is absent.

use memchr::memmem;

/// Parts looked at; more are ignored.
const MAX_PARTS: usize = 64;
/// Longest field value kept.
const MAX_VALUE_BYTES: usize = 256;
/// Longest part head (its header lines) read.
const MAX_PART_HEAD_BYTES: usize = 8 * 1024;

/// A form field or file part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Part<'a> {
    pub name: Option<String>,
    pub filename: Option<String>,
    pub content_type: Option<String>,
    /// The part's bytes that were captured.
    pub body: &'a [u8],
    /// False when the capture ended inside this part.
    pub complete: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum MultipartError {
    #[error("multipart content type without a boundary")]
    NoBoundary,
    #[error("multipart body does not start with its boundary")]
    NoFirstBoundary,
}

/// The `boundary` parameter of a `multipart/form-data` content type.
pub(crate) fn boundary(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        if !k.trim().eq_ignore_ascii_case("boundary") {
            return None;
        }
        let v = v.trim().trim_matches('"');
        (!v.is_empty() && v.len() <= 200).then(|| v.to_owned())
    })
}

/// Splits a (possibly truncated) body into its parts.
pub(crate) fn parts<'a>(content_type: &str, body: &'a [u8]) -> Result<Vec<Part<'a>>, MultipartError> {
    let boundary = boundary(content_type).ok_or(MultipartError::NoBoundary)?;
    let dash = format!("--{boundary}");
    let delimiter = format!("\r\n--{boundary}");
    // The first boundary may be preceded by a preamble.
    let start = if body.starts_with(dash.as_bytes()) {
        0
    } else {
        memmem::find(body, delimiter.as_bytes()).map(|i| i + 2).ok_or(MultipartError::NoFirstBoundary)?
    };
    let finder = memmem::Finder::new(delimiter.as_bytes());
    let mut out = Vec::new();
    let mut at = start + dash.len();
    while out.len() < MAX_PARTS {
        // After a boundary: "--" ends the body, else CRLF then the part head.
        let rest = &body[at.min(body.len())..];
        if rest.starts_with(b"--") || rest.len() < 2 {
            break;
        }
        let Some(head_start) = memmem::find(&rest[..rest.len().min(MAX_PART_HEAD_BYTES)], b"\r\n").map(|i| i + 2)
        else {
            break;
        };
        let Some(head_len) =
            memmem::find(&rest[head_start..rest.len().min(head_start + MAX_PART_HEAD_BYTES)], b"\r\n\r\n")
        else {
            break;
        };
        let head = &rest[head_start..head_start + head_len];
        let body_start = head_start + head_len + 4;
        let (part_body, complete, next) = match finder.find(&rest[body_start..]) {
            Some(end) => (&rest[body_start..body_start + end], true, Some(body_start + end + delimiter.len())),
            None => (strip_partial_delimiter(&rest[body_start..], delimiter.as_bytes()), false, None),
        };
        let mut part = Part { name: None, filename: None, content_type: None, body: part_body, complete };
        for line in head.split(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(line);
            let line = line.trim();
            let Some((key, value)) = line.split_once(':') else { continue };
            match key.trim().to_ascii_lowercase().as_str() {
                "content-disposition" => {
                    part.name = disposition_param(value, "name");
                    part.filename = disposition_param(value, "filename");
                }
                "content-type" => part.content_type = Some(value.trim().chars().take(MAX_VALUE_BYTES).collect()),
                _ => {}
            }
        }
        out.push(part);
        match next {
            Some(n) => at += n,
            None => break,
        }
    }
    Ok(out)
}

/// A capture that ends inside a part may end with the start of the next delimiter: those bytes
/// cannot be told from the part's own, so they are left out.
fn strip_partial_delimiter<'a>(body: &'a [u8], delimiter: &[u8]) -> &'a [u8] {
    for n in (1..delimiter.len().min(body.len() + 1)).rev() {
        if body.ends_with(&delimiter[..n]) {
            return &body[..body.len() - n];
        }
    }
    body
}

/// `name="value"` from a Content-Disposition value (quoted or not).
fn disposition_param(value: &str, wanted: &str) -> Option<String> {
    value.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        if !k.trim().eq_ignore_ascii_case(wanted) {
            return None;
        }
        Some(v.trim().trim_matches('"').chars().take(MAX_VALUE_BYTES).collect())
    })
}

/// A short text field's value, trimmed; `None` when it is not UTF-8 or too long.
pub(crate) fn field_text(part: &Part<'_>) -> Option<String> {
    if part.body.len() > MAX_VALUE_BYTES {
        return None;
    }
    std::str::from_utf8(part.body).ok().map(|s| s.trim().to_owned())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A form field: name, `(filename, content type)` for a file, value.
    pub(crate) type Field<'a> = (&'a str, Option<(&'a str, &'a str)>, &'a [u8]);

    pub(crate) fn form(boundary: &str, fields: &[Field<'_>]) -> Vec<u8> {
        let mut body = Vec::new();
        for (name, file, value) in fields {
            body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
            match file {
                Some((filename, ct)) => body.extend_from_slice(
                    format!("Content-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\nContent-Type: {ct}\r\n\r\n")
                        .as_bytes(),
                ),
                None => body.extend_from_slice(format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes()),
            }
            body.extend_from_slice(value);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        body
    }

    #[test]
    fn fields_and_a_file() {
        let audio = b"RIFF\0\0\0\0WAVE\r\n--not-the-boundary\r\n";
        let body = form(
            "b0und",
            &[
                ("model", None, b"gpt-4o-transcribe"),
                ("file", Some(("a.wav", "audio/wav")), audio),
                ("stream", None, b"true"),
            ],
        );
        let parts = parts("multipart/form-data; boundary=b0und", &body).unwrap();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].name.as_deref(), Some("model"));
        assert_eq!(field_text(&parts[0]).as_deref(), Some("gpt-4o-transcribe"));
        assert_eq!(parts[1].filename.as_deref(), Some("a.wav"));
        assert_eq!(parts[1].content_type.as_deref(), Some("audio/wav"));
        assert_eq!(parts[1].body, audio);
        assert!(parts.iter().all(|p| p.complete));
        assert_eq!(field_text(&parts[2]).as_deref(), Some("true"));
    }

    #[test]
    fn a_truncated_capture_keeps_what_it_has() {
        let body = form("xyz", &[("model", None, b"whisper-1"), ("file", Some(("a.mp3", "audio/mpeg")), &[7u8; 1000])]);
        for cut in 0..body.len() {
            let Ok(parts) = parts("multipart/form-data; boundary=\"xyz\"", &body[..cut]) else {
                assert!(cut < 5, "cut {cut}");
                continue;
            };
            for p in &parts {
                if p.complete && p.name.as_deref() == Some("model") {
                    assert_eq!(p.body, b"whisper-1");
                }
                if p.name.as_deref() == Some("file") {
                    assert!(p.body.len() <= 1000 && p.body.iter().all(|&b| b == 7));
                    if p.complete {
                        assert_eq!(p.body.len(), 1000);
                    }
                }
            }
        }
    }

    #[test]
    fn bad_forms_are_errors_or_empty() {
        assert_eq!(parts("multipart/form-data", b"--x\r\n"), Err(MultipartError::NoBoundary));
        assert_eq!(parts("multipart/form-data; boundary=x", b"garbage"), Err(MultipartError::NoFirstBoundary));
        assert_eq!(parts("multipart/form-data; boundary=x", b"--x--\r\n").unwrap(), vec![]);
        // A preamble before the first boundary.
        let mut body = b"preamble\r\n".to_vec();
        body.extend_from_slice(&form("x", &[("model", None, b"m")]));
        assert_eq!(parts("multipart/form-data; boundary=x", &body).unwrap().len(), 1);
    }
}
