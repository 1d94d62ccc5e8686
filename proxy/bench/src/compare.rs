//! `tokentap bench compare A.json B.json`: the conditions side by side, then each cell's
//! percentiles with the change from A to B. Runs whose conditions differ (other than the seed)
//! are refused unless the caller allows it, and then the differences are printed first.

use std::fmt::Write;

use serde_json::Value;
use tokentap_analysis::Distribution;

use crate::results::BenchResults;
use crate::stats::CellStats;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CompareError {
    #[error("the runs were measured under different conditions ({}); pass --allow-mismatch to compare anyway", .0.join("; "))]
    Mismatch(Vec<String>),
}

/// The conditions that differ between `a` and `b`, as `field: A vs B` (the seed is not a condition).
pub fn mismatches(a: &BenchResults, b: &BenchResults) -> Vec<String> {
    let as_map = |r: &BenchResults| match serde_json::to_value(&r.conditions) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    let (ma, mb) = (as_map(a), as_map(b));
    let mut out = Vec::new();
    for (key, va) in &ma {
        if key == "seed" {
            continue;
        }
        let vb = mb.get(key).unwrap_or(&Value::Null);
        if va != vb {
            out.push(format!("{key}: {va} vs {vb}"));
        }
    }
    if a.environment.path != b.environment.path {
        out.push(format!("path: {:?} vs {:?}", a.environment.path, b.environment.path));
    }
    out
}

/// The comparison text (markdown), or the refusal.
pub fn compare(a: &BenchResults, b: &BenchResults, allow_mismatch: bool) -> Result<String, CompareError> {
    let differing = mismatches(a, b);
    if !differing.is_empty() && !allow_mismatch {
        return Err(CompareError::Mismatch(differing));
    }
    let mut out = String::new();
    let _ = writeln!(out, "# tokentap bench compare\n");
    if !differing.is_empty() {
        let _ = writeln!(out, "**The conditions differ** (compared anyway, as asked):\n");
        for d in &differing {
            let _ = writeln!(out, "- {d}");
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out, "| | A | B |\n|---|---|---|");
    let rows = [
        ("target", a.environment.target.clone(), b.environment.target.clone()),
        ("model", a.conditions.model.clone(), b.conditions.model.clone()),
        (
            "server",
            a.environment.server_header.clone().unwrap_or_default(),
            b.environment.server_header.clone().unwrap_or_default(),
        ),
        ("started", a.environment.started_at.clone(), b.environment.started_at.clone()),
        ("prefix", format!("{:?}", a.conditions.prefix), format!("{:?}", b.conditions.prefix)),
        (
            "load",
            serde_json::to_string(&a.conditions.load).unwrap_or_default(),
            serde_json::to_string(&b.conditions.load).unwrap_or_default(),
        ),
        ("requests per cell", a.conditions.requests_per_cell.to_string(), b.conditions.requests_per_cell.to_string()),
        (
            "machine",
            format!("{} CPUs {}", a.environment.cpus, a.environment.cpu_model.clone().unwrap_or_default()),
            format!("{} CPUs {}", b.environment.cpus, b.environment.cpu_model.clone().unwrap_or_default()),
        ),
    ];
    for (name, va, vb) in rows {
        let _ = writeln!(out, "| {name} | {va} | {vb} |");
    }
    let _ = writeln!(out, "\n| load | output | prompt | metric | A | B | change |\n|---|---|---|---|---|---|---|");
    for ca in &a.cells {
        let Some(cb) = b.cells.iter().find(|c| {
            c.cell.load == ca.cell.load
                && c.cell.output_tokens == ca.cell.output_tokens
                && c.cell.prompt_tokens == ca.cell.prompt_tokens
        }) else {
            continue;
        };
        let label = format!("{} | {} | {}", ca.cell.load.label(), ca.cell.output_tokens, ca.cell.prompt_tokens);
        for (metric, va, vb) in cell_rows(&ca.stats, &cb.stats) {
            let change = match (va, vb) {
                (Some(x), Some(y)) if x != 0.0 => format!("{:+.1}%", (y / x - 1.0) * 100.0),
                _ => "—".into(),
            };
            let fmt = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.1}"));
            let _ = writeln!(out, "| {label} | {metric} | {} | {} | {change} |", fmt(va), fmt(vb));
        }
    }
    Ok(out)
}

fn cell_rows(a: &CellStats, b: &CellStats) -> Vec<(&'static str, Option<f64>, Option<f64>)> {
    let p = |d: &Option<Distribution>, f: fn(&Distribution) -> f64| d.as_ref().map(f);
    vec![
        ("TTFT p50 ms", p(&a.ttft_answer_ms, |d| d.p50), p(&b.ttft_answer_ms, |d| d.p50)),
        ("TTFT p95 ms", p(&a.ttft_answer_ms, |d| d.p95), p(&b.ttft_answer_ms, |d| d.p95)),
        ("TPOT p50 ms", p(&a.tpot_ms, |d| d.p50), p(&b.tpot_ms, |d| d.p50)),
        ("TPOT p95 ms", p(&a.tpot_ms, |d| d.p95), p(&b.tpot_ms, |d| d.p95)),
        ("e2e p95 ms", p(&a.e2e_ms, |d| d.p95), p(&b.e2e_ms, |d| d.p95)),
        ("total tok/s", a.total_output_tps, b.total_output_tps),
        ("failures", Some(a.failures as f64), Some(b.failures as f64)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Api, LoadMode, PrefixMode, Slo};
    use crate::plan::{Cell, Load};
    use crate::results::{CellResult, Conditions, Environment, Reproduce, RequestPath};
    use crate::stats::cell_stats;

    fn results(prefix: PrefixMode, seed: u64) -> BenchResults {
        let stats = cell_stats(&[], &Slo::default());
        BenchResults {
            results_version: 1,
            environment: Environment {
                target: "http://127.0.0.1:1/v1".into(),
                path: RequestPath::Direct,
                server_header: None,
                response_model: None,
                tokentap_version: "0".into(),
                os: "linux".into(),
                arch: "x86_64".into(),
                cpus: 2,
                cpu_model: None,
                memory_bytes: None,
                started_at: "2026-01-01T00:00:00Z".into(),
                records_dir: None,
            },
            conditions: Conditions {
                api: Api::Openai,
                model: "m".into(),
                load: LoadMode::Closed { concurrency: vec![1] },
                output_tokens: vec![64],
                prompt_tokens: vec![256],
                requests_per_cell: 20,
                warmup: 3,
                duration_s: None,
                prefix,
                ignore_eos: false,
                slo: Slo::default(),
                timeout_s: 300.0,
                fresh_connections: false,
                seed,
                extra_headers: vec![],
            },
            warmup: stats.clone(),
            cells: vec![CellResult {
                cell: Cell { index: 0, load: Load::Concurrency(1), output_tokens: 64, prompt_tokens: 256 },
                stats,
            }],
            regressions: vec![],
            bottleneck: vec![],
            reproduce: Reproduce { command: String::new(), request_example: Value::Null, request_path: String::new() },
        }
    }

    #[test]
    fn mismatched_conditions_are_refused_unless_allowed() {
        let (a, b) = (results(PrefixMode::Unique, 1), results(PrefixMode::Shared, 2));
        match compare(&a, &b, false) {
            Err(CompareError::Mismatch(d)) => assert_eq!(d, vec!["prefix: \"unique\" vs \"shared\"".to_string()]),
            other => panic!("expected a refusal, got {other:?}"),
        }
        let text = compare(&a, &b, true).unwrap();
        assert!(text.contains("The conditions differ"));
        // Another seed alone is the same conditions.
        let text = compare(&a, &results(PrefixMode::Unique, 9), false).unwrap();
        assert!(!text.contains("The conditions differ") && text.contains("TTFT p95 ms"));
        let mut embedded = results(PrefixMode::Unique, 1);
        embedded.environment.path = RequestPath::EmbeddedTokentap;
        assert!(compare(&a, &embedded, false).is_err());
    }
}
