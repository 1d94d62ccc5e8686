//! The self-contained HTML report: the markdown report's sections, plus plots drawn as inline SVG
//! (no script, no external asset): TTFT and TPOT percentiles against concurrency per output
//! length, tokens/s per user against total tokens/s, and latency CDFs per cell.

use std::fmt::Write;

use crate::plan::Load;
use crate::record::RequestRecord;
use crate::results::BenchResults;

const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

/// One line (or point set) of a plot.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
    dashed: bool,
}

pub fn render(r: &BenchResults, records: &[RequestRecord]) -> String {
    let mut out = String::new();
    let title = format!("tokentap bench: {} ({})", r.conditions.model, r.environment.target);
    let _ = write!(
        out,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{}</title><style>\
         body{{font:14px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}}\
         table{{border-collapse:collapse;margin:.5em 0 1.5em}}td,th{{border:1px solid #ccc;padding:3px 7px;text-align:right}}\
         th{{background:#f4f4f4}}td:first-child,th:first-child{{text-align:left}}pre{{background:#f6f6f6;padding:.7em;overflow:auto}}\
         .plots{{display:flex;flex-wrap:wrap;gap:1em}}figure{{margin:0}}figcaption{{font-size:12px;color:#555}}\
         </style></head><body>",
        escape(&title)
    );
    // The markdown's text sections, as preformatted blocks would lose the tables: render them.
    let markdown = crate::markdown::render(r);
    out.push_str(&markdown_to_html(&markdown));
    let _ = write!(out, "<h2>Plots</h2><div class=\"plots\">");
    for (metric, name) in [("ttft", "TTFT answer (ms)"), ("tpot", "TPOT (ms)")] {
        let series = percentile_series(r, metric);
        if series.iter().any(|s| s.points.len() >= 2) {
            out.push_str(&plot(&format!("{name} vs concurrency"), "concurrency", name, &series, true, false));
        }
    }
    let scatter: Vec<Series> = r
        .cells
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let x = c.stats.total_output_tps?;
            let y = c.stats.output_tps.as_ref()?.p50;
            Some(Series {
                label: format!("{} out {} prompt {}", c.cell.load.label(), c.cell.output_tokens, c.cell.prompt_tokens),
                points: vec![(x, y)],
                dashed: i % 2 == 1,
            })
        })
        .collect();
    if !scatter.is_empty() {
        out.push_str(&plot(
            "tok/s per user (p50) vs total tok/s",
            "total output tok/s",
            "tok/s per user",
            &scatter,
            false,
            true,
        ));
    }
    for (name, get) in [
        ("TTFT answer", (|r: &RequestRecord| r.ttft_answer_ms) as fn(&RequestRecord) -> Option<f64>),
        ("e2e", |r: &RequestRecord| r.e2e_ms),
    ] {
        let series: Vec<Series> = r
            .cells
            .iter()
            .map(|c| {
                let mut values: Vec<f64> =
                    records.iter().filter(|rec| rec.ok && rec.cell == Some(c.cell.index)).filter_map(get).collect();
                values.sort_by(f64::total_cmp);
                let n = values.len() as f64;
                Series {
                    label: format!(
                        "{} out {} prompt {}",
                        c.cell.load.label(),
                        c.cell.output_tokens,
                        c.cell.prompt_tokens
                    ),
                    points: values.iter().enumerate().map(|(i, v)| (*v, (i + 1) as f64 / n)).collect(),
                    dashed: false,
                }
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if !series.is_empty() {
            out.push_str(&plot(
                &format!("{name} CDF"),
                &format!("{name} (ms)"),
                "fraction of requests",
                &series,
                false,
                false,
            ));
        }
    }
    out.push_str("</div></body></html>\n");
    out
}

/// Output and prompt lengths of a group of cells.
type Lengths = (u32, u64);
/// (concurrency, p50, p95).
type Percentiles = (f64, f64, f64);

/// p50 (solid) and p95 (dashed) of TTFT or TPOT against concurrency, one pair per output and
/// prompt length.
fn percentile_series(r: &BenchResults, metric: &str) -> Vec<Series> {
    let mut groups: Vec<(Lengths, Vec<Percentiles>)> = Vec::new();
    for c in &r.cells {
        let Load::Concurrency(users) = c.cell.load else { continue };
        let d = if metric == "ttft" { &c.stats.ttft_answer_ms } else { &c.stats.tpot_ms };
        let Some(d) = d else { continue };
        let key = (c.cell.output_tokens, c.cell.prompt_tokens);
        let point = (f64::from(users), d.p50, d.p95);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, points)) => points.push(point),
            None => groups.push((key, vec![point])),
        }
    }
    let mut series = Vec::new();
    for ((output, prompt), points) in groups {
        let label = format!("out {output} prompt {prompt}");
        series.push(Series {
            label: format!("{label} p50"),
            points: points.iter().map(|p| (p.0, p.1)).collect(),
            dashed: false,
        });
        series.push(Series {
            label: format!("{label} p95"),
            points: points.iter().map(|p| (p.0, p.2)).collect(),
            dashed: true,
        });
    }
    series
}

/// An SVG plot: `log_x` puts x on a log2 axis (concurrency); `points_only` draws markers only.
fn plot(title: &str, x_name: &str, y_name: &str, series: &[Series], log_x: bool, points_only: bool) -> String {
    let (w, h, left, right, top, bottom) = (520.0, 300.0, 60.0, 170.0, 24.0, 40.0);
    let fx = |x: f64| if log_x { x.max(1e-9).log2() } else { x };
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.iter().map(|&(x, y)| (fx(x), y))).collect();
    let (mut x0, mut x1) = all.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let y1 = all.iter().fold(0.0f64, |a, p| a.max(p.1)) * 1.08;
    let y0 = 0.0;
    // The x axis covers the data, not 0 → max (a CDF of values far from 0 would be a vertical
    // line), with a margin either side so no point sits on the frame or under the legend.
    if (x1 - x0).abs() < 1e-12 {
        let pad = if log_x { 0.5 } else { x0.abs().max(1.0) * 0.1 };
        (x0, x1) = (x0 - pad, x1 + pad);
    } else {
        let pad = (x1 - x0) * 0.05;
        (x0, x1) = (x0 - pad, x1 + pad);
    }
    if !log_x && all.iter().all(|p| p.0 >= 0.0) {
        x0 = x0.max(0.0);
    }
    let y1 = if y1 <= 0.0 { 1.0 } else { y1 };
    let px = |x: f64| left + (fx(x) - x0) / (x1 - x0) * (w - left - right);
    let py = |y: f64| h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom);
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<figure><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-size=\"11\">\
         <text x=\"{left}\" y=\"14\" font-weight=\"bold\">{}</text>\
         <line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/><line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"#888\"/>",
        escape(title),
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    for k in 0..=4 {
        let y = y0 + (y1 - y0) * f64::from(k) / 4.0;
        let _ = write!(svg, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>", left - 4.0, py(y) + 4.0, short(y));
        let xv = x0 + (x1 - x0) * f64::from(k) / 4.0;
        let label = if log_x { short(xv.exp2()) } else { short(xv) };
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{label}</text>",
            left + (xv - x0) / (x1 - x0) * (w - left - right),
            h - bottom + 14.0
        );
    }
    let _ = write!(
        svg,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text><text x=\"12\" y=\"{}\" transform=\"rotate(-90 12 {})\" text-anchor=\"middle\">{}</text>",
        left + (w - left - right) / 2.0,
        h - 6.0,
        escape(x_name),
        h / 2.0,
        h / 2.0,
        escape(y_name)
    );
    // p50/p95 pairs share a color (solid and dashed).
    let paired = !points_only && series.iter().any(|s| s.dashed);
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[(if paired { i / 2 } else { i }) % COLORS.len()];
        if !points_only && s.points.len() >= 2 {
            let path: Vec<String> = s.points.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
            let dash = if s.dashed { " stroke-dasharray=\"5,3\"" } else { "" };
            let _ = write!(
                svg,
                "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.6\"{dash} points=\"{}\"/>",
                path.join(" ")
            );
        }
        if points_only || s.points.len() < 40 {
            for &(x, y) in &s.points {
                let _ = write!(svg, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>", px(x), py(y));
            }
        }
        if i < 16 {
            let ly = top + 12.0 * i as f64 + 8.0;
            let _ = write!(
                svg,
                "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"3\" fill=\"{color}\"/><text x=\"{}\" y=\"{}\">{}</text>",
                w - right + 8.0,
                ly - 3.0,
                w - right + 22.0,
                ly + 1.0,
                escape(&legend_label(&s.label))
            );
        }
    }
    svg.push_str("</svg></figure>");
    svg
}

/// A legend entry that fits the legend's column (about 24 characters at 11 px) instead of running
/// off the figure.
fn legend_label(label: &str) -> String {
    const MAX: usize = 24;
    if label.chars().count() <= MAX {
        return label.to_owned();
    }
    let cut: String = label.chars().take(MAX - 1).collect();
    format!("{cut}…")
}

fn short(v: f64) -> String {
    if v.abs() >= 100.0 || v == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The subset of markdown the report uses: headings, tables, bullets, fenced code, paragraphs.
fn markdown_to_html(markdown: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    let mut in_table = false;
    let mut in_list = false;
    let inline = |text: &str| {
        let mut html = String::new();
        for (i, part) in escape(text).split('`').enumerate() {
            if i % 2 == 1 {
                let _ = write!(html, "<code>{part}</code>");
            } else {
                html.push_str(part);
            }
        }
        html
    };
    for line in markdown.lines() {
        if line.starts_with("```") {
            out.push_str(if in_code { "</pre>" } else { "<pre>" });
            in_code = !in_code;
            continue;
        }
        if in_code {
            let _ = writeln!(out, "{}", escape(line));
            continue;
        }
        if in_table && !line.starts_with('|') {
            out.push_str("</table>");
            in_table = false;
        }
        if in_list && !line.starts_with("- ") {
            out.push_str("</ul>");
            in_list = false;
        }
        if let Some(h) = line.strip_prefix("## ") {
            let _ = write!(out, "<h2>{}</h2>", inline(h));
        } else if let Some(h) = line.strip_prefix("# ") {
            let _ = write!(out, "<h1>{}</h1>", inline(h));
        } else if line.starts_with('|') {
            if line.starts_with("|---") {
                continue;
            }
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            let tag = if in_table { "td" } else { "th" };
            if !in_table {
                out.push_str("<table>");
                in_table = true;
            }
            out.push_str("<tr>");
            for cell in cells {
                let _ = write!(out, "<{tag}>{}</{tag}>", inline(cell));
            }
            out.push_str("</tr>");
        } else if let Some(item) = line.strip_prefix("- ") {
            if !in_list {
                out.push_str("<ul>");
                in_list = true;
            }
            let _ = write!(out, "<li>{}</li>", inline(item));
        } else if !line.trim().is_empty() {
            let _ = write!(out, "<p>{}</p>", inline(line));
        }
    }
    if in_table {
        out.push_str("</table>");
    }
    if in_list {
        out.push_str("</ul>");
    }
    out
}

#[cfg(test)]
mod plot_tests {
    use super::*;

    fn numbers(svg: &str, attr: &str) -> Vec<f64> {
        svg.split(&format!(" {attr}=\"")).skip(1).filter_map(|t| t.split('"').next()?.parse().ok()).collect()
    }

    #[test]
    fn points_stay_inside_the_plot_and_a_cdf_axis_covers_its_data() {
        let series: Vec<Series> = (0..3)
            .map(|i| Series {
                label: format!("c={} out 512 prompt 4096 with a long name", 1 << i),
                points: (1..=10).map(|k| (1000.0 + f64::from(k) + f64::from(i), f64::from(k) / 10.0)).collect(),
                dashed: false,
            })
            .collect();
        let svg = plot("CDF", "ms", "fraction", &series, false, false);
        let (w, right, left) = (520.0, 170.0, 60.0);
        for cx in numbers(&svg, "cx") {
            assert!(cx > left && cx < w - right - 2.0, "a point at {cx} sits on the frame or under the legend");
        }
        // The data (1001 … 1012 ms) fills the plot: the first point is not squeezed against the last.
        let cx = numbers(&svg, "cx");
        let (lo, hi) = cx.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        assert!(hi - lo > 200.0, "{lo} … {hi}");
        assert!(!svg.contains("with a long name"), "legend labels are cut to fit");
    }
}
