//! The one error shape of the admin API: a status and `{"error": "…"}`, with `"parameter"` naming
//! the query parameter at fault when there is one.

use axum::http::header::ALLOW;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// Why the admin API did not answer with what was asked.
#[derive(Debug, thiserror::Error)]
pub(super) enum AdminError {
    /// A query parameter the endpoint does not take, or a value it cannot use (400).
    #[error("{message}")]
    BadParameter { parameter: String, message: String },
    /// No record with this id in memory (404).
    #[error("no recent record with this request id")]
    NoRecord,
    /// No turn with that id in memory (404).
    #[error("no turn with that id in memory")]
    NoTurn,
    /// A path the API does not have (404).
    #[error("unknown admin route; see /_tokentap/api/health")]
    UnknownRoute,
    /// A method other than GET (405).
    #[error("the admin API is read-only: use GET")]
    ReadOnly,
    /// No valid admin token (401).
    #[error("the admin API needs its token: send Authorization: Bearer <admin_token>, or open /_tokentap/?token=<admin_token> once")]
    Unauthorized,
    /// A Host header that is neither an IP address, localhost nor in `admin_allowed_hosts` (403).
    #[error("Host not allowed: use an IP address or localhost, or add the name to admin_allowed_hosts")]
    HostNotAllowed,
    /// The live feed has `admin_max_feed_subscribers` subscribers already (503).
    #[error("the live feed has its {max} subscribers (admin_max_feed_subscribers); close one or raise the limit")]
    TooManySubscribers { max: usize },
    /// `/metrics` while `[metrics] prometheus = false` (404).
    #[error("the Prometheus endpoint is off ([metrics] prometheus = false)")]
    PrometheusOff,
}

impl AdminError {
    pub(super) fn bad(parameter: impl Into<String>, message: impl Into<String>) -> Self {
        AdminError::BadParameter { parameter: parameter.into(), message: message.into() }
    }

    pub(super) fn status(&self) -> StatusCode {
        match self {
            AdminError::BadParameter { .. } => StatusCode::BAD_REQUEST,
            AdminError::NoRecord | AdminError::NoTurn | AdminError::UnknownRoute | AdminError::PrometheusOff => {
                StatusCode::NOT_FOUND
            }
            AdminError::ReadOnly => StatusCode::METHOD_NOT_ALLOWED,
            AdminError::Unauthorized => StatusCode::UNAUTHORIZED,
            AdminError::HostNotAllowed => StatusCode::FORBIDDEN,
            AdminError::TooManySubscribers { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let body = match &self {
            AdminError::BadParameter { parameter, message } => {
                serde_json::json!({ "error": message, "parameter": parameter })
            }
            other => serde_json::json!({ "error": other.to_string() }),
        };
        let mut response = super::json(self.status(), body.to_string());
        if let AdminError::ReadOnly = self {
            response.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, OPTIONS"));
        }
        response
    }
}
