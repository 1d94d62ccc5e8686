//! W3C Trace Context ids and the `traceparent` header.

pub use tokentap_probe_protocol::trace::hex;
use tokentap_probe_protocol::trace::{is_id, is_lower_hex, SPAN_ID_HEX_LEN, TRACE_ID_HEX_LEN};

/// A trace id (16 random bytes) and span id (8 random bytes) as lowercase hex, or `None` when
/// either is all zeros (invalid by the spec; the caller draws again).
pub fn ids_from_random(random: &[u8; 24]) -> Option<(String, String)> {
    let (trace, span) = random.split_at(16);
    if trace.iter().all(|&b| b == 0) || span.iter().all(|&b| b == 0) {
        return None;
    }
    Some((hex(trace), hex(span)))
}

/// `00-<trace id>-<span id>-01` (sampled).
pub fn format_traceparent(trace_id: &str, span_id: &str) -> String {
    format!("00-{trace_id}-{span_id}-01")
}

/// The trace id and parent span id of a valid `traceparent` value.
pub fn parse_traceparent(value: &str) -> Option<(String, String)> {
    let mut parts = value.trim().split('-');
    let version = parts.next()?;
    let trace_id = parts.next()?;
    let span_id = parts.next()?;
    let flags = parts.next()?;
    // Version 00 has exactly four fields; later versions may append more.
    if version == "00" && parts.next().is_some() {
        return None;
    }
    if !is_lower_hex(version, 2) || version == "ff" || !is_lower_hex(flags, 2) {
        return None;
    }
    if !is_id(trace_id, TRACE_ID_HEX_LEN) || !is_id(span_id, SPAN_ID_HEX_LEN) {
        return None;
    }
    Some((trace_id.to_string(), span_id.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut random = [0u8; 24];
        for (i, b) in random.iter_mut().enumerate() {
            *b = i as u8 * 11;
        }
        let (trace, span) = ids_from_random(&random).unwrap();
        assert_eq!(trace.len(), 32);
        assert_eq!(span.len(), 16);
        let header = format_traceparent(&trace, &span);
        assert_eq!(parse_traceparent(&header), Some((trace, span)));
    }

    #[test]
    fn zero_ids_are_redrawn() {
        assert_eq!(ids_from_random(&[0; 24]), None);
        let mut random = [1u8; 24];
        random[16..].fill(0);
        assert_eq!(ids_from_random(&random), None);
    }

    #[test]
    fn invalid_headers_are_rejected() {
        let good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert!(parse_traceparent(good).is_some());
        for bad in [
            "",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
        // A future version may carry more fields.
        assert!(parse_traceparent("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-xyz").is_some());
    }
}
