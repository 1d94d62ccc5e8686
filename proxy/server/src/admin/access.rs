//! Who the admin API answers, for every path in one place:
//!
//! - the `Host` header must be an IP address, `localhost`, a name under `.localhost` or `.test`
//!   (reserved, RFC 6761: public DNS never resolves them) or one of `admin_allowed_hosts`, else
//!   403: a page on another name that resolves to this machine (DNS rebinding) cannot read records;
//! - when `admin_token` is set, every request but a CORS preflight carries it, as
//!   `Authorization: Bearer <token>` or as the `tokentap_admin` cookie, else 401. Opening
//!   `/_tokentap/?token=<token>` once sets that cookie (HttpOnly, SameSite=Strict) and redirects to
//!   the dashboard without the token in its address, so the page and its live feed work;
//! - every answer says it may not be framed (`X-Frame-Options: DENY`,
//!   `Content-Security-Policy: frame-ancestors 'none'`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{
    AUTHORIZATION, CACHE_CONTROL, CONTENT_SECURITY_POLICY, COOKIE, HOST, LOCATION, SET_COOKIE, WWW_AUTHENTICATE,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::AdminError;
use super::AdminState;
use crate::config::AdminAccess;

/// The cookie that carries the token for the dashboard.
const COOKIE_NAME: &str = "tokentap_admin";

pub(super) async fn check(State(state): State<Arc<AdminState>>, request: Request, next: Next) -> Response {
    let mut response = answer(&state.access, request, next).await;
    let headers = response.headers_mut();
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static("frame-ancestors 'none'"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

async fn answer(access: &AdminAccess, request: Request, next: Next) -> Response {
    let host = request.headers().get(HOST).and_then(|h| h.to_str().ok()).map(str::to_string);
    let host = host.or_else(|| request.uri().authority().map(|a| a.as_str().to_string()));
    if let Some(host) = host {
        if !host_allowed(&host, &access.allowed_hosts) {
            return AdminError::HostNotAllowed.into_response();
        }
    }
    let Some(token) = &access.token else {
        return next.run(request).await;
    };
    let token = token.as_str();
    if request.method() == Method::OPTIONS {
        return next.run(request).await;
    }
    let dashboard = matches!(request.uri().path(), "/_tokentap" | "/_tokentap/");
    if let Some(given) = login_token(request.uri().query()).filter(|_| dashboard) {
        if !constant_time_eq(given.as_bytes(), token.as_bytes()) {
            return unauthorized();
        }
        // Same path, without the query: the token leaves the address bar and the history.
        let location = HeaderValue::from_str(request.uri().path()).unwrap_or(HeaderValue::from_static("/_tokentap/"));
        let cookie = format!("{COOKIE_NAME}={token}; HttpOnly; SameSite=Strict; Path=/");
        let Ok(cookie) = HeaderValue::from_str(&cookie) else { return unauthorized() };
        return (
            StatusCode::SEE_OTHER,
            [(LOCATION, location), (SET_COOKIE, cookie), (CACHE_CONTROL, HeaderValue::from_static("no-store"))],
        )
            .into_response();
    }
    if presented(request.headers()).any(|given| constant_time_eq(given.as_bytes(), token.as_bytes())) {
        next.run(request).await
    } else {
        unauthorized()
    }
}

fn unauthorized() -> Response {
    let mut response = AdminError::Unauthorized.into_response();
    response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"tokentap\""));
    response
}

/// `token=` in a query string, as `?token=…` on a dashboard link.
fn login_token(query: Option<&str>) -> Option<&str> {
    query?.split('&').find_map(|pair| pair.strip_prefix("token="))
}

/// Every token the request presents: the bearer token and the cookie's.
fn presented(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    let bearer = headers
        .get_all(AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    let cookies = headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix(COOKIE_NAME)?.strip_prefix('='));
    bearer.chain(cookies)
}

/// Compares without stopping at the first difference (the length is not secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// True for an IP address, `localhost`, a name under `.localhost` or `.test`, or a configured name,
/// with or without a port. A DNS rebinding page's requests carry a name the attacker resolves in
/// public DNS, never one of these.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        // [v6]:port
        match rest.split_once(']') {
            Some((v6, port)) if port.is_empty() || port.starts_with(':') => {
                return v6.parse::<std::net::Ipv6Addr>().is_ok();
            }
            _ => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            Some(_) => return false,
            None => host,
        }
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.parse::<std::net::Ipv4Addr>().is_ok()
        || name == "localhost"
        || name.ends_with(".localhost")
        || name.ends_with(".test")
        || allowed.iter().any(|a| a.trim_end_matches('.') == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        let allowed = vec!["tokentap.internal".to_string()];
        let cases = [
            ("127.0.0.1:8788", true),
            ("127.0.0.1", true),
            ("10.1.2.3:8788", true),
            ("[::1]:8788", true),
            ("[::1]", true),
            ("localhost:8788", true),
            ("LOCALHOST", true),
            ("app.localhost:1", true),
            ("tokentap.test", true),
            ("tokentap.internal:8788", true),
            ("Tokentap.Internal.", true),
            ("evil.example:8788", false),
            ("evil.example", false),
            ("127.0.0.1.evil.example", false),
            ("localhost.evil.example", false),
            ("evil.test.example", false),
            ("[::1]x", false),
            ("[evil]:80", false),
            ("host:port", false),
            ("", false),
        ];
        for (host, expected) in cases {
            assert_eq!(host_allowed(host, &allowed), expected, "{host}");
        }
    }

    #[test]
    fn tokens() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer t1"));
        headers.insert(COOKIE, HeaderValue::from_static("a=b; tokentap_admin=t2; c=d"));
        assert_eq!(presented(&headers).collect::<Vec<_>>(), ["t1", "t2"]);
        assert_eq!(login_token(Some("a=1&token=xyz")), Some("xyz"));
        assert_eq!(login_token(Some("a=1")), None);
    }
}
