//! What never leaves tokentap: credential headers, cookies, secret-looking query parameters and
//! WebSocket subprotocols that carry a key.
//!
//! Records, logs and the admin API only ever see values after they went through this module.

/// Header names whose values are always redacted (lower case).
pub(crate) const REDACTED_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "openai-api-key",
    "anthropic-api-key",
    "cookie",
    "set-cookie",
    "x-amz-security-token",
    // Provider account identifiers: not keys, but they name whose account a call bills, and a
    // browser's Realtime session sends them as subprotocols next to the key.
    "openai-organization",
    "openai-project",
    "anthropic-organization-id",
    "x-goog-user-project",
    "ocp-apim-subscription-key",
];

/// Query parameter names whose values are redacted in recorded paths (lower case).
pub(crate) const REDACTED_QUERY_PARAMS: &[&str] =
    &["key", "api_key", "apikey", "api-key", "access_token", "token", "sig", "signature", "x-goog-api-key"];

pub(crate) const REDACTED: &str = "[redacted]";

/// Parts of a lower-case header or query parameter name that make it secret, besides the lists
/// above: `x-auth-token`, `client-secret`, `db-password`, `x-session-cookie`, `x-organization-id`, …
const SECRET_NAME_PARTS: &[&str] = &["auth", "secret", "passw", "cookie", "credential", "signature", "organization"];

/// True when a lower-case name looks secret by the rule of [`SECRET_NAME_PARTS`], or ends in `key`
/// or `token` (`x-custom-api-key`, `apikey`, `x-api-token`; not `x-ratelimit-remaining-tokens`).
fn looks_secret(lower: &str) -> bool {
    let name = lower.as_bytes();
    // One pass, a part compared only where its first byte is (was: a substring search per part,
    // ~200 instructions each, for every header of every request).
    name.ends_with(b"key")
        || name.ends_with(b"token")
        || (0..name.len()).any(|at| {
            SECRET_NAME_PARTS
                .iter()
                .any(|part| part.as_bytes()[0] == name[at] && name[at..].starts_with(part.as_bytes()))
        })
}

/// Decides whether a header's value may be recorded.
#[derive(Debug, Clone, Default)]
pub(crate) struct Redactor {
    extra_headers: Vec<String>,
}

impl Redactor {
    pub(crate) fn new(extra_headers: &[String]) -> Self {
        Self { extra_headers: extra_headers.iter().map(|h| h.to_ascii_lowercase()).collect() }
    }

    pub(crate) fn is_secret_header(&self, name: &str) -> bool {
        // Header names from the parser are lower-case already: copy only when one is not.
        let lower: std::borrow::Cow<'_, str> =
            if name.bytes().any(|b| b.is_ascii_uppercase()) { name.to_ascii_lowercase().into() } else { name.into() };
        let lower = lower.as_ref();
        REDACTED_HEADERS.contains(&lower) || self.extra_headers.iter().any(|h| h == lower) || looks_secret(lower)
    }

    /// A header value as it may appear in a record.
    pub(crate) fn header_value(&self, name: &str, value: &[u8]) -> String {
        if self.is_secret_header(name) {
            REDACTED.to_string()
        } else if name.eq_ignore_ascii_case(SUBPROTOCOL_HEADER) {
            redact_subprotocols(&String::from_utf8_lossy(value))
        } else {
            String::from_utf8_lossy(value).into_owned()
        }
    }
}

/// A browser's WebSocket cannot send `Authorization`: clients put the key in the list of
/// subprotocols instead (OpenAI Realtime: `realtime, openai-insecure-api-key.sk-…`).
const SUBPROTOCOL_HEADER: &str = "sec-websocket-protocol";

/// Subprotocol entries at least this long are redacted whole: protocol names are short
/// (`realtime`, `openai-beta.realtime-v1`, `graphql-transport-ws`), keys and tokens are not.
const LONGEST_PLAIN_SUBPROTOCOL: usize = 31;

/// Prefixes of credentials sent bare, as a subprotocol of their own (API keys, JWTs).
const CREDENTIAL_PREFIXES: &[&str] = &["sk-", "sk_", "aiza", "eyj", "bearer"];

/// The `Sec-WebSocket-Protocol` list with every entry that carries a credential redacted and the
/// others kept: in `name.value` entries whose name looks secret (`openai-insecure-api-key.sk-…`,
/// `base64url.bearer.authorization.k8s.io.…`) what follows the name is replaced; an entry that
/// looks like a credential itself (a known key prefix, or too long for a protocol name) is
/// replaced whole.
pub(crate) fn redact_subprotocols(value: &str) -> String {
    let entries: Vec<String> = value
        .split(',')
        .map(|raw| {
            let entry = raw.trim();
            let lower = entry.to_ascii_lowercase();
            // The first dot-separated part that names a secret: everything after it is the secret.
            let mut at = 0;
            for part in lower.split('.') {
                let end = at + part.len();
                if end < lower.len() && (REDACTED_HEADERS.contains(&part) || looks_secret(part)) {
                    return format!("{}.{REDACTED}", &entry[..end]);
                }
                at = end + 1;
            }
            if entry.len() > LONGEST_PLAIN_SUBPROTOCOL || CREDENTIAL_PREFIXES.iter().any(|p| lower.starts_with(p)) {
                REDACTED.to_string()
            } else {
                entry.to_string()
            }
        })
        .collect();
    entries.join(", ")
}

/// The path with secret-looking query values replaced, e.g. Gemini's `?key=…`. Names are compared
/// after percent-decoding (`?%6Bey=` is `?key=`), as the upstream will read them.
pub(crate) fn redact_path(path_and_query: &str) -> String {
    let Some((path, query)) = path_and_query.split_once('?') else {
        return path_and_query.to_string();
    };
    let parts: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if is_secret_query_name(name) => format!("{name}={REDACTED}"),
            _ => pair.to_string(),
        })
        .collect();
    format!("{path}?{}", parts.join("&"))
}

fn is_secret_query_name(raw: &str) -> bool {
    // Decoded as the upstream's query parser will (`%XX`, `+` as a space; bad escapes kept).
    let decoded = form_urlencoded::parse(raw.as_bytes()).next().map(|(name, _)| name).unwrap_or_default();
    let lower = decoded.to_ascii_lowercase();
    let lower = lower.trim();
    REDACTED_QUERY_PARAMS.contains(&lower) || looks_secret(lower)
}

#[cfg(test)]
mod tests {
    use super::*;

    mod names {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// The one-pass check says what a substring search per part says, for any name made of
            /// the parts' letters, the parts themselves and separators.
            #[test]
            fn looks_secret_is_a_substring_search(
                pieces in prop::collection::vec(
                    prop_oneof![
                        prop::sample::select(SECRET_NAME_PARTS).prop_map(str::to_string),
                        prop::sample::select(SECRET_NAME_PARTS).prop_map(|p| p[..p.len() - 1].to_string()),
                        "[a-z]{1,3}",
                        Just("-".to_string()),
                        Just("key".to_string()),
                        Just("token".to_string()),
                    ],
                    0..6,
                )
            ) {
                let name = pieces.concat();
                let searched = name.ends_with("key")
                    || name.ends_with("token")
                    || SECRET_NAME_PARTS.iter().any(|part| name.contains(part));
                prop_assert_eq!(looks_secret(&name), searched, "{}", name);
            }
        }
    }

    #[test]
    fn redacts_secret_headers_case_insensitively() {
        let r = Redactor::new(&["X-Internal-Token".to_string()]);
        for name in [
            "Authorization",
            "x-api-key",
            "API-KEY",
            "Cookie",
            "set-cookie",
            "x-internal-token",
            "OpenAI-Organization",
            "openai-project",
            "anthropic-organization-id",
            "x-goog-user-project",
            "Ocp-Apim-Subscription-Key",
        ] {
            assert_eq!(r.header_value(name, b"sk-secret"), REDACTED, "{name}");
        }
        assert_eq!(r.header_value("content-type", b"application/json"), "application/json");
    }

    #[test]
    fn redacts_query_secrets() {
        assert_eq!(
            redact_path("/v1beta/models/g:streamGenerateContent?alt=sse&key=AIzaSECRET"),
            "/v1beta/models/g:streamGenerateContent?alt=sse&key=[redacted]"
        );
        assert_eq!(redact_path("/v1/chat/completions"), "/v1/chat/completions");
    }

    #[test]
    fn redacts_secret_looking_headers_by_rule() {
        let r = Redactor::default();
        let secret = [
            "x-auth-token",
            "X-Goog-Api-Key",
            "api-key",
            "x-api-token",
            "proxy-authorization",
            "x-custom-key",
            "apikey",
            "client-secret",
            "x-db-password",
            "x-session-cookie",
            "x-amz-security-token",
            "x-credentials",
            "x-signature",
        ];
        for name in secret {
            assert_eq!(r.header_value(name, b"s3cr3t"), REDACTED, "{name}");
        }
        for name in [
            "content-type",
            "accept",
            "user-agent",
            "x-request-id",
            "anthropic-version",
            "anthropic-beta",
            "openai-beta",
            "x-max-tokens",
        ] {
            assert_eq!(r.header_value(name, b"plain"), "plain", "{name}");
        }
    }

    #[test]
    fn redacts_keys_in_websocket_subprotocols_and_keeps_the_protocol_names() {
        let r = Redactor::default();
        let cases = [
            (
                "realtime, openai-insecure-api-key.sk-proj-SECRET, openai-beta.realtime-v1",
                "realtime, openai-insecure-api-key.[redacted], openai-beta.realtime-v1",
            ),
            (
                "realtime,openai-organization.org-1,openai-project.proj_2",
                "realtime, openai-organization.[redacted], openai-project.[redacted]",
            ),
            ("OpenAI-Insecure-API-Key.sk-SECRET", "OpenAI-Insecure-API-Key.[redacted]"),
            ("x-api-key.a.b.c", "x-api-key.[redacted]"),
            ("base64url.bearer.authorization.k8s.io.dG9rZW4", "base64url.bearer.authorization.[redacted]"),
            ("my-token.SECRET", "my-token.[redacted]"),
            ("sk-SECRET", "[redacted]"),
            ("graphql-transport-ws, eyJhbGciOi.x.y", "graphql-transport-ws, [redacted]"),
            ("chat, 0123456789abcdef0123456789abcdef", "chat, [redacted]"),
            // A secret-looking name with nothing after it carries nothing.
            ("api-key", "api-key"),
            ("wamp.2.json, v12.stomp, mqtt", "wamp.2.json, v12.stomp, mqtt"),
        ];
        for (value, expected) in cases {
            assert_eq!(r.header_value("Sec-WebSocket-Protocol", value.as_bytes()), expected, "{value}");
        }
    }

    #[test]
    fn redacts_query_secrets_whatever_their_spelling() {
        let cases = [
            ("/p?%6Bey=S", "/p?%6Bey=[redacted]"),
            ("/p?%6bEY=S", "/p?%6bEY=[redacted]"),
            ("/p?api%5Fkey=S", "/p?api%5Fkey=[redacted]"),
            ("/p?a=1&API_KEY=S", "/p?a=1&API_KEY=[redacted]"),
            ("/p?access%5ftoken=S&b=2", "/p?access%5ftoken=[redacted]&b=2"),
            ("/p?x-auth-token=S", "/p?x-auth-token=[redacted]"),
            ("/p?client_secret=S", "/p?client_secret=[redacted]"),
            ("/p?sig=S", "/p?sig=[redacted]"),
            ("/p?X-Amz-Signature=S&X-Amz-Credential=C", "/p?X-Amz-Signature=[redacted]&X-Amz-Credential=[redacted]"),
            ("/p?organization=S", "/p?organization=[redacted]"),
            ("/p?key+=S", "/p?key+=[redacted]"),
            // Not secret by name: kept.
            ("/p?alt=sse&model=m", "/p?alt=sse&model=m"),
            ("/p?%zz=1", "/p?%zz=1"),
            ("/p?%", "/p?%"),
        ];
        for (path, expected) in cases {
            assert_eq!(redact_path(path), expected, "{path}");
        }
    }
}
