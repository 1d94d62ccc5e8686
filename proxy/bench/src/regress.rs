//! The regressions users ask for, from the cells' percentiles, and a short bottleneck reading
//! derived from them (docs/bench.md gives the formulas and thresholds):
//!
//! - per doubling of concurrency (closed loop, same lengths): `(v(c_max) / v(c_min))^(1 / log2(c_max
//!   / c_min)) − 1`, the geometric mean change per doubling, for p95 TTFT (answer) and p95 TPOT;
//! - per 1,000 prompt tokens (same load and output length): the least-squares slope of p50 TTFT
//!   over the prompt lengths.
//!
//! The reading compares the lowest and the highest concurrency of each group: TTFT p50 up more than
//! [`QUEUEING_TTFT_RISE`] means queueing (or prefill contention) dominates; TPOT p50 up more than
//! [`DECODE_TPOT_RISE`] means decode is bandwidth-bound (every added user slows every stream);
//! total tokens/s growing less than [`SATURATION_EFFICIENCY`] of the user ratio means the server
//! saturates.

use serde::{Deserialize, Serialize};

use crate::plan::{Cell, Load};
use crate::stats::CellStats;

pub const QUEUEING_TTFT_RISE: f64 = 0.5;
pub const DECODE_TPOT_RISE: f64 = 0.25;
pub const SATURATION_EFFICIENCY: f64 = 0.5;
/// A change smaller than this (relative, lowest to highest level) is noise, not a regression.
pub const NOISE_CHANGE: f64 = 0.05;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegressionKind {
    /// Percent change per doubling of concurrency.
    PerConcurrencyDoubling,
    /// Milliseconds per 1,000 prompt tokens.
    PerThousandPromptTokens,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Regression {
    pub kind: RegressionKind,
    /// `ttft_answer_ms.p95`, `tpot_ms.p95`, `ttft_answer_ms.p50`.
    pub metric: String,
    /// The fixed conditions (e.g. `output 512, prompt 256`).
    pub group: String,
    /// Percent per doubling, or ms per 1k prompt tokens.
    pub value: f64,
    pub sentence: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Finding {
    Queueing,
    DecodeBandwidth,
    Saturation,
    NoContention,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bottleneck {
    pub finding: Finding,
    pub group: String,
    pub sentence: String,
}

fn concurrency(cell: &Cell) -> Option<u32> {
    match cell.load {
        Load::Concurrency(c) => Some(c),
        Load::Rate(_) => None,
    }
}

/// Output and prompt lengths of a group of cells.
type Lengths = (u32, u64);

/// Closed-loop groups of the same lengths, each sorted by concurrency (two levels at least).
fn concurrency_groups<'a>(cells: &[(&'a Cell, &'a CellStats)]) -> Vec<(String, Vec<(u32, &'a CellStats)>)> {
    let mut groups: Vec<(Lengths, Vec<(u32, &CellStats)>)> = Vec::new();
    for (cell, stats) in cells {
        let Some(c) = concurrency(cell) else { continue };
        let key = (cell.output_tokens, cell.prompt_tokens);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push((c, stats)),
            None => groups.push((key, vec![(c, stats)])),
        }
    }
    groups
        .into_iter()
        .filter(|(_, m)| m.len() >= 2)
        .map(|((output, prompt), mut members)| {
            members.sort_by_key(|(c, _)| *c);
            (format!("output {output}, prompt {prompt}"), members)
        })
        .collect()
}

fn per_doubling(c_lo: u32, v_lo: f64, c_hi: u32, v_hi: f64) -> Option<f64> {
    let doublings = (f64::from(c_hi) / f64::from(c_lo)).log2();
    (doublings > 0.0 && v_lo > 0.0 && v_hi > 0.0).then(|| ((v_hi / v_lo).powf(1.0 / doublings) - 1.0) * 100.0)
}

/// Least-squares slope of `y` over `x`.
fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    (points.len() >= 2 && sxx > 0.0).then(|| sxy / sxx)
}

pub fn regressions(cells: &[(&Cell, &CellStats)]) -> Vec<Regression> {
    let mut out = Vec::new();
    for (group, members) in concurrency_groups(cells) {
        let (lo, hi) = (members[0], members[members.len() - 1]);
        for (metric, name, get) in [
            (
                "ttft_answer_ms.p95",
                "p95 TTFT",
                (|s: &CellStats| s.ttft_answer_ms.as_ref().map(|d| d.p95)) as fn(&CellStats) -> Option<f64>,
            ),
            ("tpot_ms.p95", "p95 TPOT", |s: &CellStats| s.tpot_ms.as_ref().map(|d| d.p95)),
        ] {
            if let (Some(a), Some(b)) = (get(lo.1), get(hi.1)) {
                // A change within the noise band is no regression: not listed.
                if (b / a - 1.0).abs() < NOISE_CHANGE {
                    continue;
                }
                if let Some(value) = per_doubling(lo.0, a, hi.0, b) {
                    let (verb, total) = (if b >= a { "raises" } else { "lowers" }, (b / a - 1.0).abs() * 100.0);
                    let sentence = if hi.0 == lo.0 * 2 {
                        format!(
                            "{group}: doubling the users ({} → {}) {verb} {name} by {total:.0}% ({a:.1} → {b:.1} ms)",
                            lo.0, hi.0
                        )
                    } else {
                        format!(
                            "{group}: going from {} to {} users {verb} {name} by {total:.0}% ({a:.1} → {b:.1} ms), {:.1}% per doubling",
                            lo.0,
                            hi.0,
                            value.abs()
                        )
                    };
                    out.push(Regression {
                        kind: RegressionKind::PerConcurrencyDoubling,
                        metric: metric.into(),
                        group: group.clone(),
                        value,
                        sentence,
                    });
                }
            }
        }
    }
    let mut prompt_groups: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for (cell, stats) in cells {
        let Some(ttft) = stats.ttft_answer_ms.as_ref().map(|d| d.p50) else { continue };
        let group = format!("{}, output {}", cell.load.label(), cell.output_tokens);
        let point = (cell.prompt_tokens as f64, ttft);
        match prompt_groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, points)) => points.push(point),
            None => prompt_groups.push((group, vec![point])),
        }
    }
    for (group, points) in prompt_groups {
        if let Some(s) = slope(&points) {
            let value = s * 1000.0;
            // Over the prompt lengths measured, a change within the noise band is no regression.
            let (lo, hi) = points.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| (l.min(p.0), h.max(p.0)));
            let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64;
            if mean > 0.0 && (s * (hi - lo)).abs() < NOISE_CHANGE * mean {
                continue;
            }
            out.push(Regression {
                kind: RegressionKind::PerThousandPromptTokens,
                metric: "ttft_answer_ms.p50".into(),
                group: group.clone(),
                value,
                sentence: format!(
                    "{group}: p50 TTFT grows {value:.1} ms per 1k prompt tokens ({} prompt lengths)",
                    points.len()
                ),
            });
        }
    }
    out
}

pub fn bottlenecks(cells: &[(&Cell, &CellStats)]) -> Vec<Bottleneck> {
    let mut out = Vec::new();
    for (group, members) in concurrency_groups(cells) {
        let (lo, hi) = (members[0], members[members.len() - 1]);
        let rise = |get: fn(&CellStats) -> Option<f64>| match (get(lo.1), get(hi.1)) {
            (Some(a), Some(b)) if a > 0.0 => Some((b / a - 1.0, a, b)),
            _ => None,
        };
        let mut found = false;
        if let Some((r, a, b)) = rise(|s| s.ttft_answer_ms.as_ref().map(|d| d.p50)) {
            if r > QUEUEING_TTFT_RISE {
                found = true;
                out.push(Bottleneck {
                    finding: Finding::Queueing,
                    group: group.clone(),
                    sentence: format!(
                        "{group}: TTFT p50 up {:.0}% from {} to {} users ({a:.0} → {b:.0} ms): queueing (or prefill contention) dominates the wait for the first token",
                        r * 100.0,
                        lo.0,
                        hi.0
                    ),
                });
            }
        }
        if let Some((r, a, b)) = rise(|s| s.tpot_ms.as_ref().map(|d| d.p50)) {
            if r > DECODE_TPOT_RISE {
                found = true;
                out.push(Bottleneck {
                    finding: Finding::DecodeBandwidth,
                    group: group.clone(),
                    sentence: format!(
                        "{group}: TPOT p50 up {:.0}% from {} to {} users ({a:.1} → {b:.1} ms): decode is bandwidth-bound, each added user slows every stream",
                        r * 100.0,
                        lo.0,
                        hi.0
                    ),
                });
            }
        }
        if let Some((r, a, b)) = rise(|s| s.total_output_tps) {
            let users = f64::from(hi.0) / f64::from(lo.0);
            let gain = r + 1.0;
            if gain < SATURATION_EFFICIENCY * users {
                found = true;
                out.push(Bottleneck {
                    finding: Finding::Saturation,
                    group: group.clone(),
                    sentence: format!(
                        "{group}: {users:.0}× the users give {gain:.1}× the total tokens/s ({a:.0} → {b:.0}): the server is saturated"
                    ),
                });
            }
        }
        if !found {
            out.push(Bottleneck {
                finding: Finding::NoContention,
                group: group.clone(),
                sentence: format!(
                    "{group}: no contention seen from {} to {} users (TTFT, TPOT and throughput within the thresholds)",
                    lo.0, hi.0
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokentap_analysis::Distribution;

    fn stats(ttft_p: f64, tpot_p: f64, total_tps: f64) -> CellStats {
        let d = |v: f64| Some(Distribution { count: 1, p50: v, p90: v, p95: v, p99: v, max: v });
        CellStats {
            requests: 1,
            ok: 1,
            failures: 0,
            failure_kinds: Default::default(),
            duration_s: 1.0,
            ttft_answer_ms: d(ttft_p),
            ttft_reasoning_ms: None,
            itl_ms: None,
            tpot_ms: d(tpot_p),
            e2e_ms: None,
            output_tps: None,
            output_tokens: None,
            total_output_tps: Some(total_tps),
            request_throughput: None,
            goodput: None,
            late_sends: None,
            send_lateness_ms: None,
        }
    }

    fn cell(c: u32, prompt: u64) -> Cell {
        Cell { index: 0, load: Load::Concurrency(c), output_tokens: 64, prompt_tokens: prompt }
    }

    #[test]
    fn doubling_and_prompt_slope() {
        let (c1, c4) = (cell(1, 256), cell(4, 256));
        // TTFT quadruples over two doublings: +100% per doubling. TPOT flat.
        let (s1, s4) = (stats(100.0, 10.0, 100.0), stats(400.0, 10.0, 150.0));
        let r = regressions(&[(&c1, &s1), (&c4, &s4)]);
        let ttft = r.iter().find(|r| r.metric == "ttft_answer_ms.p95").unwrap();
        assert!((ttft.value - 100.0).abs() < 1e-9, "{}", ttft.value);
        assert!(
            ttft.sentence
                .contains("going from 1 to 4 users raises p95 TTFT by 300% (100.0 → 400.0 ms), 100.0% per doubling"),
            "{}",
            ttft.sentence
        );
        assert!(!ttft.sentence.contains("doubling the users"), "1 → 4 is two doublings: {}", ttft.sentence);
        assert!(r.iter().all(|r| r.metric != "tpot_ms.p95"), "a flat TPOT is no regression: {r:?}");
        let b = bottlenecks(&[(&c1, &s1), (&c4, &s4)]);
        let findings: Vec<Finding> = b.iter().map(|b| b.finding).collect();
        // 4× users, 1.5× tokens/s: saturated; TTFT +300%: queueing.
        assert_eq!(findings, vec![Finding::Queueing, Finding::Saturation]);

        let (p1, p2, p3) = (cell(1, 1000), cell(1, 2000), cell(1, 3000));
        let (a, b2, c) = (stats(100.0, 1.0, 1.0), stats(150.0, 1.0, 1.0), stats(200.0, 1.0, 1.0));
        let r = regressions(&[(&p1, &a), (&p2, &b2), (&p3, &c)]);
        let prompt = r.iter().find(|r| r.kind == RegressionKind::PerThousandPromptTokens).unwrap();
        assert!((prompt.value - 50.0).abs() < 1e-9);
    }

    #[test]
    fn flat_latency_and_linear_throughput_is_no_contention() {
        let (c1, c8) = (cell(1, 256), cell(8, 256));
        let (s1, s8) = (stats(100.0, 10.0, 100.0), stats(110.0, 11.0, 790.0));
        let b = bottlenecks(&[(&c1, &s1), (&c8, &s8)]);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].finding, Finding::NoContention);
    }

    #[test]
    fn noise_is_no_regression_and_one_doubling_says_so() {
        let (c1, c2) = (cell(1, 256), cell(2, 256));
        // +0.4 % and −0.1 %: noise.
        let r = regressions(&[(&c1, &stats(100.0, 10.0, 100.0)), (&c2, &stats(100.4, 9.99, 200.0))]);
        assert!(r.is_empty(), "{r:?}");
        let r = regressions(&[(&c1, &stats(100.0, 10.0, 100.0)), (&c2, &stats(150.0, 10.0, 200.0))]);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].sentence.contains("doubling the users (1 → 2) raises p95 TTFT by 50%"), "{}", r[0].sentence);
    }
}
