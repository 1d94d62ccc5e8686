//! The markdown report: environment, conditions, the tables, regressions, the bottleneck reading
//! and how to reproduce the run.

use std::fmt::Write;

use tokentap_analysis::Distribution;

use crate::config::LoadMode;
use crate::results::{BenchResults, RequestPath};
use crate::stats::CellStats;

pub fn render(r: &BenchResults) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# tokentap bench: {} ({})\n", r.conditions.model, r.environment.target);
    environment(&mut out, r);
    conditions(&mut out, r);
    tables(&mut out, r);
    findings(&mut out, r);
    reproduce(&mut out, r);
    out
}

fn environment(out: &mut String, r: &BenchResults) {
    let e = &r.environment;
    let _ = writeln!(out, "## Environment\n");
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(out, "| target | {} |", e.target);
    let path = match e.path {
        RequestPath::Direct => "direct (`--direct`)".to_string(),
        RequestPath::EmbeddedTokentap => {
            format!("through an embedded tokentap (records in `{}`)", e.records_dir.as_deref().unwrap_or("?"))
        }
    };
    let _ = writeln!(out, "| requests went | {path} |");
    let _ = writeln!(out, "| server header | {} |", e.server_header.as_deref().unwrap_or("—"));
    let _ = writeln!(out, "| model (as reported) | {} |", e.response_model.as_deref().unwrap_or("—"));
    let _ = writeln!(out, "| tokentap | {} |", e.tokentap_version);
    let memory = e.memory_bytes.map_or("—".to_string(), |b| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64));
    let _ = writeln!(
        out,
        "| machine | {} {}, {} CPUs ({}), {memory} |",
        e.os,
        e.arch,
        e.cpus,
        e.cpu_model.as_deref().unwrap_or("unknown CPU")
    );
    let _ = writeln!(out, "| started | {} |\n", e.started_at);
}

fn conditions(out: &mut String, r: &BenchResults) {
    let c = &r.conditions;
    let _ = writeln!(out, "## Conditions\n");
    let load = match &c.load {
        LoadMode::Closed { concurrency } => format!("closed loop, concurrency {}", join(concurrency)),
        LoadMode::Open { rates, arrivals } => format!("open loop, {arrivals:?} arrivals at {} requests/s", join(rates)),
    };
    let _ = writeln!(out, "- API {:?}, model `{}`; {load}", c.api, c.model);
    let _ = writeln!(
        out,
        "- output tokens asked (`max_tokens`): {}{}; prompt tokens (o200k_base, exact): {}",
        join(&c.output_tokens),
        if c.ignore_eos { " with `ignore_eos`/`min_tokens`" } else { "" },
        join(&c.prompt_tokens)
    );
    let _ = writeln!(
        out,
        "- prompt cache: `{}` ({})",
        match c.prefix {
            crate::config::PrefixMode::Unique => "unique",
            crate::config::PrefixMode::Shared => "shared",
        },
        match c.prefix {
            crate::config::PrefixMode::Unique => "every prompt differs from its first tokens: cold",
            crate::config::PrefixMode::Shared => "one prompt per length for the run: warm after the first",
        }
    );
    let _ = writeln!(
        out,
        "- {} requests per cell{}; {} warm-up requests excluded ({} ok, {} failed); no retries; timeout {:.0} s; seed {}",
        c.requests_per_cell,
        c.duration_s.map_or(String::new(), |d| format!(" (at most {d:.0} s of starts per cell)")),
        c.warmup,
        r.warmup.ok,
        r.warmup.failures,
        c.timeout_s,
        c.seed
    );
    if !c.slo.is_empty() {
        let slo: Vec<String> = c.slo.objectives_ms.iter().map(|(m, v)| format!("{} ≤ {v} ms", m.as_str())).collect();
        let _ = writeln!(out, "- SLO: {}", slo.join(", "));
    }
    let _ = writeln!(out, "- definitions: docs/metrics.md (TTFT = first answer text; TPOT and tok/s exclude the first content event; tokens are o200k_base)\n");
}

fn dist(d: &Option<Distribution>) -> String {
    match d {
        Some(d) => format!("{:.1} / {:.1} / {:.1} / {:.1}", d.p50, d.p90, d.p95, d.p99),
        None => "—".into(),
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("—".into(), |v| format!("{v:.digits$}"))
}

fn failures(s: &CellStats) -> String {
    if s.failures == 0 {
        return "0".into();
    }
    let kinds: Vec<String> = s.failure_kinds.iter().map(|(k, n)| format!("{} {n}", k.as_str())).collect();
    format!("{} ({})", s.failures, kinds.join(", "))
}

fn tables(out: &mut String, r: &BenchResults) {
    let _ = writeln!(out, "## Latency (ms, p50 / p90 / p95 / p99 over successful requests)\n");
    let _ = writeln!(out, "| load | output | prompt | n | failed | TTFT answer | TTFT reasoning | ITL | TPOT | e2e |");
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    for c in &r.cells {
        let s = &c.stats;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            c.cell.load.label(),
            c.cell.output_tokens,
            c.cell.prompt_tokens,
            s.requests,
            failures(s),
            dist(&s.ttft_answer_ms),
            dist(&s.ttft_reasoning_ms),
            dist(&s.itl_ms),
            dist(&s.tpot_ms),
            dist(&s.e2e_ms)
        );
    }
    let _ = writeln!(out, "\n## Throughput\n");
    let goodput = r.cells.iter().any(|c| c.stats.goodput.is_some());
    let open = r.cells.iter().any(|c| c.stats.late_sends.is_some());
    let _ = write!(
        out,
        "| load | output | prompt | output tokens p50 | tok/s per user p50 / p90 | total tok/s | requests/s |"
    );
    if goodput {
        let _ = write!(out, " SLO met | good req/s | good tok/s |");
    }
    if open {
        let _ = write!(out, " late sends |");
    }
    let _ = writeln!(out);
    let columns = 7 + if goodput { 3 } else { 0 } + usize::from(open);
    let _ = writeln!(out, "|{}", "---|".repeat(columns));
    for c in &r.cells {
        let s = &c.stats;
        let per_user = s.output_tps.as_ref().map_or("—".into(), |d| format!("{:.1} / {:.1}", d.p50, d.p90));
        let _ = write!(
            out,
            "| {} | {} | {} | {} | {per_user} | {} | {} |",
            c.cell.load.label(),
            c.cell.output_tokens,
            c.cell.prompt_tokens,
            s.output_tokens.as_ref().map_or("—".into(), |d| format!("{:.0}", d.p50)),
            opt(s.total_output_tps, 1),
            opt(s.request_throughput, 2)
        );
        if goodput {
            let g = s.goodput.as_ref();
            let _ = write!(
                out,
                " {} | {} | {} |",
                g.map_or("—".into(), |g| format!("{}/{} ({:.0}%)", g.good, s.requests, g.attainment * 100.0)),
                opt(g.and_then(|g| g.good_requests_per_s), 2),
                opt(g.and_then(|g| g.good_output_tps), 1)
            );
        }
        if open {
            let _ = write!(out, " {} |", s.late_sends.map_or("—".into(), |n| n.to_string()));
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out, "\nThe slowest users' rate is 1000 / the TPOT percentiles above.\n");
}

fn findings(out: &mut String, r: &BenchResults) {
    if !r.regressions.is_empty() {
        let _ = writeln!(out, "## Regressions\n");
        for g in &r.regressions {
            let _ = writeln!(out, "- {}", g.sentence);
        }
        let _ = writeln!(out);
    }
    if !r.bottleneck.is_empty() {
        let _ = writeln!(out, "## Reading\n");
        for b in &r.bottleneck {
            let _ = writeln!(out, "- {}", b.sentence);
        }
        let _ = writeln!(out);
    }
}

fn reproduce(out: &mut String, r: &BenchResults) {
    let _ = writeln!(out, "## Reproduce\n");
    let _ = writeln!(out, "```sh\n{}\n```\n", r.reproduce.command);
    let _ = writeln!(
        out,
        "First request (`POST {}`, prompt cut to 200 characters):\n\n```json\n{}\n```",
        r.reproduce.request_path,
        serde_json::to_string_pretty(&r.reproduce.request_example).unwrap_or_default()
    );
}

fn join<T: std::fmt::Display>(values: &[T]) -> String {
    values.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
}
