//! The report as one self-contained HTML file: every section of the markdown report (headings,
//! lists and tables, converted from the markdown itself so the two cannot drift apart), and for
//! every metric an empirical CDF plot with one line per group, drawn as inline SVG (no scripts, no
//! external files).

use std::fmt::Write;

use crate::markdown::number;
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
    // The axis covers the data (a little either side), not 0 → max: a tight distribution far
    // from 0 would otherwise be a vertical line.
    let max = series.iter().filter_map(|(_, s)| s.last().copied()).fold(f64::NEG_INFINITY, f64::max);
    let min = series.iter().filter_map(|(_, s)| s.first().copied()).fold(f64::INFINITY, f64::min);
    let pad = if max > min { (max - min) * 0.05 } else { min.abs().max(1.0) * 0.05 };
    let (min, max) = (if min >= 0.0 { (min - pad).max(0.0) } else { min - pad }, max + pad);
    let span = max - min;
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

/// Renders the report as a complete HTML document: every section of the markdown report, as
/// headings, lists and tables, with the distribution plots after the latency tables. The report
/// must have been built with `keep_samples` for the plots to appear.
pub fn render(report: &Report) -> String {
    let groups: Vec<&GroupSummary> =
        if report.groups.is_empty() { vec![&report.overall] } else { report.groups.iter().collect() };
    let mut b = String::new();
    b.push_str(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>tokentap report</title><style>
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;padding:0 16px;color:#111}
table{border-collapse:collapse;margin:8px 0 20px;max-width:100%}td,th{border:1px solid #ddd;padding:3px 8px;overflow-wrap:anywhere}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f5f5f5}h1{font-size:22px}h2{font-size:17px;margin-top:28px}h3{font-size:15px}
code{background:#f3f3f3;padding:0 3px}.plots{display:flex;flex-wrap:wrap;gap:8px}svg{max-width:100%;height:auto}
pre{white-space:pre-wrap;overflow-wrap:anywhere}
</style></head><body>"#,
    );
    let mut plots = String::from("<h3>Distributions (empirical CDF, one line per group)</h3><div class=\"plots\">");
    let mut any_plot = false;
    for metric in REPORT_METRICS {
        if let Some(svg) = ecdf_svg(metric, &groups) {
            plots.push_str(&svg);
            any_plot = true;
        }
    }
    plots.push_str("</div>");
    let markdown = crate::markdown::render(report);
    let mut body = markdown_to_html(&markdown);
    if any_plot {
        // After the latency section's first table, before the next heading.
        let at = body
            .find("<h2>Latency and throughput</h2>")
            .and_then(|start| body[start..].find("</table>").map(|end| start + end + "</table>".len()));
        match at {
            Some(at) => body.insert_str(at, &plots),
            None => body.push_str(&plots),
        }
    }
    b.push_str(&body);
    let _ =
        write!(b, "<p>generated {} by tokentap {}</p>", escape(&report.generated_at), escape(&report.tokentap_version));
    let json = serde_json::to_string_pretty(report).unwrap_or_default();
    let _ =
        writeln!(b, "<details><summary>report as JSON</summary><pre>{}</pre></details></body></html>", escape(&json));
    b
}

/// Inline markdown of the report's own writing: backslash escapes, `code` and **bold**; every
/// other character is text (HTML-escaped).
fn inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let (mut code, mut bold) = (false, false);
    let push = |out: &mut String, c: char| match c {
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        '"' => out.push_str("&quot;"),
        c => out.push(c),
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    push(&mut out, next);
                }
            }
            '`' => {
                out.push_str(if code { "</code>" } else { "<code>" });
                code = !code;
            }
            '*' if !code && chars.peek() == Some(&'*') => {
                chars.next();
                out.push_str(if bold { "</strong>" } else { "<strong>" });
                bold = !bold;
            }
            c => push(&mut out, c),
        }
    }
    if code {
        out.push_str("</code>");
    }
    if bold {
        out.push_str("</strong>");
    }
    out
}

/// The cells of a table row: split on `|` not escaped by a backslash, the outer ones dropped.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').filter(|s| !s.ends_with('\\')).unwrap_or(inner);
    let mut out = vec![String::new()];
    let mut escaped = false;
    for c in inner.chars() {
        if c == '|' && !escaped {
            out.push(String::new());
            continue;
        }
        escaped = c == '\\' && !escaped;
        if let Some(last) = out.last_mut() {
            last.push(c);
        }
    }
    out.into_iter().map(|c| c.trim().to_owned()).collect()
}

/// The report's markdown (headings, lists, tables and paragraphs, as `markdown::render` writes
/// them) as HTML. Right-aligned columns (`---:`) get `class="n"`.
pub fn markdown_to_html(markdown: &str) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = markdown.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.trim().is_empty() {
            i += 1;
            continue;
        }
        if let Some(level) = (1..=4).rev().find(|&n| line.starts_with(&format!("{} ", "#".repeat(n)))) {
            let _ = write!(out, "<h{level}>{}</h{level}>", inline(line[level + 1..].trim()));
            i += 1;
        } else if line.starts_with("- ") {
            out.push_str("<ul>");
            while i < lines.len() && lines[i].starts_with("- ") {
                let _ = write!(out, "<li>{}</li>", inline(&lines[i][2..]));
                i += 1;
            }
            out.push_str("</ul>");
        } else if line.starts_with('|') {
            let header = cells(line);
            let numeric: Vec<bool> = lines
                .get(i + 1)
                .filter(|l| l.starts_with("|-") || l.starts_with("|:"))
                .map(|l| cells(l).iter().map(|c| c.ends_with(':')).collect())
                .unwrap_or_default();
            let class = |k: usize| if numeric.get(k).copied().unwrap_or(false) { r#" class="n""# } else { "" };
            out.push_str("<table><thead><tr>");
            for (k, h) in header.iter().enumerate() {
                let _ = write!(out, "<th{}>{}</th>", class(k), inline(h));
            }
            out.push_str("</tr></thead><tbody>");
            i += if numeric.is_empty() { 1 } else { 2 };
            while i < lines.len() && lines[i].starts_with('|') {
                out.push_str("<tr>");
                for (k, c) in cells(lines[i]).iter().enumerate() {
                    let _ = write!(out, "<td{}>{}</td>", class(k), inline(c));
                }
                out.push_str("</tr>");
                i += 1;
            }
            out.push_str("</tbody></table>");
        } else {
            let mut paragraph = Vec::new();
            while i < lines.len()
                && !lines[i].trim().is_empty()
                && !lines[i].starts_with('#')
                && !lines[i].starts_with("- ")
                && !lines[i].starts_with('|')
            {
                paragraph.push(inline(lines[i].trim()));
                i += 1;
            }
            let _ = write!(out, "<p>{}</p>", paragraph.join(" "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::{build_report, ReportOptions};

    #[test]
    fn every_markdown_section_is_an_html_section_and_no_markdown_is_left() {
        let mut records: Vec<_> = (0..4).map(|_| tokentap_record::fixtures::stream_record(5)).collect();
        records[1].conditions.model = Some("a|b <i>".into());
        let options = ReportOptions {
            include_warmup: true,
            keep_samples: true,
            group_by: vec![crate::summary::GroupKey::Model],
            ..ReportOptions::default()
        };
        let report = build_report(&records, &options);
        let markdown = crate::markdown::render(&report);
        let html = render(&report);
        for heading in markdown.lines().filter(|l| l.starts_with('#')) {
            let level = heading.chars().take_while(|&c| c == '#').count();
            let tag = format!("<h{level}>{}</h{level}>", heading[level..].trim());
            assert!(html.contains(&tag), "{tag}");
        }
        let page = html.split("<details>").next().unwrap();
        assert!(!page.contains("|---") && !page.contains("<pre>") && !page.contains("<i>"), "{page}");
        assert_eq!(page.matches("<table>").count(), markdown.lines().filter(|l| l.starts_with("|---")).count());
        assert!(page.contains("<td>model=a|b &lt;i&gt;</td>"), "{page}");
    }

    #[test]
    fn inline_markdown_becomes_html() {
        assert_eq!(inline(r"a \| b `code` **bold** <x>"), "a | b <code>code</code> <strong>bold</strong> &lt;x&gt;");
        assert_eq!(cells(r"| a\|b | c |"), vec![r"a\|b", "c"]);
    }
}
