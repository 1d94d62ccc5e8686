//! The report as one self-contained HTML file: the same tables as the markdown, and for every
//! metric an empirical CDF plot with one line per group, drawn as inline SVG (no scripts, no
//! external files).

use std::fmt::Write;

use crate::markdown::{number, slo_text};
use crate::summary::REPORT_METRICS;
use crate::summary::{GroupSummary, Report};

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const COLORS: [&str; 8] = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#4b5563"];

/// An empirical CDF of each group's samples of `metric`, as an SVG element.
fn ecdf_svg(metric: &str, groups: &[&GroupSummary]) -> Option<String> {
    let series: Vec<(&str, Vec<f64>)> = groups
        .iter()
        .filter_map(|g| {
            let mut s = g.samples.get(metric)?.clone();
            if s.is_empty() {
                return None;
            }
            s.sort_by(f64::total_cmp);
            Some((g.label.as_str(), s))
        })
        .collect();
    if series.is_empty() {
        return None;
    }
    let (w, h, left, bottom, top, right) = (640.0, 260.0, 56.0, 36.0, 12.0, 16.0);
    let max = series.iter().filter_map(|(_, s)| s.last().copied()).fold(0.0f64, f64::max);
    let min = series.iter().filter_map(|(_, s)| s.first().copied()).fold(f64::INFINITY, f64::min).min(0.0);
    let span = if max > min { max - min } else { 1.0 };
    let x = |v: f64| left + (v - min) / span * (w - left - right);
    let y = |p: f64| top + (1.0 - p) * (h - top - bottom);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="ecdf" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="{metric} CDF">"#
    );
    let _ = write!(
        svg,
        r##"<rect x="{left}" y="{top}" width="{}" height="{}" fill="none" stroke="#ccc"/>"##,
        w - left - right,
        h - top - bottom
    );
    for p in [0.5, 0.9, 0.99] {
        let (x2, yp, tx, ty, label) = (w - right, y(p), left - 4.0, y(p) + 3.0, (p * 100.0) as u32);
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{x2}" y1="{yp}" y2="{yp}" stroke="#eee"/><text x="{tx}" y="{ty}" font-size="10" text-anchor="end">p{label}</text>"##
        );
    }
    for i in 0..=4 {
        let v = min + span * f64::from(i) / 4.0;
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" font-size="10" text-anchor="middle">{}</text>"#,
            x(v),
            h - bottom + 14.0,
            number(v)
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{}" y="{}" font-size="11" text-anchor="middle">{metric}</text>"#,
        left + (w - left - right) / 2.0,
        h - 4.0
    );
    for (i, (label, s)) in series.iter().enumerate() {
        let n = s.len() as f64;
        let mut d = format!("M{:.1},{:.1}", x(s[0]), y(0.0));
        for (k, v) in s.iter().enumerate() {
            let _ = write!(d, " L{:.1},{:.1} L{:.1},{:.1}", x(*v), y(k as f64 / n), x(*v), y((k + 1) as f64 / n));
        }
        let color = COLORS[i % COLORS.len()];
        let _ = write!(
            svg,
            r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="1.5"><title>{}</title></path>"#,
            escape(label)
        );
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" font-size="10" fill="{color}">{}</text>"#,
            left + 6.0,
            top + 12.0 + 12.0 * i as f64,
            escape(label)
        );
    }
    svg.push_str("</svg>");
    Some(svg)
}

/// Renders the report as a complete HTML document. The report must have been built with
/// `keep_samples` for the plots to appear.
pub fn render(report: &Report) -> String {
    let groups: Vec<&GroupSummary> =
        if report.groups.is_empty() { vec![&report.overall] } else { report.groups.iter().collect() };
    let mut b = String::new();
    let _ = write!(
        b,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>tokentap report</title><style>
body{{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#111}}
table{{border-collapse:collapse;margin:8px 0 20px}}td,th{{border:1px solid #ddd;padding:3px 8px}}td.n{{text-align:right;font-variant-numeric:tabular-nums}}
th{{background:#f5f5f5}}h1{{font-size:22px}}h2{{font-size:17px;margin-top:28px}}.plots{{display:flex;flex-wrap:wrap;gap:8px}}
</style></head><body><h1>tokentap report</h1>"#
    );
    let _ = write!(
        b,
        "<ul><li>source: {}</li><li>window: {} → {}</li>{}<li>records: {} used of {} in the window ({} read); warm-up {}</li><li>SLOs: {}</li><li>percentiles: linear interpolation between closest ranks (numpy default) over successful requests</li><li>generated {} by tokentap {}</li></ul>",
        escape(&report.source),
        escape(report.since.as_deref().unwrap_or("first record")),
        escape(report.until.as_deref().unwrap_or("last record")),
        if report.window_before_oldest_record {
            format!("<li>note: {}</li>", escape(&crate::markdown::window_note(report)))
        } else {
            String::new()
        },
        report.records_used,
        report.records_in_window,
        report.records_total,
        if report.include_warmup { "included".to_string() } else { format!("excluded ({} left out)", report.warm_up_excluded) },
        escape(&slo_text(&report.slo)),
        escape(&report.generated_at),
        escape(&report.tokentap_version),
    );
    b.push_str("<h2>Latency and throughput</h2><table><tr><th>group</th><th>metric</th><th>n</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>max</th></tr>");
    for g in &groups {
        for metric in REPORT_METRICS {
            let _ = write!(b, "<tr><td>{}</td><td>{metric}</td>", escape(&g.label));
            match g.metrics.get(metric) {
                Some(d) => {
                    let _ = write!(b, r#"<td class="n">{}</td>"#, d.count);
                    for v in [d.p50, d.p90, d.p95, d.p99, d.max] {
                        let _ = write!(b, r#"<td class="n">{}</td>"#, number(v));
                    }
                }
                None => b.push_str(r#"<td class="n">0</td><td colspan="5">no samples</td>"#),
            }
            b.push_str("</tr>");
        }
    }
    b.push_str("</table><h2>Goodput and stalls</h2><table><tr><th>group</th><th>requests</th><th>good</th><th>attainment</th><th>good tokens/s</th><th>stalled / analysed</th></tr>");
    let mut rows = groups.clone();
    if !report.groups.is_empty() {
        rows.push(&report.overall);
    }
    for g in rows {
        let _ = write!(
            b,
            r#"<tr><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{} / {}</td></tr>"#,
            escape(&g.label),
            g.requests,
            g.goodput.good,
            g.goodput.attainment.map_or("–".into(), |a| format!("{:.1}%", a * 100.0)),
            g.goodput.good_tokens_per_s.map_or("–".into(), number),
            g.stalls.stalled,
            g.stalls.analysed
        );
    }
    b.push_str("</table><h2>Distributions (empirical CDF, one line per group)</h2><div class=\"plots\">");
    for metric in REPORT_METRICS {
        if let Some(svg) = ecdf_svg(metric, &groups) {
            b.push_str(&svg);
        }
    }
    b.push_str("</div><h2>Conditions (reproducibility)</h2>");
    let markdown = crate::markdown::render(report);
    let conditions = markdown.split("## Conditions (reproducibility)").nth(1).unwrap_or("");
    let _ = write!(b, "<pre>{}</pre>", escape(conditions.trim()));
    let json = serde_json::to_string_pretty(report).unwrap_or_default();
    let _ =
        writeln!(b, "<details><summary>report as JSON</summary><pre>{}</pre></details></body></html>", escape(&json));
    b
}
