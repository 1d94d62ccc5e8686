//! CORS, for every path in one place: the proxy's own pages (`AdminState::allowed_origins`) may
//! read the API from a browser; other origins get no CORS headers. A preflight (`OPTIONS`, any
//! path) is answered here, 204, and never reaches the routes.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN, ALLOW, ORIGIN, VARY};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AdminState;

pub(super) async fn headers(State(state): State<Arc<AdminState>>, request: Request, next: Next) -> Response {
    let origin = request
        .headers()
        .get(ORIGIN)
        .filter(|o| o.to_str().is_ok_and(|o| state.allowed_origins.iter().any(|a| a == o)))
        .cloned();
    let mut response = if request.method() == Method::OPTIONS {
        let methods = [(ACCESS_CONTROL_ALLOW_METHODS, "GET, OPTIONS"), (ALLOW, "GET, OPTIONS")];
        (StatusCode::NO_CONTENT, methods).into_response()
    } else {
        next.run(request).await
    };
    if let Some(origin) = origin {
        let headers = response.headers_mut();
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(VARY, HeaderValue::from_static("origin"));
    }
    response
}
