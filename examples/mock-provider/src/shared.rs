//! State shared by the request path and the control endpoints, and the JSON answer both give.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use serde_json::Value;

use crate::body::MockBody;
use crate::config::MockConfig;
use crate::stats::{RequestOutcome, StatsHub};

/// What every connection task of one mock server sees.
pub(crate) struct Shared {
    pub(crate) config: MockConfig,
    pub(crate) stats: Arc<StatsHub>,
    pub(crate) last_request: Mutex<Option<Value>>,
}

/// A JSON response with the given status.
pub(crate) fn json_response(status: StatusCode, body: &Value, outcome: Option<RequestOutcome>) -> Response<MockBody> {
    let mut response = Response::new(MockBody::full(Bytes::from(body.to_string()), outcome));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The answer to `x-mock-status: CODE`: that status with the provider's error body, and
/// `retry-after: 1` on 429.
pub(crate) fn mock_status_response(
    status: u16,
    error_body: impl FnOnce(StatusCode, &str) -> Value,
    outcome: RequestOutcome,
) -> Response<MockBody> {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let message = match status.as_u16() {
        429 => "Rate limit reached (x-mock-status: 429).".to_owned(),
        _ => format!("Mock error (x-mock-status: {}).", status.as_u16()),
    };
    let mut response = json_response(status, &error_body(status, &message), Some(outcome));
    if status == StatusCode::TOO_MANY_REQUESTS {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

/// A whole body of `content_type`.
pub(crate) fn full_response(content_type: &'static str, body: Bytes, outcome: RequestOutcome) -> Response<MockBody> {
    let mut response = Response::new(MockBody::full(body, Some(outcome)));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
