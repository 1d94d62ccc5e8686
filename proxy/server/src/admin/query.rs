//! Query strings, typed: one struct per endpoint, and the [`Params`] extractor whose every 400
//! names the parameter at fault.
//!
//! A parameter given twice counts once, with its last value. Each parameter is decoded alone
//! before the whole query is, so that a failure is known to be about that parameter.

use std::str::FromStr;
use std::time::SystemTime;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};

use super::error::AdminError;
use crate::store::RecordFilter;

/// The most records or rows one answer holds.
const MAX_LIMIT: usize = 10_000;
/// How many records or rows an answer holds without `limit=`.
const DEFAULT_LIMIT: usize = 100;

/// The query string of a request as a `T`; a bad one is rejected with [`AdminError::BadParameter`].
pub(super) struct Params<T>(pub(super) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = AdminError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, AdminError> {
        parse(parts.uri.query().unwrap_or("")).map(Params)
    }
}

/// Decodes a raw query string (without the `?`) into `T`.
pub(super) fn parse<T: DeserializeOwned>(raw: &str) -> Result<T, AdminError> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded::from_str(raw).map_err(|e| AdminError::bad("", format!("malformed query string: {e}")))?;
    let mut params: Vec<(String, String)> = Vec::with_capacity(pairs.len());
    for (key, value) in pairs {
        params.retain(|(k, _)| *k != key);
        params.push((key, value));
    }
    for (key, value) in &params {
        decode::<T>(&[(key, value)]).map_err(|e| blame(key, &e))?;
    }
    // Every parameter decoded alone and none is repeated, so this fails only if a field of `T`
    // depends on another.
    decode(&params).map_err(|e| AdminError::bad("", e.to_string()))
}

/// `pairs` encoded again, then decoded as a `T`: the one way into serde_urlencoded's typed values.
fn decode<T: DeserializeOwned>(pairs: impl serde::Serialize) -> Result<T, serde_urlencoded::de::Error> {
    let encoded = serde_urlencoded::to_string(pairs).map_err(serde_urlencoded::de::Error::custom)?;
    serde_urlencoded::from_str(&encoded)
}

/// The 400 for a parameter that failed to decode alone: serde's message for a field that
/// `deny_unknown_fields` refused, else the value's own complaint ("must be a number").
fn blame(parameter: &str, error: &serde_urlencoded::de::Error) -> AdminError {
    let message = error.to_string();
    if message.starts_with("unknown field") {
        AdminError::bad(parameter, format!("unknown query parameter {parameter:?}"))
    } else {
        AdminError::bad(parameter, format!("{parameter} {message}"))
    }
}

/// `limit=`: a count in 1..=10000.
fn limit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    match String::deserialize(d)?.parse::<usize>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(Some(n)),
        _ => Err(D::Error::custom(format_args!("must be 1..={MAX_LIMIT}"))),
    }
}

/// A number parameter (`status=`, `offset=`, `since_unix_ns=`).
fn number<'de, D: Deserializer<'de>, N: FromStr>(d: D) -> Result<Option<N>, D::Error> {
    String::deserialize(d)?.parse().map(Some).map_err(|_| D::Error::custom("must be a number"))
}

/// A filter whose empty value means "no filter" (the dashboard's select boxes).
fn non_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Some(String::deserialize(d)?).filter(|v| !v.is_empty()))
}

/// `GET /_tokentap/api/requests`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RequestsQuery {
    #[serde(default, deserialize_with = "limit")]
    limit: Option<usize>,
    route: Option<String>,
    outcome: Option<String>,
    model: Option<String>,
    #[serde(default, deserialize_with = "number")]
    status: Option<u16>,
    #[serde(default, deserialize_with = "number")]
    since_unix_ns: Option<u64>,
    #[serde(default, deserialize_with = "non_empty")]
    trace_id: Option<String>,
}

impl RequestsQuery {
    pub(super) fn limit(&self) -> usize {
        self.limit.unwrap_or(DEFAULT_LIMIT)
    }

    pub(super) fn filter(self) -> RecordFilter {
        RecordFilter {
            route: self.route,
            outcome: self.outcome,
            model: self.model,
            status: self.status,
            since_unix_ns: self.since_unix_ns,
            trace_id: self.trace_id,
        }
    }
}

/// The longest `wait_ms=` of one record or turn.
pub(super) const MAX_WAIT_MS: u64 = 30_000;

/// `GET /_tokentap/api/requests/{request_id}` and `GET /_tokentap/api/turns/{turn_id}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WaitQuery {
    /// How long to wait for the record or turn when it is not written yet (0..=30000 ms).
    #[serde(default, deserialize_with = "wait_ms")]
    wait_ms: Option<u64>,
}

impl WaitQuery {
    pub(super) fn wait(&self) -> Option<std::time::Duration> {
        self.wait_ms.filter(|&ms| ms > 0).map(std::time::Duration::from_millis)
    }
}

/// `wait_ms=`: milliseconds in 0..=30000.
fn wait_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match String::deserialize(d)?.parse::<u64>() {
        Ok(n) if n <= MAX_WAIT_MS => Ok(Some(n)),
        _ => Err(D::Error::custom(format_args!("must be 0..={MAX_WAIT_MS} (milliseconds)"))),
    }
}

/// `GET /_tokentap/api/turns`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TurnsQuery {
    #[serde(default, deserialize_with = "limit")]
    limit: Option<usize>,
    #[serde(default, deserialize_with = "non_empty")]
    pub(super) conversation_id: Option<String>,
}

impl TurnsQuery {
    pub(super) fn limit(&self) -> usize {
        self.limit.unwrap_or(DEFAULT_LIMIT)
    }
}

/// `GET /_tokentap/api/list`: the dashboard's page of rows.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    #[serde(default, deserialize_with = "limit")]
    limit: Option<usize>,
    #[serde(default, deserialize_with = "number")]
    offset: Option<usize>,
    /// Free text the rows must contain (`ListRow::matches_text`).
    #[serde(default)]
    pub(super) q: String,
    #[serde(default, deserialize_with = "non_empty")]
    route: Option<String>,
    #[serde(default, deserialize_with = "non_empty")]
    model: Option<String>,
    #[serde(default, deserialize_with = "non_empty")]
    outcome: Option<String>,
}

impl ListQuery {
    pub(super) fn limit(&self) -> usize {
        self.limit.unwrap_or(DEFAULT_LIMIT)
    }

    pub(super) fn offset(&self) -> usize {
        self.offset.unwrap_or(0)
    }

    pub(super) fn filter(&self) -> RecordFilter {
        RecordFilter {
            route: self.route.clone(),
            outcome: self.outcome.clone(),
            model: self.model.clone(),
            ..RecordFilter::default()
        }
    }
}

/// `GET /_tokentap/api/summary`. Times are checked against a clock, so they stay text here and
/// [`SummaryQuery::apply`] reads them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SummaryQuery {
    /// Same as `since` (the dashboard's name); `since` wins when both bound.
    window: Option<String>,
    since: Option<String>,
    until: Option<String>,
    group_by: Option<String>,
    include_warmup: Option<String>,
}

impl SummaryQuery {
    /// Sets the bounds, grouping and warm-up choice of `options`; `now` anchors durations ("15m").
    pub(super) fn apply(self, options: &mut tokentap_report::ReportOptions, now: SystemTime) -> Result<(), AdminError> {
        let time = |parameter: &str, text: &Option<String>, all: bool| match text.as_deref() {
            None | Some("") => Ok(None),
            Some("all") if all => Ok(None),
            Some(text) => {
                tokentap_report::summary::parse_time(text, now).map(Some).map_err(|e| AdminError::bad(parameter, e))
            }
        };
        let window = time("window", &self.window, true)?;
        options.since_unix_ns = time("since", &self.since, true)?.or(window);
        options.until_unix_ns = time("until", &self.until, false)?;
        if let Some(group_by) = &self.group_by {
            options.group_by =
                tokentap_report::GroupKey::parse_list(group_by).map_err(|e| AdminError::bad("group_by", e))?;
        }
        options.include_warmup = self.include_warmup.is_some_and(|v| matches!(v.as_str(), "true" | "1" | "yes" | ""));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokentap_report::{GroupKey, ReportOptions};

    fn bad<T: DeserializeOwned + std::fmt::Debug>(raw: &str) -> (String, String) {
        match parse::<T>(raw) {
            Err(AdminError::BadParameter { parameter, message }) => (parameter, message),
            other => panic!("{raw:?}: expected a bad parameter, got {other:?}"),
        }
    }

    #[test]
    fn unknown_parameters_are_named() {
        let (parameter, message) = bad::<RequestsQuery>("limit=5&colour=red");
        assert_eq!(parameter, "colour");
        assert_eq!(message, "unknown query parameter \"colour\"");
        assert_eq!(bad::<ListQuery>("status=200").0, "status", "the list has no status filter");
        assert_eq!(bad::<SummaryQuery>("window=all&q=x").0, "q");
        assert_eq!(bad::<SummaryQuery>("gr%6Fup=x").0, "group", "the name is decoded before it is checked");
    }

    #[test]
    fn limits_and_numbers_name_their_parameter() {
        for raw in ["limit=0", "limit=10001", "limit=abc", "limit=", "limit", "limit=-1"] {
            assert_eq!(bad::<RequestsQuery>(raw), ("limit".into(), "limit must be 1..=10000".into()), "{raw}");
            assert_eq!(bad::<ListQuery>(raw).0, "limit", "{raw}");
        }
        assert_eq!(bad::<RequestsQuery>("status=teapot"), ("status".into(), "status must be a number".into()));
        assert_eq!(bad::<RequestsQuery>("status=70000").1, "status must be a number");
        assert_eq!(bad::<RequestsQuery>("since_unix_ns=yesterday").1, "since_unix_ns must be a number");
        assert_eq!(bad::<ListQuery>("limit=5&offset=x"), ("offset".into(), "offset must be a number".into()));
    }

    #[test]
    fn wait_ms_is_bounded_and_zero_means_no_wait() {
        for raw in ["wait_ms=30001", "wait_ms=-1", "wait_ms=soon", "wait_ms="] {
            assert_eq!(
                bad::<WaitQuery>(raw),
                ("wait_ms".into(), "wait_ms must be 0..=30000 (milliseconds)".into()),
                "{raw}"
            );
        }
        assert_eq!(bad::<WaitQuery>("limit=5").0, "limit", "one record has no limit");
        assert_eq!(parse::<WaitQuery>("").unwrap().wait(), None);
        assert_eq!(parse::<WaitQuery>("wait_ms=0").unwrap().wait(), None);
        let q: WaitQuery = parse("wait_ms=30000").unwrap();
        assert_eq!(q.wait(), Some(std::time::Duration::from_secs(30)));
    }

    #[test]
    fn requests_query_builds_the_filter() {
        let q: RequestsQuery =
            parse("limit=5&model=gpt%2D4o&route=a+b&outcome=ok&status=500&since_unix_ns=7&limit=10000").unwrap();
        assert_eq!(q.limit(), 10_000, "the last of a repeated parameter wins");
        let f = q.filter();
        assert_eq!(f.model.as_deref(), Some("gpt-4o"));
        assert_eq!(f.route.as_deref(), Some("a b"));
        assert_eq!((f.outcome.as_deref(), f.status, f.since_unix_ns), (Some("ok"), Some(500), Some(7)));
        let none: RequestsQuery = parse("").unwrap();
        assert_eq!(none.limit(), 100);
        assert!(none.filter().route.is_none());
    }

    #[test]
    fn empty_list_filters_mean_no_filter() {
        let q: ListQuery = parse("limit=20&offset=40&q=mock%20b&route=&model=&outcome=").unwrap();
        assert_eq!((q.limit(), q.offset(), q.q.as_str()), (20, 40, "mock b"));
        let f = q.filter();
        assert!(f.route.is_none() && f.model.is_none() && f.outcome.is_none(), "{f:?}");
        let q: ListQuery = parse("model=mock-gpt").unwrap();
        assert_eq!(q.filter().model.as_deref(), Some("mock-gpt"));
    }

    fn summary(raw: &str) -> Result<ReportOptions, AdminError> {
        let now = std::time::UNIX_EPOCH + std::time::Duration::from_secs(10_000);
        let mut options = ReportOptions::default();
        parse::<SummaryQuery>(raw)?.apply(&mut options, now)?;
        Ok(options)
    }

    #[test]
    fn summary_query_sets_bounds_grouping_and_warmup() {
        let o = summary("window=all&group_by=model,route&include_warmup=true").unwrap();
        assert_eq!((o.since_unix_ns, o.until_unix_ns), (None, None));
        assert_eq!(o.group_by, vec![GroupKey::Model, GroupKey::Route]);
        assert!(o.include_warmup);
        let o = summary("window=15m&until=&include_warmup=no").unwrap();
        assert_eq!(o.since_unix_ns, Some((10_000 - 900) * 1_000_000_000));
        assert!(!o.include_warmup && o.until_unix_ns.is_none());
        assert_eq!(summary("since=").unwrap().since_unix_ns, None);
        assert!(summary("include_warmup").unwrap().include_warmup, "a bare flag is true");
        assert!(!summary("").unwrap().include_warmup);
        assert_eq!(summary("window=1h&since=15m").unwrap().since_unix_ns, Some((10_000 - 900) * 1_000_000_000));
    }

    #[test]
    fn summary_errors_name_their_parameter() {
        let named = |raw: &str| match summary(raw) {
            Err(AdminError::BadParameter { parameter, message }) => (parameter, message),
            other => panic!("{raw}: {other:?}"),
        };
        let (parameter, message) = named("window=fortnight");
        assert_eq!(parameter, "window");
        assert!(message.contains("neither a duration"), "{message}");
        assert_eq!(named("since=soon").0, "since");
        assert_eq!(named("until=all").0, "until", "all is no bound only for the start");
        let (parameter, message) = named("group_by=provider");
        assert_eq!(parameter, "group_by");
        assert!(message.contains("provider"), "{message}");
    }

    #[tokio::test]
    async fn the_extractor_rejects_with_a_json_400() {
        use axum::response::IntoResponse;
        let request = axum::http::Request::get("/_tokentap/api/requests?limit=0").body(()).unwrap();
        let (mut parts, ()) = request.into_parts();
        let Err(rejection) = Params::<RequestsQuery>::from_request_parts(&mut parts, &()).await else {
            panic!("limit=0 was accepted");
        };
        let response = rejection.into_response();
        assert_eq!(response.status(), 400);
        assert_eq!(response.headers()["content-type"], "application/json");
        assert_eq!(response.headers()["cache-control"], "no-store");
        let body = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body, serde_json::json!({ "error": "limit must be 1..=10000", "parameter": "limit" }));
    }
}
