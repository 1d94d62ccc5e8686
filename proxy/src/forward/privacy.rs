//! What never leaves tokentap: credential headers, cookies and secret-looking query parameters.
//!
//! Records, logs and the admin API only ever see values after they went through this module.

/// Header names whose values are always redacted (lower case).
pub const REDACTED_HEADERS: &[&str] = &[
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
];

/// Query parameter names whose values are redacted in recorded paths (lower case).
pub const REDACTED_QUERY_PARAMS: &[&str] =
    &["key", "api_key", "apikey", "api-key", "access_token", "token", "sig", "signature", "x-goog-api-key"];

pub const REDACTED: &str = "[redacted]";

/// Decides whether a header's value may be recorded.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    extra_headers: Vec<String>,
}

impl Redactor {
    pub fn new(extra_headers: &[String]) -> Self {
        Self { extra_headers: extra_headers.iter().map(|h| h.to_ascii_lowercase()).collect() }
    }

    pub fn is_secret_header(&self, name: &str) -> bool {
        let lower = name.to_ascii_lowercase();
        REDACTED_HEADERS.contains(&lower.as_str()) || self.extra_headers.contains(&lower)
    }

    /// A header value as it may appear in a record.
    pub fn header_value(&self, name: &str, value: &[u8]) -> String {
        if self.is_secret_header(name) {
            REDACTED.to_string()
        } else {
            String::from_utf8_lossy(value).into_owned()
        }
    }
}

/// The path with secret-looking query values replaced, e.g. Gemini's `?key=…`.
pub fn redact_path(path_and_query: &str) -> String {
    let Some((path, query)) = path_and_query.split_once('?') else {
        return path_and_query.to_string();
    };
    let parts: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if REDACTED_QUERY_PARAMS.contains(&name.to_ascii_lowercase().as_str()) => {
                format!("{name}={REDACTED}")
            }
            _ => pair.to_string(),
        })
        .collect();
    format!("{path}?{}", parts.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_secret_headers_case_insensitively() {
        let r = Redactor::new(&["X-Internal-Token".to_string()]);
        for name in ["Authorization", "x-api-key", "API-KEY", "Cookie", "set-cookie", "x-internal-token"] {
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
}
