//! W3C trace context: continue the client's `traceparent`, or start a new trace.

/// The query parameter that carries a `traceparent` where a browser cannot set headers: the
/// upgrade request of a `WebSocket` (the browser probe adds it to the sockets it tracks). tokentap
/// reads it when there is no `traceparent` header and never forwards it.
pub const TRACEPARENT_QUERY: &str = "tokentap_traceparent";

/// `path_and_query` without [`TRACEPARENT_QUERY`], and that parameter's value (the first one).
/// `None` for the path when the parameter is absent (the path stays as it is).
pub fn split_traceparent_query(path_and_query: &str) -> (Option<String>, Option<&str>) {
    let Some((path, query)) = path_and_query.split_once('?') else { return (None, None) };
    let is_ours = |pair: &str| pair.split_once('=').map_or(pair, |(name, _)| name) == TRACEPARENT_QUERY;
    if !query.split('&').any(is_ours) {
        return (None, None);
    }
    let value = query.split('&').find(|p| is_ours(p)).and_then(|p| p.split_once('=')).map(|(_, v)| v);
    let kept: Vec<&str> = query.split('&').filter(|p| !is_ours(p)).collect();
    let stripped = if kept.is_empty() { path.to_string() } else { format!("{path}?{}", kept.join("&")) };
    (Some(stripped), value)
}

/// The ids this request's span carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// 32 lower-case hex digits.
    pub trace_id: String,
    /// This request's span id, 16 hex digits.
    pub span_id: String,
    /// The client's span, when it sent a `traceparent`.
    pub parent_span_id: Option<String>,
    /// The sampled flag to propagate.
    pub sampled: bool,
}

impl TraceContext {
    /// Continues `traceparent` when it is valid; starts a new trace otherwise.
    pub fn from_incoming(traceparent: Option<&[u8]>) -> Self {
        if let Some((trace_id, parent, flags)) = traceparent.and_then(parse_traceparent) {
            return Self { trace_id, span_id: random_hex(8), parent_span_id: Some(parent), sampled: flags & 1 == 1 };
        }
        Self { trace_id: random_hex(16), span_id: random_hex(8), parent_span_id: None, sampled: true }
    }

    /// Continues `traceparent` when it is valid; otherwise, when the request names its turn
    /// explicitly (`[turns] turn_header`), joins the trace derived from that name, so that every
    /// step of the turn, on any tokentap instance, is in one trace; otherwise starts a new trace.
    pub fn from_incoming_or_turn(traceparent: Option<&[u8]>, turn: Option<&[u8]>) -> Self {
        let context = Self::from_incoming(traceparent);
        if context.parent_span_id.is_some() {
            return context;
        }
        match turn.and_then(|t| std::str::from_utf8(t).ok()).map(str::trim).filter(|t| !t.is_empty() && t.len() <= 256)
        {
            Some(turn) => Self { trace_id: turn_trace_id(turn), ..context },
            None => context,
        }
    }

    /// The `traceparent` header naming this request's span as the parent of the upstream call.
    pub fn traceparent(&self) -> String {
        // Pushed into one allocation of the header's length: `format!` costs four times as much,
        // and this runs for every request on the forwarding path.
        let mut value = String::with_capacity(3 + self.trace_id.len() + 1 + self.span_id.len() + 3);
        value.push_str("00-");
        value.push_str(&self.trace_id);
        value.push('-');
        value.push_str(&self.span_id);
        value.push_str(if self.sampled { "-01" } else { "-00" });
        value
    }
}

fn parse_traceparent(value: &[u8]) -> Option<(String, String, u8)> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let mut parts = text.split('-');
    let version = parts.next()?;
    let trace_id = parts.next()?;
    let parent = parts.next()?;
    let flags = parts.next()?;
    // Version 00 has exactly four fields; later versions may append more.
    if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    let is_hex =
        |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !is_hex(version, 2) || !is_hex(trace_id, 32) || !is_hex(parent, 16) || !is_hex(flags, 2) {
        return None;
    }
    if trace_id.bytes().all(|b| b == b'0') || parent.bytes().all(|b| b == b'0') {
        return None;
    }
    Some((trace_id.to_string(), parent.to_string(), u8::from_str_radix(flags, 16).ok()?))
}

/// `bytes` bytes of a fixed hash of `input` as lower-case hex (FNV-1a, 64-bit lanes with
/// different offsets): the same input gives the same id on every tokentap instance.
pub fn stable_hex(input: &[u8], bytes: usize) -> String {
    let mut out = String::with_capacity(bytes * 2);
    let mut lane: u64 = 0;
    while out.len() < bytes * 2 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325 ^ lane.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for b in input {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        // A final mix so that nearby inputs do not share leading digits.
        hash ^= hash >> 33;
        hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
        hash ^= hash >> 33;
        for b in hash.to_be_bytes() {
            if out.len() < bytes * 2 {
                push_hex(&mut out, &[b]);
            }
        }
        lane += 1;
    }
    if out.bytes().all(|b| b == b'0') {
        out.replace_range(out.len() - 1.., "1");
    }
    out
}

/// The trace of a turn named by an explicit turn header, the same on every instance.
pub fn turn_trace_id(turn_header_value: &str) -> String {
    stable_hex(turn_header_value.as_bytes(), 16)
}

/// `bytes` random bytes as lower-case hex (ids: request, trace, span, turn, conversation).
///
/// The bytes come from the thread's ChaCha generator, seeded and reseeded from the operating
/// system: ids are unpredictable (a client cannot guess another request's trace id to post a
/// browser report into it) without a system call per id.
pub fn random_hex(bytes: usize) -> String {
    use rand::RngCore;
    let mut raw = [0u8; 32];
    let mut out = String::with_capacity(bytes * 2);
    let mut left = bytes;
    let mut rng = rand::thread_rng();
    while left > 0 {
        let n = left.min(raw.len());
        rng.fill_bytes(&mut raw[..n]);
        push_hex(&mut out, &raw[..n]);
        left -= n;
    }
    out
}

/// Appends `bytes` as lower-case hex.
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_are_lower_hex_of_the_asked_length_and_differ() {
        for bytes in [0, 1, 8, 12, 16, 31, 32, 33, 70] {
            let a = random_hex(bytes);
            assert_eq!(a.len(), bytes * 2);
            assert!(a.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{a}");
        }
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| random_hex(16)).collect();
        assert_eq!(ids.len(), 1000);
        let mut out = String::new();
        push_hex(&mut out, &[0x00, 0x0f, 0xa5, 0xff]);
        assert_eq!(out, "000fa5ff");
    }

    #[test]
    fn the_query_traceparent_is_read_and_stripped() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let cases: &[(&str, Option<&str>, Option<&str>)] = &[
            ("/v1/realtime", None, None),
            ("/v1/realtime?model=m", None, None),
            ("/v1/realtime?tokentap_traceparent=x", Some("/v1/realtime"), Some("x")),
            ("/v1/realtime?model=m&tokentap_traceparent=x&b=2", Some("/v1/realtime?model=m&b=2"), Some("x")),
            ("/v1/realtime?tokentap_traceparent=x&tokentap_traceparent=y", Some("/v1/realtime"), Some("x")),
            ("/v1/realtime?tokentap_traceparent", Some("/v1/realtime"), None),
            ("/v1/realtime?tokentap_traceparentX=1", None, None),
        ];
        for &(input, path, value) in cases {
            let (p, v) = split_traceparent_query(input);
            assert_eq!((p.as_deref(), v), (path, value), "{input}");
        }
        let path = format!("/r?{TRACEPARENT_QUERY}={tp}");
        let (_, v) = split_traceparent_query(&path);
        let context = TraceContext::from_incoming(v.map(str::as_bytes));
        assert_eq!(context.trace_id, "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(context.parent_span_id.as_deref(), Some("b7ad6b7169203331"));
    }

    #[test]
    fn continues_a_valid_traceparent() {
        let tc = TraceContext::from_incoming(Some(b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"));
        assert_eq!(tc.trace_id, "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(tc.parent_span_id.as_deref(), Some("b7ad6b7169203331"));
        assert!(tc.sampled);
        assert_eq!(tc.span_id.len(), 16);
        assert_eq!(tc.traceparent(), format!("00-0af7651916cd43dd8448eb211c80319c-{}-01", tc.span_id));
        let unsampled = TraceContext::from_incoming(Some(b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"));
        assert_eq!(unsampled.traceparent(), format!("00-0af7651916cd43dd8448eb211c80319c-{}-00", unsampled.span_id));
        // What is sent continues what was received: it parses back to the same trace.
        let again = TraceContext::from_incoming(Some(tc.traceparent().as_bytes()));
        assert_eq!((again.trace_id, again.parent_span_id), (tc.trace_id.clone(), Some(tc.span_id.clone())));
    }

    #[test]
    fn starts_a_trace_for_invalid_input() {
        for bad in [
            &b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331"[..],
            b"00-00000000000000000000000000000000-b7ad6b7169203331-01",
            b"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            b"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            b"garbage",
        ] {
            let tc = TraceContext::from_incoming(Some(bad));
            assert!(tc.parent_span_id.is_none(), "{}", String::from_utf8_lossy(bad));
            assert_eq!(tc.trace_id.len(), 32);
        }
    }
}
