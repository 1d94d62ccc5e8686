//! Metric observations: the values one record adds to the metrics, with their labels.

use tokentap_record::server_time::ServerCheck;
use tokentap_record::Record;

use super::attributes::attr;
use super::metrics::MetricId;
use super::metrics::{label, Labels, Objectives, Observation, SharedLabels};
use super::request::{error_type, provider_name, request_end_ns};

// ---------------------------------------------------------------------------------------------
// Metric observations.
// ---------------------------------------------------------------------------------------------

/// The labels every request metric carries: operation, provider, model, route, outcome. Values
/// that are unknown are left out (Prometheus treats a missing label as empty).
pub fn request_labels(record: &Record) -> Labels {
    let mut labels = Vec::with_capacity(5);
    if let Some(op) = &record.request.operation {
        labels.push((attr::OPERATION_NAME, label(op)));
    }
    labels.push((attr::PROVIDER_NAME, provider_name(record).to_string()));
    if let Some(model) = record.request.model.as_ref().filter(|m| !m.is_empty()) {
        labels.push((attr::REQUEST_MODEL, label(model)));
    }
    labels.push((attr::ROUTE, label(&record.route)));
    labels.push((attr::OUTCOME, record.outcome.as_str().to_string()));
    labels
}

/// The verdict counter's observation for `record`, judged in `scope` ("proxy" or "browser").
pub fn rebuffer_observation(record: &Record, scope: &str) -> Option<Observation> {
    let d = record.diagnosis.as_ref()?;
    let mut labels: Labels =
        vec![(attr::ROUTE, label(&record.route)), (attr::REBUFFER_KIND, d.kind.as_str().to_string())];
    if let Some(hop) = d.hop {
        labels.push((attr::REBUFFER_HOP, hop.as_str().to_string()));
    }
    labels.push((attr::REBUFFER_SCOPE, scope.to_string()));
    Some(Observation { metric: MetricId::RebufferVerdicts, labels: labels.into(), value: 1.0 })
}

/// Whether a request counts towards goodput (the same verdict the dashboard and reports show).
pub fn is_good(record: &Record, objectives: &Objectives) -> bool {
    tokentap_record::goodput::verdict(record, objectives).good
}

/// Everything one record adds to the metrics.
pub fn metric_observations(record: &Record, objectives: &Objectives) -> Vec<Observation> {
    let mut out = request_observations(record, objectives);
    super::mcp::mcp_observations(record, &mut out);
    out
}

/// What the request itself adds (the GenAI, voice, stream and server metrics).
fn request_observations(record: &Record, objectives: &Objectives) -> Vec<Observation> {
    let labels: SharedLabels = request_labels(record).into();
    // A streamed answer's record has about 16 (grown by doubling: four allocations and copies).
    let mut out = Vec::with_capacity(24);
    let mut push = |metric: MetricId, labels: &SharedLabels, value: f64| {
        if value.is_finite() && value >= 0.0 {
            out.push(Observation { metric, labels: labels.clone(), value });
        }
    };
    push(MetricId::Requests, &labels, 1.0);
    push(MetricId::HookTime, &labels, record.self_overhead.hook_time_us / 1e6);
    if is_good(record, objectives) {
        push(MetricId::GoodRequests, &labels, 1.0);
    }

    // The gen_ai.* metrics describe GenAI operations only.
    let genai = record.request.operation.is_some();
    if genai {
        let mut duration_labels = labels.clone();
        if let Some(error) = error_type(record) {
            let mut with_error = Labels::clone(&labels);
            with_error.push((attr::ERROR_TYPE, label(&error)));
            duration_labels = with_error.into();
        }
        let end_ns = record.timeline.t_end_ns.unwrap_or_else(|| request_end_ns(record));
        push(MetricId::OperationDuration, &duration_labels, end_ns as f64 / 1e9);
    }
    if let Some(s) = &record.speech {
        if let Some(v) = s.time_to_first_audio_ms {
            push(MetricId::VoiceTimeToFirstAudio, &labels, v / 1e3);
        }
        if let Some(v) = s.time_to_first_audible_ms {
            push(MetricId::VoiceTimeToFirstAudible, &labels, v / 1e3);
        }
    }
    if let Some(v) = record.transcription.as_ref().and_then(|t| t.transcript_done_ms) {
        push(MetricId::VoiceTranscriptDone, &labels, v / 1e3);
    }

    let Some(a) = &record.analysis else {
        super::realtime::realtime_observations(record, &labels, &mut out);
        return out;
    };
    let m = &a.metrics;
    let streaming = record.request.stream == Some(true);
    if genai && streaming {
        if let Some(ttfc) = m.time_to_first_chunk_ms {
            push(MetricId::TimeToFirstChunk, &labels, ttfc / 1e3);
        }
    }
    // Gaps between consecutive content-bearing events (the events an SDK hands out as chunks; a
    // network read is not a chunk). Events past the analysis cap are not listed, so on a stream
    // longer than the cap these metrics see its first part.
    let mut previous: Option<f64> = None;
    for e in a.events.iter().filter(|e| e.class.is_content()) {
        if let Some(p) = previous {
            let gap = (e.t_ms - p).max(0.0) / 1e3;
            if genai && streaming {
                push(MetricId::TimePerOutputChunk, &labels, gap);
            }
            push(MetricId::InterTokenLatency, &labels, gap);
        }
        previous = Some(e.t_ms);
    }
    if genai {
        if let Some(u) = &a.usage {
            for (kind, tokens) in [("input", u.input_tokens), ("output", u.output_tokens)] {
                if let Some(tokens) = tokens {
                    let mut token_labels = Labels::clone(&labels);
                    token_labels.push((attr::TOKEN_TYPE, kind.to_string()));
                    push(MetricId::TokenUsage, &token_labels.into(), tokens as f64);
                }
            }
        }
    }
    if let Some(v) = m.ttft_answer_ms {
        push(MetricId::TtftAnswer, &labels, v / 1e3);
    }
    if let Some(v) = m.ttft_reasoning_ms {
        push(MetricId::TtftReasoning, &labels, v / 1e3);
    }
    if let Some(v) = m.ttft_tool_ms {
        push(MetricId::TtftTool, &labels, v / 1e3);
    }
    if let Some(v) = m.output_tps {
        push(MetricId::OutputTps, &labels, v);
    }
    if a.stalls.count > 0 {
        push(MetricId::Stalls, &labels, a.stalls.count as f64);
    }
    if let Some(s) = &record.server {
        for (metric, ms) in [
            (MetricId::ServerQueue, s.queue_ms),
            (MetricId::ServerPrefill, s.prefill_ms),
            (MetricId::ServerDecode, s.decode_ms),
        ] {
            if let Some(ms) = ms {
                push(metric, &labels, ms / 1e3);
            }
        }
    }
    // Only a consistent split: a negative or untrusted difference says nothing about the network.
    if let Some(split) = record.server_split.as_ref().filter(|s| s.check == ServerCheck::Consistent) {
        push(MetricId::NetworkAndProxy, &labels, split.network_and_proxy_ms.max(0.0) / 1e3);
    }
    out.extend(rebuffer_observation(record, "proxy"));
    out
}
