//! The report as markdown tables (what `tokentap report` prints).

use std::fmt::Write;

use tokentap_analysis::Distribution;

use crate::summary::REPORT_METRICS;
use crate::summary::{GroupSummary, Report};
use tokentap_record::SloConfig;

/// Formats a value for a table: three significant decimals at most, trailing zeros dropped.
pub fn number(v: f64) -> String {
    let text = if v.abs() >= 100.0 { format!("{v:.1}") } else { format!("{v:.3}") };
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.').to_string() } else { text };
    if text == "-0" {
        "0".into()
    } else {
        text
    }
}

fn percent(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{:.1}%", v * 100.0))
}

/// "ttft_answer ≤ 500 ms, e2e ≤ 30000 ms", or "none configured".
pub fn slo_text(slo: &SloConfig) -> String {
    let parts: Vec<String> = [
        ("ttft_answer", slo.ttft_answer_ms),
        ("tpot", slo.tpot_ms),
        ("e2e", slo.e2e_ms),
        ("first_paint", slo.first_paint_ms),
    ]
    .iter()
    .filter_map(|(name, v)| v.map(|v| format!("{name} ≤ {} ms", number(v))))
    .collect();
    if parts.is_empty() {
        "none configured (every successful request is good)".into()
    } else {
        parts.join(", ")
    }
}

fn distribution_cells(d: Option<&Distribution>) -> String {
    match d {
        Some(d) => format!(
            "{} | {} | {} | {} | {} | {}",
            d.count,
            number(d.p50),
            number(d.p90),
            number(d.p95),
            number(d.p99),
            number(d.max)
        ),
        None => "0 | – | – | – | – | –".into(),
    }
}

fn table_groups(report: &Report) -> Vec<&GroupSummary> {
    if report.groups.is_empty() {
        vec![&report.overall]
    } else {
        report.groups.iter().collect()
    }
}

/// Renders the whole report.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "# tokentap report\n");
    let _ = writeln!(w, "- source: {}", report.source);
    let _ = writeln!(
        w,
        "- window: {} → {}",
        report.since.as_deref().unwrap_or("first record"),
        report.until.as_deref().unwrap_or("last record")
    );
    let _ = writeln!(
        w,
        "- records: {} used of {} in the window ({} read); warm-up {}",
        report.records_used,
        report.records_in_window,
        report.records_total,
        if report.include_warmup {
            "included".to_string()
        } else {
            format!("excluded ({} left out)", report.warm_up_excluded)
        }
    );
    let by: Vec<&str> = report.group_by.iter().map(|k| k.name()).collect();
    let _ = writeln!(w, "- grouped by: {}", if by.is_empty() { "nothing".to_string() } else { by.join(", ") });
    let _ = writeln!(w, "- SLOs: {}", slo_text(&report.slo));
    let _ = writeln!(
        w,
        "- percentiles: linear interpolation between closest ranks (numpy default) over successful requests; n = samples\n"
    );

    let _ = writeln!(w, "## Latency and throughput\n");
    let _ = writeln!(w, "| group | metric | n | p50 | p90 | p95 | p99 | max |");
    let _ = writeln!(w, "|---|---|---:|---:|---:|---:|---:|---:|");
    for g in table_groups(report) {
        for metric in REPORT_METRICS {
            let _ = writeln!(w, "| {} | {} | {} |", g.label, metric, distribution_cells(g.metrics.get(metric)));
        }
    }

    let _ = writeln!(w, "\n## Goodput and stalls\n");
    let _ = writeln!(
        w,
        "| group | requests | ok | good | attainment | good tokens/s | wall s | stalled / analysed | stall rate |"
    );
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut rows = table_groups(report);
    if !report.groups.is_empty() {
        rows.push(&report.overall);
    }
    for g in rows {
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} | {} / {} | {} |",
            g.label,
            g.requests,
            g.outcomes.get("ok").copied().unwrap_or(0),
            g.goodput.good,
            percent(g.goodput.attainment),
            g.goodput.good_tokens_per_s.map_or("–".into(), number),
            g.goodput.wall_s.map_or("–".into(), number),
            g.stalls.stalled,
            g.stalls.analysed,
            percent(g.stalls.rate),
        );
    }
    if !report.overall.goodput.objectives.is_empty() {
        let _ = writeln!(w, "\n| objective | met | missed | unverified | not applicable |");
        let _ = writeln!(w, "|---|---:|---:|---:|---:|");
        for (name, c) in &report.overall.goodput.objectives {
            let _ = writeln!(w, "| {name} | {} | {} | {} | {} |", c.met, c.missed, c.unverified, c.not_applicable);
        }
    }

    let outcomes: Vec<String> = report.overall.outcomes.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(w, "\nOutcomes: {}", if outcomes.is_empty() { "none".into() } else { outcomes.join(", ") });

    let c = &report.conditions;
    let _ = writeln!(w, "\n## Conditions (reproducibility)\n");
    let _ = writeln!(w, "- report by tokentap {}", report.tokentap_version);
    let counts = |m: &std::collections::BTreeMap<String, u64>| {
        m.iter().map(|(k, v)| format!("{k} ({v})")).collect::<Vec<_>>().join(", ")
    };
    let _ = writeln!(w, "- records written by tokentap: {}", counts(&c.record_versions));
    let _ = writeln!(w, "- routes: {}", counts(&c.routes));
    let _ = writeln!(w, "- models: {}", counts(&c.models));
    let _ = writeln!(w, "- stream: {}", counts(&c.stream));
    let _ = writeln!(
        w,
        "- first request {}, last request {}",
        c.first_started_at.as_deref().unwrap_or("–"),
        c.last_started_at.as_deref().unwrap_or("–")
    );
    let _ = writeln!(w, "- upstream connections: {} reused, {} new\n", c.connections_reused, c.connections_new);
    let _ = writeln!(w, "| distribution | n | p50 | p90 | p95 | p99 | max |");
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|");
    for (name, d) in [
        ("prompt bytes", &c.prompt_bytes),
        ("prompt tokens (o200k)", &c.prompt_tokens),
        ("cached prompt tokens", &c.cached_prompt_tokens),
        ("output tokens (o200k)", &c.output_tokens),
        ("concurrency at t0", &c.concurrency_at_t0),
    ] {
        let _ = writeln!(w, "| {name} | {} |", distribution_cells(d.as_ref()));
    }
    out
}
