//! Control endpoints under `/_mock/` for tests: stats, a long-poll on the stats, and the last
//! provider request. They are not counted as provider requests.

use std::time::Duration;

use http::{Response, StatusCode};
use serde_json::json;

use crate::body::MockBody;
use crate::shared::{json_response, Shared};
use crate::stats::StatsThresholds;

const DEFAULT_WAIT: Duration = Duration::from_secs(10);

pub(crate) async fn handle(shared: &Shared, name: &str, query: &str) -> Response<MockBody> {
    match name {
        "stats" => json_response(StatusCode::OK, &json!(shared.stats.snapshot()), None),
        "wait" => {
            let mut thresholds = StatsThresholds::default();
            let mut timeout = DEFAULT_WAIT;
            for (key, value) in query.split('&').filter_map(|pair| pair.split_once('=')) {
                let Ok(number) = value.parse::<u64>() else {
                    return bad_query(key, value);
                };
                match key {
                    "requests" => thresholds.requests = Some(number),
                    "completed" => thresholds.completed = Some(number),
                    "cancelled" => thresholds.cancelled = Some(number),
                    "reset" => thresholds.reset = Some(number),
                    "timeout_ms" => timeout = Duration::from_millis(number),
                    _ => return bad_query(key, value),
                }
            }
            match shared.stats.wait_for(thresholds, timeout).await {
                Ok(stats) => json_response(StatusCode::OK, &json!(stats), None),
                Err(stats) => json_response(StatusCode::REQUEST_TIMEOUT, &json!(stats), None),
            }
        }
        "last_request" => match shared.last_request.lock().ok().and_then(|last| last.clone()) {
            Some(record) => json_response(StatusCode::OK, &record, None),
            None => json_response(StatusCode::NOT_FOUND, &json!({"error": "no provider request yet"}), None),
        },
        _ => json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": format!("unknown control endpoint /_mock/{name}")}),
            None,
        ),
    }
}

fn bad_query(key: &str, value: &str) -> Response<MockBody> {
    json_response(StatusCode::BAD_REQUEST, &json!({"error": format!("bad query parameter {key}={value}")}), None)
}
