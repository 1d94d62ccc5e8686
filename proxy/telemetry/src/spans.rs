//! Plain span descriptions (`conventions::SpanPlan`) → the SDK's `SpanData`, and the resource
//! every export carries. The SDK's OTLP exporter does the rest (protobuf, grouping by scope).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{Event, SpanContext, SpanId, TraceFlags, TraceId, TraceState};
use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use opentelemetry_sdk::Resource;

use crate::conventions::{AttrValue, SpanKind, SpanPlan, SpanStatus};
use crate::settings::OtlpSettings;

/// Instrumentation scope of everything tokentap exports.
pub(crate) const SCOPE_NAME: &str = "tokentap";

pub(crate) fn scope() -> InstrumentationScope {
    InstrumentationScope::builder(SCOPE_NAME).with_version(env!("CARGO_PKG_VERSION")).build()
}

/// The resource attributes every export carries: service name and version, this process's
/// instance id, and the configured resource attributes (the built-in ones win).
pub(crate) fn resource_pairs(settings: &OtlpSettings, instance_id: &str) -> Vec<(String, String)> {
    let mut pairs = vec![
        ("service.name".to_string(), settings.service_name.clone()),
        ("service.version".to_string(), env!("CARGO_PKG_VERSION").to_string()),
        ("service.instance.id".to_string(), instance_id.to_string()),
    ];
    for (k, v) in &settings.resource_attributes {
        if !pairs.iter().any(|(key, _)| key == k) {
            pairs.push((k.clone(), v.clone()));
        }
    }
    pairs
}

/// The SDK resource of `resource_pairs` (no detectors: exactly those attributes).
pub(crate) fn sdk_resource(pairs: &[(String, String)]) -> Resource {
    Resource::builder_empty().with_attributes(pairs.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone()))).build()
}

fn system_time(unix_ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(unix_ns)
}

fn value(value: &AttrValue) -> Value {
    match value {
        AttrValue::Str(s) => Value::String(s.clone().into()),
        AttrValue::Int(i) => Value::I64(*i),
        AttrValue::F64(f) => Value::F64(*f),
        AttrValue::Bool(b) => Value::Bool(*b),
        AttrValue::StrArray(items) => {
            Value::Array(Array::String(items.iter().map(|s| StringValue::from(s.clone())).collect()))
        }
    }
}

fn attributes(attrs: &[(&'static str, AttrValue)]) -> Vec<KeyValue> {
    attrs.iter().map(|(k, v)| KeyValue::new(*k, value(v))).collect()
}

/// One span, with tokentap's own ids and times. Its parent is remote when it is the request span
/// continuing a client's `traceparent` (the only CLIENT span with a parent).
pub(crate) fn span_data(plan: &SpanPlan, scope: &InstrumentationScope) -> SpanData {
    let flags = if plan.sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
    let mut events = SpanEvents::default();
    events.events = plan
        .events
        .iter()
        .map(|e| Event::new(e.name, system_time(e.time_unix_ns), attributes(&e.attributes), 0))
        .collect();
    events.dropped_count = plan.dropped_events;
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(plan.trace_id),
            SpanId::from_bytes(plan.span_id),
            flags,
            false,
            TraceState::NONE,
        ),
        parent_span_id: plan.parent_span_id.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: plan.kind == SpanKind::Client && plan.parent_span_id.is_some(),
        span_kind: match plan.kind {
            SpanKind::Client => opentelemetry::trace::SpanKind::Client,
            SpanKind::Internal => opentelemetry::trace::SpanKind::Internal,
        },
        name: plan.name.clone().into(),
        start_time: system_time(plan.start_unix_ns),
        end_time: system_time(plan.end_unix_ns.max(plan.start_unix_ns)),
        attributes: attributes(&plan.attributes),
        dropped_attributes_count: 0,
        events,
        links: SpanLinks::default(),
        status: match &plan.status {
            SpanStatus::Unset => opentelemetry::trace::Status::Unset,
            SpanStatus::Error(message) => opentelemetry::trace::Status::error(message.clone()),
        },
        instrumentation_scope: scope.clone(),
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::common::v1::any_value;
    use opentelemetry_proto::tonic::trace::v1::{span, status};
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;

    use super::*;
    use crate::conventions::EventPlan;

    fn plan(kind: SpanKind, parent: Option<[u8; 8]>) -> SpanPlan {
        SpanPlan {
            trace_id: [7; 16],
            span_id: [3; 8],
            parent_span_id: parent,
            sampled: true,
            name: "chat m".into(),
            kind,
            start_unix_ns: 1_700_000_000_123_456_789,
            end_unix_ns: 1_700_000_000_123_456_000, // before the start: clamped
            attributes: vec![
                ("s", AttrValue::Str("v".into())),
                ("i", AttrValue::Int(-4)),
                ("f", AttrValue::F64(0.5)),
                ("b", AttrValue::Bool(true)),
                ("a", AttrValue::StrArray(vec!["x".into(), "y".into()])),
            ],
            events: vec![EventPlan {
                name: "chunk",
                time_unix_ns: 1_700_000_000_123_456_790,
                attributes: vec![("n", AttrValue::Int(1))],
            }],
            dropped_events: 5,
            status: SpanStatus::Error("boom".into()),
        }
    }

    #[test]
    fn a_plan_becomes_the_same_otlp_span_through_the_sdk_transform() {
        let data = span_data(&plan(SpanKind::Client, Some([9; 8])), &scope());
        let resource = sdk_resource(&[("service.name".into(), "t".into())]);
        let mut rs = group_spans_by_resource_and_scope(vec![data], &ResourceAttributesWithSchema::from(&resource));
        assert_eq!(rs.len(), 1);
        let scope_spans = rs.remove(0).scope_spans;
        assert_eq!(scope_spans.len(), 1);
        let scope = scope_spans[0].scope.as_ref().unwrap();
        assert_eq!((scope.name.as_str(), scope.version.as_str()), (SCOPE_NAME, env!("CARGO_PKG_VERSION")));
        let s = &scope_spans[0].spans[0];
        assert_eq!(s.trace_id, vec![7; 16]);
        assert_eq!(s.span_id, vec![3; 8]);
        assert_eq!(s.parent_span_id, vec![9; 8]);
        assert_eq!(s.flags, 0x1 | 0x100 | 0x200, "sampled, has-is-remote, parent remote");
        assert_eq!(s.kind, span::SpanKind::Client as i32);
        assert_eq!(s.start_time_unix_nano, 1_700_000_000_123_456_789);
        assert_eq!(s.end_time_unix_nano, s.start_time_unix_nano);
        let value = |key: &str| s.attributes.iter().find(|kv| kv.key == key).unwrap().value.clone().unwrap().value;
        assert_eq!(value("s"), Some(any_value::Value::StringValue("v".into())));
        assert_eq!(value("i"), Some(any_value::Value::IntValue(-4)));
        assert_eq!(value("f"), Some(any_value::Value::DoubleValue(0.5)));
        assert_eq!(value("b"), Some(any_value::Value::BoolValue(true)));
        let Some(any_value::Value::ArrayValue(array)) = value("a") else { panic!("not an array") };
        assert_eq!(array.values.len(), 2);
        assert_eq!(s.events.len(), 1);
        assert_eq!((s.events[0].name.as_str(), s.events[0].time_unix_nano), ("chunk", 1_700_000_000_123_456_790));
        assert_eq!(s.dropped_events_count, 5);
        let st = s.status.as_ref().unwrap();
        assert_eq!((st.code, st.message.as_str()), (status::StatusCode::Error as i32, "boom"));
    }

    #[test]
    fn only_a_client_span_with_a_parent_has_a_remote_parent() {
        let root = span_data(&plan(SpanKind::Client, None), &scope());
        assert!(!root.parent_span_is_remote);
        assert_eq!(root.parent_span_id, SpanId::INVALID);
        let child = span_data(&plan(SpanKind::Internal, Some([3; 8])), &scope());
        assert!(!child.parent_span_is_remote);
        let mut unsampled = plan(SpanKind::Internal, None);
        unsampled.sampled = false;
        unsampled.status = SpanStatus::Unset;
        let data = span_data(&unsampled, &scope());
        assert!(!data.span_context.trace_flags().is_sampled());
        assert_eq!(data.status, opentelemetry::trace::Status::Unset);
    }

    #[test]
    fn configured_resource_attributes_do_not_override_the_built_in_ones() {
        let settings = OtlpSettings {
            traces: None,
            metrics: None,
            service_name: "svc".into(),
            resource_attributes: vec![("service.name".into(), "other".into()), ("env".into(), "prod".into())],
            queue_capacity: 1,
            batch_max_records: 1,
            batch_delay: Duration::ZERO,
            metrics_interval: Duration::ZERO,
            max_events_per_span: 1,
            capture_content: false,
            spool_dir: std::path::PathBuf::new(),
            spool_max_bytes: 0,
            retry_initial: Duration::ZERO,
            retry_max: Duration::ZERO,
            profile: crate::settings::BackendProfile::Generic,
            llm_span: crate::settings::LlmSpan::Tokentap,
        };
        let pairs = resource_pairs(&settings, "abc");
        assert_eq!(pairs[0], ("service.name".into(), "svc".into()));
        assert_eq!(pairs[2], ("service.instance.id".into(), "abc".into()));
        assert_eq!(pairs[3], ("env".into(), "prod".into()));
        assert_eq!(pairs.len(), 4);
        assert_eq!(sdk_resource(&pairs).len(), 4);
    }
}
