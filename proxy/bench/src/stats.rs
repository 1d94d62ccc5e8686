//! A cell's statistics from its per-request records (docs/metrics.md, Aggregates and
//! docs/bench.md): numpy-linear percentiles over the raw per-request values of the successful
//! requests, throughput over the cell's wall time, goodput under the SLO.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tokentap_analysis::Distribution;

use crate::config::{Slo, SloMetric};
use crate::record::{FailureKind, RequestRecord};

/// The statistics of one cell (or of the warm-up).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellStats {
    /// Requests sent (successful and failed).
    pub requests: u64,
    pub ok: u64,
    pub failures: u64,
    /// Failures by kind.
    pub failure_kinds: BTreeMap<FailureKind, u64>,
    /// From the first request's t0 to the last request's end (seconds).
    pub duration_s: f64,
    pub ttft_answer_ms: Option<Distribution>,
    pub ttft_reasoning_ms: Option<Distribution>,
    /// Every gap of every successful request, pooled.
    pub itl_ms: Option<Distribution>,
    pub tpot_ms: Option<Distribution>,
    pub e2e_ms: Option<Distribution>,
    /// Output tokens per second of each request (per user).
    pub output_tps: Option<Distribution>,
    /// o200k output tokens per request.
    pub output_tokens: Option<Distribution>,
    /// All successful requests' output tokens / duration_s.
    pub total_output_tps: Option<f64>,
    /// Successful requests / duration_s.
    pub request_throughput: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput: Option<Goodput>,
    /// Open loop: requests that started later than scheduled by more than [`LATE_MS`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub late_sends: Option<u64>,
    /// Open loop: how late requests started (ms after their scheduled time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_lateness_ms: Option<Distribution>,
}

/// Goodput under the run's SLO.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Goodput {
    /// Successful requests that met every objective (an undefined value does not meet one).
    pub good: u64,
    /// good / requests (failures count as not good).
    pub attainment: f64,
    /// good / duration_s.
    pub good_requests_per_s: Option<f64>,
    /// The good requests' output tokens / duration_s.
    pub good_output_tps: Option<f64>,
}

/// A send counts as late past this (timer and scheduling noise stays below it).
pub const LATE_MS: f64 = 10.0;

/// Whether a successful request met every objective. An undefined value cannot be shown to meet
/// its objective, so the request is not good, except `tpot` of a response with fewer than two
/// content events, which has no time per token to judge (the rule of `tokentap report`).
pub fn is_good(record: &RequestRecord, slo: &Slo) -> bool {
    record.ok
        && slo.objectives_ms.iter().all(|(metric, limit)| match record.slo_value_ms(*metric) {
            Some(v) => v <= *limit,
            None => *metric == SloMetric::Tpot && record.content_events < 2,
        })
}

/// The statistics of `records` (one cell's, or the warm-up's).
pub fn cell_stats(records: &[&RequestRecord], slo: &Slo) -> CellStats {
    let ok: Vec<&RequestRecord> = records.iter().copied().filter(|r| r.ok).collect();
    let mut failure_kinds = BTreeMap::new();
    for r in records {
        if let Some(f) = &r.failure {
            *failure_kinds.entry(f.kind).or_insert(0) += 1;
        }
    }
    let start = records.iter().map(|r| r.start_ms).fold(f64::INFINITY, f64::min);
    let end = records.iter().map(|r| r.end_ms).fold(f64::NEG_INFINITY, f64::max);
    let duration_s = if records.is_empty() { 0.0 } else { (end - start).max(0.0) / 1000.0 };
    let per_second = |x: f64| (duration_s > 0.0).then(|| x / duration_s);
    let dist = |f: &dyn Fn(&RequestRecord) -> Option<f64>| {
        Distribution::from_samples(&ok.iter().filter_map(|r| f(r)).collect::<Vec<f64>>())
    };
    let itl: Vec<f64> = ok.iter().flat_map(|r| r.itl_ms.iter().copied()).collect();
    let tokens: u64 = ok.iter().filter_map(|r| r.output_tokens).sum();
    let goodput = (!slo.is_empty()).then(|| {
        let good: Vec<&&RequestRecord> = ok.iter().filter(|r| is_good(r, slo)).collect();
        let good_tokens: u64 = good.iter().filter_map(|r| r.output_tokens).sum();
        Goodput {
            good: good.len() as u64,
            attainment: if records.is_empty() { 0.0 } else { good.len() as f64 / records.len() as f64 },
            good_requests_per_s: per_second(good.len() as f64),
            good_output_tps: per_second(good_tokens as f64),
        }
    });
    let lateness: Vec<f64> = records.iter().filter_map(|r| r.scheduled_ms.map(|s| (r.start_ms - s).max(0.0))).collect();
    let open_loop = !lateness.is_empty();
    CellStats {
        requests: records.len() as u64,
        ok: ok.len() as u64,
        failures: (records.len() - ok.len()) as u64,
        failure_kinds,
        duration_s,
        ttft_answer_ms: dist(&|r| r.ttft_answer_ms),
        ttft_reasoning_ms: dist(&|r| r.ttft_reasoning_ms),
        itl_ms: Distribution::from_samples(&itl),
        tpot_ms: dist(&|r| r.tpot_ms),
        e2e_ms: dist(&|r| r.e2e_ms),
        output_tps: dist(&|r| r.output_tps),
        output_tokens: dist(&|r| r.output_tokens.map(|t| t as f64)),
        total_output_tps: if ok.is_empty() { None } else { per_second(tokens as f64) },
        request_throughput: per_second(ok.len() as f64),
        goodput,
        late_sends: open_loop.then(|| lateness.iter().filter(|&&l| l > LATE_MS).count() as u64),
        send_lateness_ms: if open_loop { Distribution::from_samples(&lateness) } else { None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Failure;

    fn ok_record(start: f64, end: f64, ttft: f64, tpot: f64, tokens: u64) -> RequestRecord {
        RequestRecord {
            cell: Some(0),
            index: 0,
            warmup: false,
            start_ms: start,
            scheduled_ms: None,
            in_flight_at_start: 1,
            prompt_tokens: 64,
            max_tokens: 64,
            ok: true,
            failure: None,
            status: Some(200),
            tokentap_request_id: None,
            ttfb_ms: Some(1.0),
            time_to_first_chunk_ms: Some(ttft),
            ttft_answer_ms: Some(ttft),
            ttft_reasoning_ms: None,
            to_last_content_ms: Some(end - start),
            e2e_ms: Some(end - start),
            output_tokens: Some(tokens),
            reasoning_tokens: Some(0),
            first_content_tokens: Some(1),
            output_tps: Some(1000.0 / tpot),
            tpot_ms: Some(tpot),
            itl_ms: vec![tpot, tpot],
            content_events: 3,
            usage_input_tokens: None,
            usage_output_tokens: None,
            usage_cached_tokens: None,
            finish_reason: None,
            end_ms: end,
        }
    }

    #[test]
    fn percentiles_throughput_and_goodput() {
        let mut records = vec![
            ok_record(0.0, 1000.0, 100.0, 10.0, 50),
            ok_record(0.0, 1500.0, 200.0, 20.0, 50),
            ok_record(500.0, 2000.0, 300.0, 30.0, 50),
            ok_record(500.0, 1800.0, 400.0, 60.0, 50),
        ];
        let mut failed = ok_record(100.0, 150.0, 0.0, 1.0, 0);
        failed.ok = false;
        failed.failure = Some(Failure { kind: FailureKind::HttpStatus, detail: "HTTP 500".into() });
        records.push(failed);
        let refs: Vec<&RequestRecord> = records.iter().collect();
        let slo = Slo { objectives_ms: vec![(SloMetric::TtftAnswer, 250.0), (SloMetric::Tpot, 50.0)] };
        let s = cell_stats(&refs, &slo);
        assert_eq!((s.requests, s.ok, s.failures), (5, 4, 1));
        assert_eq!(s.failure_kinds.get(&FailureKind::HttpStatus), Some(&1));
        assert_eq!(s.duration_s, 2.0);
        // numpy.percentile([100, 200, 300, 400], [50, 90, 95, 99]) = 250, 370, 385, 397
        let ttft = s.ttft_answer_ms.unwrap();
        assert_eq!((ttft.count, ttft.p50, ttft.max), (4, 250.0, 400.0));
        assert!((ttft.p90 - 370.0).abs() < 1e-9 && (ttft.p95 - 385.0).abs() < 1e-9 && (ttft.p99 - 397.0).abs() < 1e-9);
        assert_eq!(s.itl_ms.unwrap().count, 8);
        assert_eq!(s.total_output_tps, Some(100.0));
        assert_eq!(s.request_throughput, Some(2.0));
        // Good: the first two (ttft ≤ 250 and tpot ≤ 50); the failure counts in the denominator.
        let g = s.goodput.unwrap();
        assert_eq!(g.good, 2);
        assert_eq!(g.attainment, 2.0 / 5.0);
        assert_eq!(g.good_requests_per_s, Some(1.0));
        assert_eq!(g.good_output_tps, Some(50.0));
        assert!(s.late_sends.is_none());
    }

    #[test]
    fn an_undefined_value_does_not_meet_an_objective() {
        let mut r = ok_record(0.0, 10.0, 5.0, 1.0, 1);
        r.tpot_ms = None;
        let slo = Slo { objectives_ms: vec![(SloMetric::Tpot, 50.0)] };
        assert!(!is_good(&r, &slo));
        assert!(is_good(&r, &Slo::default()));
        // One content event: no time per token to judge, so tpot does not count against it.
        r.content_events = 1;
        assert!(is_good(&r, &slo));
        r.ttft_answer_ms = None;
        assert!(!is_good(&r, &Slo { objectives_ms: vec![(SloMetric::TtftAnswer, 50.0)] }));
    }

    #[test]
    fn late_sends_are_counted_in_open_loop() {
        let mut a = ok_record(0.0, 10.0, 5.0, 1.0, 1);
        a.scheduled_ms = Some(0.0);
        let mut b = ok_record(125.0, 200.0, 5.0, 1.0, 1);
        b.scheduled_ms = Some(100.0);
        let s = cell_stats(&[&a, &b], &Slo::default());
        assert_eq!(s.late_sends, Some(1));
        assert_eq!(s.send_lateness_ms.unwrap().max, 25.0);
    }
}
