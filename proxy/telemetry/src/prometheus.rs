//! The Prometheus text exposition format (version 0.0.4) of a metrics snapshot, served by the admin
//! API at `GET /metrics`.
//!
//! Names come from the metric table (`prometheus_name`); label names are the OpenTelemetry
//! attribute keys with every character outside `[a-zA-Z0-9_]` replaced by `_`, which is what the
//! Collector's Prometheus exporter does too.

use std::fmt::Write;

use crate::conventions::Instrument;
use crate::registry::{MetricSnapshot, SeriesValue};

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Prometheus label name of an attribute key.
pub fn label_name(key: &str) -> String {
    key.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

fn escape_label_value(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A float the way Prometheus reads it.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

fn labels_text(labels: &[(String, String)], extra: Option<(&str, &str)>) -> String {
    let mut out = String::new();
    let mut first = true;
    for (k, v) in labels.iter().map(|(k, v)| (label_name(k), v.as_str())).chain(extra.map(|(k, v)| (k.to_string(), v)))
    {
        out.push(if first { '{' } else { ',' });
        first = false;
        out.push_str(&k);
        out.push_str("=\"");
        escape_label_value(v, &mut out);
        out.push('"');
    }
    if !first {
        out.push('}');
    }
    out
}

/// Renders every metric, with `# HELP` and `# TYPE` lines even when it has no series yet.
pub fn render(snapshot: &[MetricSnapshot]) -> String {
    let mut out = String::with_capacity(16 << 10);
    for metric in snapshot {
        let def = metric.def;
        let name = def.prometheus_name;
        let kind = match def.instrument {
            Instrument::Counter => "counter",
            Instrument::Histogram(_) => "histogram",
        };
        let _ = writeln!(out, "# HELP {name} {} ({}, unit {})", escape_help(def.description), def.name, def.unit);
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for series in &metric.series {
            match (&series.value, def.instrument) {
                (SeriesValue::Counter(c), _) => {
                    let _ = writeln!(out, "{name}{} {c}", labels_text(&series.labels, None));
                }
                (SeriesValue::Histogram { bucket_counts, sum, count, .. }, Instrument::Histogram(bounds)) => {
                    let mut cumulative = 0u64;
                    for (i, n) in bucket_counts.iter().enumerate() {
                        cumulative += n;
                        let le = bounds.get(i).map_or_else(|| "+Inf".to_string(), |b| number(*b));
                        let _ = writeln!(
                            out,
                            "{name}_bucket{} {cumulative}",
                            labels_text(&series.labels, Some(("le", &le)))
                        );
                    }
                    let labels = labels_text(&series.labels, None);
                    let _ = writeln!(out, "{name}_sum{labels} {}", number(*sum));
                    let _ = writeln!(out, "{name}_count{labels} {count}");
                }
                (SeriesValue::Histogram { .. }, Instrument::Counter) => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conventions::{attr, MetricId};
    use crate::registry::tests::registry;

    #[test]
    fn histogram_lines_are_cumulative_and_end_with_inf() {
        let registry = registry(10);
        let labels = vec![(attr::REQUEST_MODEL, "m\"x".to_string())];
        registry.add(MetricId::TtftAnswer, &labels, 0.003);
        registry.add(MetricId::TtftAnswer, &labels, 0.3);
        registry.add(MetricId::TtftAnswer, &labels, 30.0);
        let text = render(&registry.snapshot());
        assert!(text.contains("# TYPE tokentap_ttft_answer_seconds histogram\n"), "{text}");
        assert!(
            text.contains("tokentap_ttft_answer_seconds_bucket{gen_ai_request_model=\"m\\\"x\",le=\"0.001\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("tokentap_ttft_answer_seconds_bucket{gen_ai_request_model=\"m\\\"x\",le=\"0.005\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("tokentap_ttft_answer_seconds_bucket{gen_ai_request_model=\"m\\\"x\",le=\"10\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("tokentap_ttft_answer_seconds_bucket{gen_ai_request_model=\"m\\\"x\",le=\"+Inf\"} 3\n"),
            "{text}"
        );
        assert!(text.contains("tokentap_ttft_answer_seconds_count{gen_ai_request_model=\"m\\\"x\"} 3\n"), "{text}");
        assert!(text.contains("# TYPE tokentap_requests_total counter\n"), "{text}");
    }

    #[test]
    fn label_names_replace_dots() {
        assert_eq!(label_name("gen_ai.request.model"), "gen_ai_request_model");
        assert_eq!(label_name("tokentap.route"), "tokentap_route");
    }
}
