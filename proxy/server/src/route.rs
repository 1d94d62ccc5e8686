//! Routes: which upstream serves a request path, and how the path is rewritten for it.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant};
pub(crate) use tokentap_record::{Provider, RouteRole};

use pingora::utils::tls::{parse_x509, WrappedX509};

/// An upstream base URL, split into the parts the proxy needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTarget {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// Base path without a trailing slash ("" for none).
    pub base_path: String,
    /// The Host header's value, made once (every request sends it; a clone shares its bytes).
    host_value: http::HeaderValue,
    /// The base URL as records show it, made once.
    url: String,
}

impl UpstreamTarget {
    /// Parses "http(s)://host[:port][/base/path]". Errors do not quote the URL (it may hold a
    /// password); the caller shows it redacted.
    pub fn parse(url: &str) -> Result<Self, String> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err("must start with http:// or https://".to_string());
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if path.contains('?') || path.contains('#') {
            return Err("a base URL cannot carry a query or fragment".to_string());
        }
        if authority.contains('@') {
            return Err("credentials in the URL are not supported".to_string());
        }
        let (host, port) = split_host_port(authority).ok_or_else(|| "has no valid host[:port]".to_string())?;
        let port = port.unwrap_or(if tls { 443 } else { 80 });
        let base_path = path.trim_end_matches('/').to_string();
        let authority = authority_of(tls, &host, port);
        let host_value = http::HeaderValue::from_str(&authority).map_err(|_| "has no valid host[:port]".to_string())?;
        let url = format!("{}://{authority}{base_path}", if tls { "https" } else { "http" });
        Ok(Self { tls, host, port, base_path, host_value, url })
    }

    /// "host" or "host:port" as a Host header value.
    pub fn host_header(&self) -> &http::HeaderValue {
        &self.host_value
    }

    pub fn url(&self) -> &str {
        &self.url
    }
}

/// "host" or "host:port" (the port when it is not the scheme's), an IPv6 host in brackets.
fn authority_of(tls: bool, host: &str, port: u16) -> String {
    let default_port = if tls { 443 } else { 80 };
    let host = if host.contains(':') { format!("[{host}]") } else { host.to_string() };
    if port == default_port {
        host
    } else {
        format!("{host}:{port}")
    }
}

fn split_host_port(authority: &str) -> Option<(String, Option<u16>)> {
    if authority.is_empty() {
        return None;
    }
    if let Some(rest) = authority.strip_prefix('[') {
        let end = rest.find(']')?;
        let host = &rest[..end];
        let after = &rest[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().ok()?),
            None if after.is_empty() => None,
            None => return None,
        };
        return Some((host.to_string(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => {
            if host.is_empty() {
                return None;
            }
            Some((host.to_string(), Some(port.parse().ok()?)))
        }
        None => Some((authority.to_string(), None)),
    }
}

/// One configured route with its per-route state.
#[derive(Debug)]
pub struct Route {
    pub name: String,
    /// The route's place in a multi-hop chain (`role` in the config), if any.
    pub role: Option<RouteRole>,
    pub prefix: String,
    pub upstream: UpstreamTarget,
    pub provider_hint: Option<Provider>,
    pub ca: Option<Arc<[WrappedX509]>>,
    pub http2: bool,
    /// Requests currently in flight on this route (read at t0 for the record's conditions).
    pub in_flight: AtomicU64,
    /// Requests started on this route since the process started (for the warm-up flag).
    pub started: AtomicU64,
    resolved: Mutex<Option<(Instant, Vec<SocketAddr>)>>,
}

/// How long a DNS answer is reused.
const DNS_CACHE: Duration = Duration::from_secs(30);

impl Route {
    pub fn new(
        name: String,
        prefix: String,
        upstream: UpstreamTarget,
        provider_hint: Option<Provider>,
        ca: Option<Arc<[WrappedX509]>>,
        http2: bool,
    ) -> Self {
        Self {
            name,
            role: None,
            prefix,
            upstream,
            provider_hint,
            ca,
            http2,
            in_flight: AtomicU64::new(0),
            started: AtomicU64::new(0),
            resolved: Mutex::new(None),
        }
    }

    /// The path to request upstream: the route prefix is replaced by the upstream's base path.
    pub fn upstream_path(&self, path_and_query: &str) -> String {
        let rest = if self.prefix == "/" { path_and_query } else { &path_and_query[self.prefix.len()..] };
        let slash = if rest.is_empty() || rest.starts_with('?') { "/" } else { "" };
        let base = &self.upstream.base_path;
        let mut path = String::with_capacity(base.len() + slash.len() + rest.len());
        path.push_str(base);
        path.push_str(slash);
        path.push_str(rest);
        path
    }

    /// Resolves the upstream host, reusing a recent answer. Failures are errors, never panics.
    pub async fn resolve(&self) -> Result<SocketAddr, String> {
        if let Ok(ip) = self.upstream.host.parse::<std::net::IpAddr>() {
            return Ok(SocketAddr::new(ip, self.upstream.port));
        }
        if let Some((at, addrs)) = self.resolved.lock().as_ref() {
            if at.elapsed() < DNS_CACHE && !addrs.is_empty() {
                return Ok(addrs[0]);
            }
        }
        let target = (self.upstream.host.as_str(), self.upstream.port);
        let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host(target)
            .await
            .map_err(|e| format!("DNS lookup of {} failed: {e}", self.upstream.host))?
            .collect();
        // One address is connected to (no happy eyeballs): prefer IPv4, which every host can reach.
        addrs.sort_by_key(|a| a.is_ipv6());
        let first =
            *addrs.first().ok_or_else(|| format!("DNS lookup of {} returned no address", self.upstream.host))?;
        *self.resolved.lock() = Some((Instant::now(), addrs));
        Ok(first)
    }

    pub fn begin_request(&self) -> (u64, u64) {
        let in_flight_before = self.in_flight.fetch_add(1, Ordering::Relaxed);
        let index = self.started.fetch_add(1, Ordering::Relaxed);
        (in_flight_before, index)
    }

    pub fn end_request(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Routes ordered by prefix length, longest first.
#[derive(Debug)]
pub struct RouteTable {
    routes: Vec<Arc<Route>>,
}

impl RouteTable {
    pub fn new(mut routes: Vec<Route>) -> Result<Self, String> {
        routes.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
        for pair in routes.windows(2) {
            if pair[0].prefix == pair[1].prefix {
                return Err(format!("prefix {:?} is configured twice", pair[0].prefix));
            }
        }
        Ok(Self { routes: routes.into_iter().map(Arc::new).collect() })
    }

    pub fn routes(&self) -> &[Arc<Route>] {
        &self.routes
    }

    /// The route with the longest prefix matching `path` on a segment boundary.
    pub fn find(&self, path: &str) -> Option<&Arc<Route>> {
        self.routes.iter().find(|r| {
            r.prefix == "/"
                || (path.starts_with(&r.prefix)
                    && matches!(path.as_bytes().get(r.prefix.len()), None | Some(b'/') | Some(b'?')))
        })
    }
}

/// Loads a PEM bundle of CA certificates for one upstream.
pub(crate) fn load_ca_file(path: &Path) -> Result<Arc<[WrappedX509]>, String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut reader = std::io::BufReader::new(&data[..]);
    let mut certs = Vec::new();
    for item in rustls_pemfile::certs(&mut reader) {
        let der = item.map_err(|e| format!("{}: not a PEM certificate file ({e})", path.display()))?;
        // Check the DER parses before handing it to the TLS layer, which would panic on garbage.
        let bytes = der.as_ref().to_vec();
        if x509_parses(&bytes).is_err() {
            return Err(format!("{}: a certificate does not parse", path.display()));
        }
        certs.push(WrappedX509::new(bytes, parse_x509));
    }
    if certs.is_empty() {
        return Err(format!("{}: no certificate found", path.display()));
    }
    Ok(certs.into())
}

fn x509_parses(der: &[u8]) -> Result<(), ()> {
    let mut store = pingora::tls::RootCertStore::empty();
    store.add(pingora::tls::CertificateDer::from(der.to_vec())).map_err(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_upstream_urls() {
        let t = UpstreamTarget::parse("https://api.openai.com").unwrap();
        assert_eq!((t.tls, t.host.as_str(), t.port, t.base_path.as_str()), (true, "api.openai.com", 443, ""));
        let t = UpstreamTarget::parse("http://127.0.0.1:9000/base/").unwrap();
        assert_eq!((t.tls, t.host.as_str(), t.port, t.base_path.as_str()), (false, "127.0.0.1", 9000, "/base"));
        let t = UpstreamTarget::parse("http://[::1]:81").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 81));
        assert_eq!(t.host_header(), "[::1]:81");
        assert_eq!(t.url(), "http://[::1]:81");
        let t = UpstreamTarget::parse("https://api.anthropic.com:443/v1/").unwrap();
        assert_eq!((t.host_header().to_str().unwrap(), t.url()), ("api.anthropic.com", "https://api.anthropic.com/v1"));
        let t = UpstreamTarget::parse("http://localhost:8080").unwrap();
        assert_eq!((t.host_header().to_str().unwrap(), t.url()), ("localhost:8080", "http://localhost:8080"));
        for bad in ["api.openai.com", "http://", "http://:80", "https://a:99999", "http://u:p@a", "http://a/b?c"] {
            assert!(UpstreamTarget::parse(bad).is_err(), "{bad}");
        }
    }

    fn route(prefix: &str, upstream: &str) -> Route {
        Route::new(prefix.into(), prefix.into(), UpstreamTarget::parse(upstream).unwrap(), None, None, true)
    }

    #[test]
    fn longest_prefix_on_segment_boundary() {
        let table = RouteTable::new(vec![route("/", "http://a"), route("/anthropic", "http://b")]).unwrap();
        assert_eq!(table.find("/anthropic/v1/messages").unwrap().prefix, "/anthropic");
        assert_eq!(table.find("/anthropicx/v1").unwrap().prefix, "/");
        assert_eq!(table.find("/v1/chat/completions").unwrap().prefix, "/");
        let table = RouteTable::new(vec![route("/a", "http://b")]).unwrap();
        assert!(table.find("/b").is_none());
    }

    #[test]
    fn rewrites_paths() {
        assert_eq!(route("/", "http://a").upstream_path("/v1/x?y=1"), "/v1/x?y=1");
        assert_eq!(route("/anthropic", "http://a/base").upstream_path("/anthropic/v1/messages"), "/base/v1/messages");
        assert_eq!(route("/anthropic", "http://a").upstream_path("/anthropic?x"), "/?x");
    }
}
