//! What tokentap reports about its runtime's scheduling lag during a round: the difference of its
//! `tokentap_self_overhead_scheduling_lag_seconds` histogram (from `/metrics`) before and after.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const FAMILY: &str = "tokentap_self_overhead_scheduling_lag_seconds_bucket";

/// Cumulative bucket counts by upper bound (seconds; the last bound is +∞).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LagHistogram {
    buckets: Vec<(f64, u64)>,
}

impl LagHistogram {
    /// Reads the histogram from tokentap's admin listener; `None` when it cannot (no admin
    /// listener, an old build without the metric, or no sample yet).
    pub(crate) fn fetch(admin: SocketAddr) -> Option<LagHistogram> {
        let mut stream = TcpStream::connect_timeout(&admin, Duration::from_secs(5)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        // The admin API answers only its own address in `Host` (DNS rebinding).
        let request = format!("GET /metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        Self::parse(&text)
    }

    /// Sums the family's buckets over its label sets.
    fn parse(text: &str) -> Option<LagHistogram> {
        let mut buckets: Vec<(f64, u64)> = Vec::new();
        for line in text.lines().filter(|l| l.starts_with(FAMILY)) {
            let le = line.split("le=\"").nth(1)?.split('"').next()?;
            let bound = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            let count: u64 = line.rsplit(' ').next()?.parse().ok()?;
            match buckets.iter_mut().find(|(b, _)| *b == bound) {
                Some((_, c)) => *c += count,
                None => buckets.push((bound, count)),
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        (!buckets.is_empty()).then_some(LagHistogram { buckets })
    }

    /// What was added between `before` and `self`.
    pub(crate) fn since(&self, before: Option<&LagHistogram>) -> LagHistogram {
        let Some(before) = before else { return self.clone() };
        let buckets = self
            .buckets
            .iter()
            .map(|&(bound, count)| {
                let earlier = before.buckets.iter().find(|(b, _)| *b == bound).map_or(0, |(_, c)| *c);
                (bound, count.saturating_sub(earlier))
            })
            .collect();
        LagHistogram { buckets }
    }

    pub(crate) fn add(&mut self, other: &LagHistogram) {
        for &(bound, count) in &other.buckets {
            match self.buckets.iter_mut().find(|(b, _)| *b == bound) {
                Some((_, c)) => *c += count,
                None => self.buckets.push((bound, count)),
            }
        }
        self.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    }

    pub(crate) fn samples(&self) -> u64 {
        self.buckets.last().map_or(0, |(_, c)| *c)
    }

    /// The q-th quantile in µs, interpolated linearly within its bucket; above the last finite
    /// bound it is that bound (shown as "> bound").
    pub(crate) fn quantile_us(&self, q: f64) -> Option<Quantile> {
        let total = self.samples();
        if total == 0 {
            return None;
        }
        let rank = q * total as f64;
        let mut lower = (0.0, 0u64);
        for &(bound, count) in &self.buckets {
            if count as f64 >= rank {
                if bound.is_infinite() {
                    return Some(Quantile::Above(lower.0 * 1e6));
                }
                let within = count - lower.1;
                let share = if within == 0 { 1.0 } else { (rank - lower.1 as f64) / within as f64 };
                return Some(Quantile::Within(1e6 * (lower.0 + share * (bound - lower.0))));
            }
            lower = (bound, count);
        }
        None
    }

    /// "p50 / p99 (n samples)" for the table.
    pub(crate) fn cell(&self) -> String {
        match (self.quantile_us(0.5), self.quantile_us(0.99)) {
            (Some(a), Some(b)) => format!("{a} / {b} ({} samples)", self.samples()),
            _ => "–".into(),
        }
    }
}

pub(crate) enum Quantile {
    Within(f64),
    Above(f64),
}

impl std::fmt::Display for Quantile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Quantile::Within(us) => write!(f, "{us:.0}"),
            Quantile::Above(us) => write!(f, "> {us:.0}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# TYPE tokentap_self_overhead_scheduling_lag_seconds histogram\n\
tokentap_self_overhead_scheduling_lag_seconds_bucket{otel_scope_name=\"t\",le=\"0.00001\"} 1\n\
tokentap_self_overhead_scheduling_lag_seconds_bucket{otel_scope_name=\"t\",le=\"0.0001\"} 2\n\
tokentap_self_overhead_scheduling_lag_seconds_bucket{otel_scope_name=\"t\",le=\"+Inf\"} 2\n";
    const AFTER: &str =
        "tokentap_self_overhead_scheduling_lag_seconds_bucket{otel_scope_name=\"t\",le=\"0.00001\"} 1\n\
tokentap_self_overhead_scheduling_lag_seconds_bucket{otel_scope_name=\"t\",le=\"0.0001\"} 102\n\
tokentap_self_overhead_scheduling_lag_seconds_bucket{otel_scope_name=\"t\",le=\"+Inf\"} 104\n\
tokentap_self_overhead_scheduling_lag_seconds_count 104\n";

    #[test]
    fn a_round_is_the_difference_of_two_readings() {
        let before = LagHistogram::parse(BEFORE).unwrap();
        let round = LagHistogram::parse(AFTER).unwrap().since(Some(&before));
        assert_eq!(round.samples(), 102);
        // 100 samples between 10 and 100 µs, 2 above 100 µs.
        assert_eq!(round.quantile_us(0.5).unwrap().to_string(), "56");
        assert_eq!(round.quantile_us(0.99).unwrap().to_string(), "> 100");
        assert!(LagHistogram::parse("tokentap_requests_total 3\n").is_none());
    }
}
