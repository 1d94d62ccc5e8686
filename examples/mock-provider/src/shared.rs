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
