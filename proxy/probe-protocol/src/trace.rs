//! W3C Trace Context ids as a report carries them: lower-case hex, never all zeros.

/// Hex digits of a trace id.
pub const TRACE_ID_HEX_LEN: usize = 32;
/// Hex digits of a span id.
pub const SPAN_ID_HEX_LEN: usize = 16;

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// `s` is `len` lower-case hex digits.
pub fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `s` is an id of `len` hex digits: lower-case hex, not all zeros (invalid by the spec).
pub fn is_id(s: &str, len: usize) -> bool {
    is_lower_hex(s, len) && s.bytes().any(|b| b != b'0')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert_eq!(hex(&[0x0a, 0xf7, 0x00]), "0af700");
        assert!(is_id("0af7651916cd43dd", SPAN_ID_HEX_LEN));
        assert!(!is_id("0000000000000000", SPAN_ID_HEX_LEN));
        assert!(!is_id("0AF7651916CD43DD", SPAN_ID_HEX_LEN));
        assert!(!is_id("0af7651916cd43d", SPAN_ID_HEX_LEN));
    }
}
