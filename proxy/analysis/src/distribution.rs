//! Percentiles the way docs/metrics.md asks for them: numpy's default linear interpolation between
//! closest ranks, always reported together with the sample count and the maximum.

use serde::{Deserialize, Serialize};

/// Summary of a set of samples (milliseconds for time distributions, tokens for `tokens_per_chunk`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// Number of samples observed (may exceed the number kept for percentiles, see docs/metrics.md).
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Distribution {
    /// Summarises `samples` (any order). `None` when there are no samples, because a distribution of
    /// nothing has no percentiles, and zero would be a lie.
    pub fn from_samples(samples: &[f64]) -> Option<Self> {
        // Sized once: a filtered iterator's collect grows the vector by doubling.
        let mut sorted: Vec<f64> = Vec::with_capacity(samples.len());
        sorted.extend(samples.iter().copied().filter(|v| !v.is_nan()));
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        Some(Self::from_sorted(&sorted, sorted.len() as u64))
    }

    /// Like [`Distribution::from_samples`] for already sorted samples, with an explicit observed count
    /// (used when percentiles come from a bounded sample of a larger population).
    pub(crate) fn from_sorted(sorted: &[f64], count: u64) -> Self {
        Distribution {
            count,
            p50: percentile(sorted, 50.0),
            p90: percentile(sorted, 90.0),
            p95: percentile(sorted, 95.0),
            p99: percentile(sorted, 99.0),
            max: sorted.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// The `q`-th percentile (`q` in 0..=100, like `numpy.percentile`) of ascending `sorted_samples`,
/// interpolating linearly between the two closest ranks. Returns NaN for an empty slice; `q` outside
/// 0..=100 is clamped.
pub fn percentile(sorted_samples: &[f64], q: f64) -> f64 {
    let n = sorted_samples.len();
    if n == 0 {
        return f64::NAN;
    }
    let q = if q.is_nan() { 50.0 } else { q.clamp(0.0, 100.0) };
    let position = q / 100.0 * (n - 1) as f64;
    let lower = position.floor() as usize;
    let upper = position.ceil() as usize;
    let (lo, hi) = (sorted_samples[lower.min(n - 1)], sorted_samples[upper.min(n - 1)]);
    lo + (hi - lo) * (position - lower as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_numpy_linear() {
        // numpy.percentile([1, 2, 3, 4], [50, 90, 99]) == [2.5, 3.7, 3.97]
        let s = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&s, 50.0), 2.5);
        assert!((percentile(&s, 90.0) - 3.7).abs() < 1e-12);
        assert!((percentile(&s, 99.0) - 3.97).abs() < 1e-12);
        assert_eq!(percentile(&s, 0.0), 1.0);
        assert_eq!(percentile(&s, 100.0), 4.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert!(percentile(&[], 50.0).is_nan());
    }

    #[test]
    fn distribution_sorts_and_counts() {
        let d = Distribution::from_samples(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(d.count, 4);
        assert_eq!(d.p50, 2.5);
        assert_eq!(d.max, 4.0);
        assert!(Distribution::from_samples(&[]).is_none());
    }
}
