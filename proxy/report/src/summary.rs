//! Filtering, grouping and aggregating records into a [`Report`].
//!
//! Rules (docs/metrics.md, Aggregates):
//! - percentiles are numpy's default (linear interpolation between closest ranks) over the raw
//!   per-request values, always with the sample count; no mean is reported;
//! - latency distributions cover successful requests (outcome `ok`) whose value is defined;
//! - warm-up requests (`conditions.warm_up`) are left out unless asked for, and the report says how
//!   many were left out;
//! - goodput counts every request of the group: good / total, and the good requests' output tokens
//!   per second of wall time, from the group's first request start to its last request end.

use std::collections::BTreeMap;

use serde::Serialize;
use tokentap_analysis::Distribution;

use tokentap_record::goodput::{first_paint_ms, verdict, ObjectiveOutcome};
use tokentap_record::server_time::ServerCheck;
use tokentap_record::SloConfig;
use tokentap_record::{Outcome, Record};

/// The distributions a report shows, in this order. The names are the record's field names.
pub const REPORT_METRICS: [&str; 5] = ["ttft_answer_ms", "time_to_first_paint_ms", "tpot_ms", "output_tps", "e2e_ms"];

/// What records are grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKey {
    Route,
    Model,
    /// `conditions.concurrency_at_t0` in power-of-two buckets: 0, 1, 2-3, 4-7, 8-15, …
    Concurrency,
    /// `conditions.prompt_cache`: cold, warm or unknown.
    PromptCache,
    /// The kind of traffic ([`traffic_kind`]): each has its own metrics and words.
    Traffic,
}

impl GroupKey {
    pub fn parse_list(text: &str) -> Result<Vec<GroupKey>, String> {
        let mut keys = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let key = match part {
                "route" => GroupKey::Route,
                "model" => GroupKey::Model,
                "concurrency" => GroupKey::Concurrency,
                "prompt_cache" => GroupKey::PromptCache,
                "traffic" => GroupKey::Traffic,
                other => {
                    return Err(format!(
                        "cannot group by {other:?}: use route, model, concurrency, prompt_cache or traffic"
                    ))
                }
            };
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        Ok(keys)
    }

    pub fn name(self) -> &'static str {
        match self {
            GroupKey::Route => "route",
            GroupKey::Model => "model",
            GroupKey::Concurrency => "concurrency",
            GroupKey::PromptCache => "prompt_cache",
            GroupKey::Traffic => "traffic",
        }
    }

    fn value_of(self, record: &Record) -> String {
        match self {
            GroupKey::Route => record.route.clone(),
            GroupKey::Model => record.conditions.model.clone().unwrap_or_else(|| "(none)".into()),
            GroupKey::Concurrency => concurrency_bucket(record.conditions.concurrency_at_t0),
            GroupKey::PromptCache => prompt_cache_label(record).to_string(),
            GroupKey::Traffic => traffic_kind(record).to_string(),
        }
    }
}

/// The kind of traffic a record is: `realtime` (a WebSocket session), `webrtc` (an SDP offer whose
/// peer connection the browser probe measured), `speech` (text to speech), `transcription` (speech
/// to text), `chat` (a streamed answer) or `non_streaming`.
pub fn traffic_kind(record: &Record) -> &'static str {
    if record.realtime.is_some() {
        "realtime"
    } else if record.browser.as_ref().is_some_and(|b| b.webrtc.is_some()) {
        "webrtc"
    } else if record.speech.is_some() {
        "speech"
    } else if record.transcription.is_some() {
        "transcription"
    } else if record.conditions.stream == Some(true) {
        "chat"
    } else {
        "non_streaming"
    }
}

/// `cold`, `warm` or `unknown` (`conditions.prompt_cache`).
pub fn prompt_cache_label(record: &Record) -> &'static str {
    record.conditions.prompt_cache.map_or("unknown", |c| c.as_str())
}

/// Power-of-two bucket of a concurrency: "0", "1", "2-3", "4-7", …
pub fn concurrency_bucket(n: u64) -> String {
    if n < 2 {
        return n.to_string();
    }
    let low = 1u64 << (63 - n.leading_zeros());
    format!("{}-{}", low, low.saturating_mul(2) - 1)
}

/// How to build a report.
#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    /// Only records whose t0 is at or after this time (Unix ns).
    pub since_unix_ns: Option<u64>,
    /// Only records whose t0 is before this time (Unix ns).
    pub until_unix_ns: Option<u64>,
    pub group_by: Vec<GroupKey>,
    pub include_warmup: bool,
    pub slo: SloConfig,
    /// Keep each group's raw samples in the report (for plots). Never serialized.
    pub keep_samples: bool,
    /// Where the records came from, stated in the report.
    pub source: String,
}

/// The five distributions of a group (docs/metrics.md names).
#[derive(Debug, Clone, Default, Serialize)]
pub struct GroupMetrics {
    pub ttft_answer_ms: Option<Distribution>,
    pub time_to_first_paint_ms: Option<Distribution>,
    pub tpot_ms: Option<Distribution>,
    pub output_tps: Option<Distribution>,
    pub e2e_ms: Option<Distribution>,
}

impl GroupMetrics {
    pub fn get(&self, name: &str) -> Option<&Distribution> {
        match name {
            "ttft_answer_ms" => self.ttft_answer_ms.as_ref(),
            "time_to_first_paint_ms" => self.time_to_first_paint_ms.as_ref(),
            "tpot_ms" => self.tpot_ms.as_ref(),
            "output_tps" => self.output_tps.as_ref(),
            "e2e_ms" => self.e2e_ms.as_ref(),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct StallRate {
    /// Successful requests with an analysis.
    pub analysed: u64,
    /// … of which had at least one stall.
    pub stalled: u64,
    /// stalled / analysed; absent when nothing was analysed.
    pub rate: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Goodput {
    /// Requests in the group (every outcome).
    pub total: u64,
    /// Succeeded and met every configured objective.
    pub good: u64,
    /// good / total; absent for an empty group.
    pub attainment: Option<f64>,
    /// Output tokens (o200k, `output_tokens.total`) of the good requests.
    pub good_output_tokens: u64,
    /// From the group's first request start to its last request end, in seconds.
    pub wall_s: Option<f64>,
    /// good_output_tokens / wall_s.
    pub good_tokens_per_s: Option<f64>,
    /// Per objective: requests that met it / missed it / could not be verified.
    pub objectives: BTreeMap<String, ObjectiveCounts>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ObjectiveCounts {
    pub met: u64,
    pub missed: u64,
    pub unverified: u64,
    pub not_applicable: u64,
}

/// One group's aggregates.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GroupSummary {
    /// (key, value) pairs, in `group_by` order; empty for the "all" group.
    pub key: Vec<(String, String)>,
    /// "route=/ model=gpt-4o", or "all".
    pub label: String,
    pub requests: u64,
    pub outcomes: BTreeMap<String, u64>,
    pub metrics: GroupMetrics,
    pub stalls: StallRate,
    pub goodput: Goodput,
    /// `ttft_answer_ms` per prompt cache state (`cold`, `warm`, `unknown`), when any request of
    /// the group knew its state: cold and warm prompts differ by an order of magnitude, so a group
    /// that mixes them is shown split as well.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub ttft_answer_by_prompt_cache: BTreeMap<String, Distribution>,
    /// The servers' own reports and the split against the wire, when any request had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerSummary>,
    /// Raw samples per metric name, only with `keep_samples` (for the HTML plots).
    #[serde(skip)]
    pub samples: BTreeMap<&'static str, Vec<f64>>,
}

/// Server-reported times of a group's successful requests (docs/metrics.md, "Black box and white
/// box").
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerSummary {
    /// Requests with a server report.
    pub reported: u64,
    pub queue_ms: Option<Distribution>,
    pub prefill_ms: Option<Distribution>,
    pub decode_ms: Option<Distribution>,
    /// Over consistent splits only.
    pub network_and_proxy_ms: Option<Distribution>,
    /// Splits where the server claimed more time than the wire saw (`server_exceeds_wire`).
    pub inconsistent: u64,
}

/// What the numbers were measured under (the reproducibility section).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ConditionsSummary {
    /// `conditions.tokentap_version` of the records, with counts.
    pub record_versions: BTreeMap<String, u64>,
    pub routes: BTreeMap<String, u64>,
    pub models: BTreeMap<String, u64>,
    /// "true", "false" or "unknown" → count.
    pub stream: BTreeMap<String, u64>,
    pub first_started_at: Option<String>,
    pub last_started_at: Option<String>,
    /// Prompt text bytes (`request.prompt_bytes`).
    pub prompt_bytes: Option<Distribution>,
    /// Prompt tokens (`conditions.prompt_tokens`, o200k).
    pub prompt_tokens: Option<Distribution>,
    /// Provider-reported cached prompt tokens, where reported.
    pub cached_prompt_tokens: Option<Distribution>,
    /// Output tokens (`analysis.metrics.output_tokens.total`, o200k).
    pub output_tokens: Option<Distribution>,
    /// Other requests in flight on the route at t0.
    pub concurrency_at_t0: Option<Distribution>,
    /// Upstream connection reused / new.
    pub connections_reused: u64,
    pub connections_new: u64,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The tokentap that computed the report.
    pub tokentap_version: String,
    pub generated_at: String,
    pub source: String,
    pub since: Option<String>,
    pub until: Option<String>,
    pub group_by: Vec<GroupKey>,
    pub include_warmup: bool,
    pub slo: SloConfig,
    /// Records given to the report (one per request id).
    pub records_total: u64,
    /// … of which inside the window.
    pub records_in_window: u64,
    /// When the oldest record read started (none read: none).
    pub oldest_record: Option<String>,
    /// The window starts before the oldest record read: the records of its beginning are not
    /// there (rotated away, or tokentap was not recording), so the report covers less than asked.
    pub window_before_oldest_record: bool,
    /// … of which left out as warm-up.
    pub warm_up_excluded: u64,
    /// Records aggregated (in the window, warm-up rule applied).
    pub records_used: u64,
    pub overall: GroupSummary,
    pub groups: Vec<GroupSummary>,
    pub conditions: ConditionsSummary,
    /// MCP operations per method and tool, when records of MCP exchanges are in the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<crate::mcp::McpSummary>,
    /// Realtime sessions' responses, when records of realtime sessions are in the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub realtime: Option<crate::realtime::RealtimeSummary>,
    /// WebRTC sessions' answers, when offers whose peer connection the browser probe measured are
    /// in the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webrtc: Option<crate::webrtc::WebrtcSummary>,
    /// Turn percentiles, when the store has turns (`turns.jsonl`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turns: Option<crate::turns::TurnSummary>,
}

fn rfc3339(unix_ns: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(unix_ns);
    humantime::format_rfc3339_millis(t).to_string()
}

fn distribution(samples: &[f64]) -> Option<Distribution> {
    Distribution::from_samples(samples)
}

/// Builds the report from records (any order).
pub fn build_report<'a>(records: impl IntoIterator<Item = &'a Record>, options: &ReportOptions) -> Report {
    let mut records_total = 0u64;
    let mut records_in_window = 0u64;
    let mut warm_up_excluded = 0u64;
    let mut used: Vec<&Record> = Vec::new();
    let mut oldest: Option<u64> = None;
    for r in records {
        records_total += 1;
        let t0 = r.timeline.t0_unix_ns;
        oldest = Some(oldest.map_or(t0, |o| o.min(t0)));
        if options.since_unix_ns.is_some_and(|s| t0 < s) || options.until_unix_ns.is_some_and(|u| t0 >= u) {
            continue;
        }
        records_in_window += 1;
        if r.conditions.warm_up && !options.include_warmup {
            warm_up_excluded += 1;
            continue;
        }
        used.push(r);
    }
    used.sort_by(|a, b| {
        a.timeline.t0_unix_ns.cmp(&b.timeline.t0_unix_ns).then_with(|| a.request_id.cmp(&b.request_id))
    });

    let mut groups: BTreeMap<Vec<(String, String)>, Vec<&Record>> = BTreeMap::new();
    if !options.group_by.is_empty() {
        for r in &used {
            let key = options.group_by.iter().map(|k| (k.name().to_string(), k.value_of(r))).collect();
            groups.entry(key).or_default().push(r);
        }
    }
    let groups = groups.into_iter().map(|(key, rs)| summarize(key, &rs, options)).collect();

    Report {
        tokentap_version: env!("CARGO_PKG_VERSION").to_string(),
        generated_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        source: options.source.clone(),
        since: options.since_unix_ns.map(rfc3339),
        until: options.until_unix_ns.map(rfc3339),
        group_by: options.group_by.clone(),
        include_warmup: options.include_warmup,
        slo: options.slo.clone(),
        records_total,
        records_in_window,
        oldest_record: oldest.map(rfc3339),
        window_before_oldest_record: options.since_unix_ns.is_some_and(|s| oldest.is_none_or(|o| s < o)),
        warm_up_excluded,
        records_used: used.len() as u64,
        overall: summarize(Vec::new(), &used, options),
        groups,
        conditions: conditions_summary(&used),
        mcp: crate::mcp::summarize_mcp(&used),
        realtime: crate::realtime::summarize_realtime(&used),
        webrtc: crate::webrtc::summarize_webrtc(&used),
        turns: None,
    }
}

/// Aggregates one group.
pub fn summarize(key: Vec<(String, String)>, records: &[&Record], options: &ReportOptions) -> GroupSummary {
    let label = if key.is_empty() {
        "all".to_string()
    } else {
        key.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    };
    let mut samples: BTreeMap<&'static str, Vec<f64>> = REPORT_METRICS.iter().map(|m| (*m, Vec::new())).collect();
    let mut outcomes = BTreeMap::new();
    let mut stalls = StallRate::default();
    let mut goodput = Goodput::default();
    let mut first_start: Option<u64> = None;
    let mut last_end: Option<u64> = None;
    let mut ttft_by_cache: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut any_cache_known = false;
    let mut server = ServerSamples::default();
    for r in records {
        *outcomes.entry(r.outcome.as_str().to_string()).or_insert(0u64) += 1;
        let t0 = r.timeline.t0_unix_ns;
        first_start = Some(first_start.map_or(t0, |f| f.min(t0)));
        let end = t0 + r.timeline.t_end_ns.unwrap_or(0);
        last_end = Some(last_end.map_or(end, |l| l.max(end)));

        let v = verdict(r, &options.slo);
        goodput.total += 1;
        for o in &v.objectives {
            let c = goodput.objectives.entry(o.objective.as_str().to_string()).or_default();
            match o.result {
                ObjectiveOutcome::Met => c.met += 1,
                ObjectiveOutcome::Missed => c.missed += 1,
                ObjectiveOutcome::Unverified => c.unverified += 1,
                ObjectiveOutcome::NotApplicable => c.not_applicable += 1,
            }
        }
        let analysis = r.analysis.as_ref();
        if v.good {
            goodput.good += 1;
            goodput.good_output_tokens +=
                analysis.and_then(|a| a.metrics.output_tokens.as_ref()).map_or(0, |t| t.total);
        }
        if r.outcome != Outcome::Ok {
            continue;
        }
        if let Some(a) = analysis {
            stalls.analysed += 1;
            if a.stalls.count > 0 {
                stalls.stalled += 1;
            }
            let m = &a.metrics;
            if let Some(v) = m.ttft_answer_ms {
                any_cache_known |= r.conditions.prompt_cache.is_some();
                ttft_by_cache.entry(prompt_cache_label(r).to_string()).or_default().push(v);
            }
            for (name, value) in [
                ("ttft_answer_ms", m.ttft_answer_ms),
                ("tpot_ms", m.tpot_ms),
                ("output_tps", m.output_tps),
                ("e2e_ms", m.e2e_ms),
            ] {
                if let Some(v) = value {
                    samples.get_mut(name).expect("metric list").push(v);
                }
            }
        }
        if let Some(v) = first_paint_ms(r) {
            samples.get_mut("time_to_first_paint_ms").expect("metric list").push(v);
        }
        server.add(r);
    }
    stalls.rate = (stalls.analysed > 0).then(|| stalls.stalled as f64 / stalls.analysed as f64);
    goodput.attainment = (goodput.total > 0).then(|| goodput.good as f64 / goodput.total as f64);
    if let (Some(first), Some(last)) = (first_start, last_end) {
        if last > first {
            let wall_s = (last - first) as f64 / 1e9;
            goodput.wall_s = Some(wall_s);
            goodput.good_tokens_per_s = Some(goodput.good_output_tokens as f64 / wall_s);
        }
    }
    let metrics = GroupMetrics {
        ttft_answer_ms: distribution(&samples["ttft_answer_ms"]),
        time_to_first_paint_ms: distribution(&samples["time_to_first_paint_ms"]),
        tpot_ms: distribution(&samples["tpot_ms"]),
        output_tps: distribution(&samples["output_tps"]),
        e2e_ms: distribution(&samples["e2e_ms"]),
    };
    GroupSummary {
        key,
        label,
        requests: records.len() as u64,
        outcomes,
        metrics,
        stalls,
        goodput,
        ttft_answer_by_prompt_cache: if any_cache_known {
            ttft_by_cache.iter().filter_map(|(k, v)| Some((k.clone(), distribution(v)?))).collect()
        } else {
            BTreeMap::new()
        },
        server: server.summary(),
        samples: if options.keep_samples { samples } else { BTreeMap::new() },
    }
}

#[derive(Default)]
struct ServerSamples {
    reported: u64,
    queue: Vec<f64>,
    prefill: Vec<f64>,
    decode: Vec<f64>,
    network_and_proxy: Vec<f64>,
    inconsistent: u64,
}

impl ServerSamples {
    fn add(&mut self, r: &Record) {
        let Some(s) = &r.server else { return };
        self.reported += 1;
        self.queue.extend(s.queue_ms);
        self.prefill.extend(s.prefill_ms);
        self.decode.extend(s.decode_ms);
        match &r.server_split {
            Some(split) if split.check == ServerCheck::Consistent => {
                self.network_and_proxy.push(split.network_and_proxy_ms)
            }
            Some(_) => self.inconsistent += 1,
            None => {}
        }
    }

    fn summary(&self) -> Option<ServerSummary> {
        (self.reported > 0).then(|| ServerSummary {
            reported: self.reported,
            queue_ms: distribution(&self.queue),
            prefill_ms: distribution(&self.prefill),
            decode_ms: distribution(&self.decode),
            network_and_proxy_ms: distribution(&self.network_and_proxy),
            inconsistent: self.inconsistent,
        })
    }
}

fn conditions_summary(records: &[&Record]) -> ConditionsSummary {
    let mut c = ConditionsSummary::default();
    let (mut prompt_bytes, mut prompt_tokens, mut cached, mut output, mut concurrency) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in records {
        let k = &r.conditions;
        *c.record_versions.entry(k.tokentap_version.clone()).or_default() += 1;
        *c.routes.entry(r.route.clone()).or_default() += 1;
        *c.models.entry(k.model.clone().unwrap_or_else(|| "(none)".into())).or_default() += 1;
        let stream = k.stream.map_or("unknown".to_string(), |s| s.to_string());
        *c.stream.entry(stream).or_default() += 1;
        if let Some(v) = r.request.prompt_bytes {
            prompt_bytes.push(v as f64);
        }
        if let Some(v) = k.prompt_tokens {
            prompt_tokens.push(v as f64);
        }
        if let Some(v) = k.cached_prompt_tokens {
            cached.push(v as f64);
        }
        if let Some(t) = r.analysis.as_ref().and_then(|a| a.metrics.output_tokens.as_ref()) {
            output.push(t.total as f64);
        }
        concurrency.push(k.concurrency_at_t0 as f64);
        match k.upstream_connection_reused {
            Some(true) => c.connections_reused += 1,
            Some(false) => c.connections_new += 1,
            None => {}
        }
    }
    c.first_started_at = records.first().map(|r| r.started_at.clone());
    c.last_started_at = records.last().map(|r| r.started_at.clone());
    c.prompt_bytes = distribution(&prompt_bytes);
    c.prompt_tokens = distribution(&prompt_tokens);
    c.cached_prompt_tokens = distribution(&cached);
    c.output_tokens = distribution(&output);
    c.concurrency_at_t0 = distribution(&concurrency);
    c
}

/// Parses `--since` / `--until` / `window=`: a duration before `now` ("15m", "2h 30m", "1d") or an
/// RFC 3339 time ("2026-01-02T03:04:05Z"). Returns Unix nanoseconds.
pub fn parse_time(text: &str, now: std::time::SystemTime) -> Result<u64, String> {
    let text = text.trim();
    let at = match humantime::parse_duration(text) {
        Ok(d) => now.checked_sub(d).ok_or_else(|| format!("{text:?} reaches before 1970"))?,
        Err(_) => humantime::parse_rfc3339_weak(text)
            .map_err(|_| format!("{text:?} is neither a duration (15m, 2h, 1d) nor an RFC 3339 time"))?,
    };
    let ns = at.duration_since(std::time::UNIX_EPOCH).map_err(|_| format!("{text:?} is before 1970"))?.as_nanos();
    u64::try_from(ns).map_err(|_| format!("{text:?} is too far in the future"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_buckets_are_powers_of_two() {
        let labels: Vec<String> = [0, 1, 2, 3, 4, 7, 8, 100].iter().map(|&n| concurrency_bucket(n)).collect();
        assert_eq!(labels, ["0", "1", "2-3", "2-3", "4-7", "4-7", "8-15", "64-127"]);
    }

    #[test]
    fn group_keys_parse() {
        assert_eq!(GroupKey::parse_list("route, model,route").unwrap(), vec![GroupKey::Route, GroupKey::Model]);
        assert!(GroupKey::parse_list("provider").unwrap_err().contains("provider"));
    }

    #[test]
    fn times_parse_as_durations_or_rfc3339() {
        let now = std::time::UNIX_EPOCH + std::time::Duration::from_secs(10_000);
        assert_eq!(parse_time("15m", now).unwrap(), (10_000 - 900) * 1_000_000_000);
        assert_eq!(parse_time("1970-01-01T00:00:10Z", now).unwrap(), 10 * 1_000_000_000);
        assert!(parse_time("yesterday", now).is_err());
    }
}
