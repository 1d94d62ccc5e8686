//! `[[route]]`: path prefix → upstream, and the `--upstream` route.

use std::path::PathBuf;

use serde::Deserialize;

use super::bounds::check_list;
use super::{invalid, ConfigError, Overrides};
use crate::route::{Route, RouteRole, RouteTable, UpstreamTarget};
use tokentap_record::Provider;

/// One `[[route]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Path prefix this route serves, e.g. "/" or "/anthropic". Stripped before forwarding unless "/".
    pub prefix: String,
    /// Upstream base URL, http or https, optionally with a base path ("https://example.com/openai").
    pub upstream: String,
    /// Provider hint for stream analysis: openai, anthropic, gemini, ollama, generic.
    pub provider: Option<Provider>,
    /// Name shown in records and metrics; defaults to the prefix.
    pub name: Option<String>,
    /// PEM file with CA certificates trusted for this upstream (in place of the system roots).
    pub ca_file: Option<PathBuf>,
    /// Offer HTTP/2 to HTTPS upstreams (ALPN h2, falling back to HTTP/1.1). Default true.
    pub http2: Option<bool>,
    /// The route's place in a multi-hop chain: "ingress" (browser → tokentap → app) or "egress"
    /// (app → tokentap → provider). Records of both roles in one trace are joined. Default: none.
    pub role: Option<RouteRole>,
}

/// The route table: the file's routes, the `--upstream` route in place of a "/" one.
pub(super) fn validate_routes(mut configs: Vec<RouteConfig>, overrides: &Overrides) -> Result<RouteTable, ConfigError> {
    check_list("route", &configs)?;
    if let Some(upstream) = &overrides.upstream {
        // `--upstream` is the zero-config form: one route for every path.
        configs.retain(|r| r.prefix != "/");
        configs.push(RouteConfig {
            prefix: "/".into(),
            upstream: upstream.clone(),
            provider: overrides.provider,
            name: None,
            ca_file: None,
            http2: None,
            role: None,
        });
    }
    if configs.is_empty() {
        return Err(invalid(
            "upstream",
            "no upstream configured: pass --upstream URL or add a [[route]] to the config file",
        ));
    }
    let routes = configs.into_iter().enumerate().map(|(index, rc)| rc.validate(index)).collect::<Result<_, _>>()?;
    RouteTable::new(routes).map_err(|reason| invalid("route.prefix", reason))
}

impl RouteConfig {
    /// The route `route[index]` describes: prefix and upstream well-formed, CA file loaded.
    fn validate(self, index: usize) -> Result<Route, ConfigError> {
        let key = |field: &str| format!("route[{index}].{field}");
        if !self.prefix.starts_with('/') {
            return Err(invalid(key("prefix"), format!("{:?} must start with '/'", self.prefix)));
        }
        // A space, CR/LF or other control character would make every forwarded request head invalid.
        for (field, value) in [("prefix", &self.prefix), ("upstream", &self.upstream)] {
            if !value.bytes().all(|b| b.is_ascii_graphic()) || value.len() > 2048 {
                return Err(invalid(
                    key(field),
                    "must be at most 2048 printable ASCII characters: no spaces, control characters (CR, LF) or non-ASCII",
                ));
            }
        }
        if self.name.as_ref().is_some_and(|n| n.is_empty() || n.len() > 128 || n.chars().any(char::is_control)) {
            return Err(invalid(key("name"), "must be 1 to 128 bytes without control characters"));
        }
        let upstream = UpstreamTarget::parse(&self.upstream)
            .map_err(|reason| invalid(key("upstream"), format!("{:?} {reason}", display_url(&self.upstream))))?;
        let ca = match &self.ca_file {
            Some(path) => {
                if !upstream.tls {
                    return Err(invalid(key("ca_file"), "only applies to https upstreams"));
                }
                Some(crate::route::load_ca_file(path).map_err(|reason| invalid(key("ca_file"), reason))?)
            }
            None => None,
        };
        let prefix = if self.prefix.len() > 1 { self.prefix.trim_end_matches('/').to_string() } else { self.prefix };
        let name = self.name.unwrap_or_else(|| prefix.clone());
        let mut route = Route::new(name, prefix, upstream, self.provider, ca, self.http2.unwrap_or(true));
        route.role = self.role;
        Ok(route)
    }
}

/// A URL as a config error may show it: `user:password@` and any query replaced.
pub(crate) fn display_url(url: &str) -> String {
    const REDACTED: &str = "[redacted]";
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rfind('@') {
        Some(at) => format!("{REDACTED}@{}", &authority[at + 1..]),
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, _)) => format!("{path}?{REDACTED}"),
        None => tail.to_string(),
    };
    format!("{scheme}{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_in_errors_carry_no_credentials() {
        let cases = [
            ("http://user:pass@host:8080/v1", "http://[redacted]@host:8080/v1"),
            ("https://a@b@host", "https://[redacted]@host"),
            ("https://host/x?key=S", "https://host/x?[redacted]"),
            ("ftp://u:p@host", "ftp://[redacted]@host"),
            ("u:p@host/path", "[redacted]@host/path"),
            ("https://host/a@b", "https://host/a@b"),
            ("http://127.0.0.1:9", "http://127.0.0.1:9"),
        ];
        for (url, expected) in cases {
            assert_eq!(display_url(url), expected, "{url}");
        }
    }
}
