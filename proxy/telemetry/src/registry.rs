//! The aggregated metrics: cumulative histograms and counters per label set, fed by the finalize
//! worker and read by the Prometheus endpoint and the OTLP metric export alike, so both show the
//! same numbers.
//!
//! Label values come partly from requests (the model name), so the number of series per metric is
//! capped: past the cap, new label sets are folded into one series whose model is `_OTHER`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use crate::conventions::{attr, Instrument, Labels, MetricDef, MetricId, Observation, METRICS};

/// A series' state.
#[derive(Debug, Clone, PartialEq)]
pub enum SeriesValue {
    Counter(u64),
    Histogram {
        /// Per bucket (not cumulative); one more entry than the metric has boundaries (+Inf).
        bucket_counts: Vec<u64>,
        sum: f64,
        count: u64,
        min: f64,
        max: f64,
    },
}

/// One series of a snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesSnapshot {
    pub labels: Labels,
    pub value: SeriesValue,
}

/// One metric of a snapshot.
#[derive(Debug, Clone)]
pub struct MetricSnapshot {
    pub def: &'static MetricDef,
    pub series: Vec<SeriesSnapshot>,
}

#[derive(Debug, Default)]
struct Inner {
    series: HashMap<MetricId, BTreeMap<Labels, SeriesValue>>,
    folded: u64,
}

/// The metric store.
#[derive(Debug)]
pub struct MetricRegistry {
    inner: Mutex<Inner>,
    max_series_per_metric: usize,
}

fn new_value(def: &MetricDef) -> SeriesValue {
    match def.instrument {
        Instrument::Counter => SeriesValue::Counter(0),
        Instrument::Histogram(bounds) => SeriesValue::Histogram {
            bucket_counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        },
    }
}

/// Index of the bucket `value` falls in: the first boundary it does not exceed (upper bounds are
/// inclusive, as in both OTLP and Prometheus), or the last (+Inf) bucket.
pub fn bucket_index(bounds: &[f64], value: f64) -> usize {
    bounds.iter().position(|b| value <= *b).unwrap_or(bounds.len())
}

impl MetricRegistry {
    pub fn new(max_series_per_metric: usize) -> Self {
        Self { inner: Mutex::new(Inner::default()), max_series_per_metric: max_series_per_metric.max(1) }
    }

    /// Adds observations (one record's worth, typically) under one lock.
    pub fn record(&self, observations: &[Observation]) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for o in observations {
            Self::add_locked(&mut inner, self.max_series_per_metric, o.metric, &o.labels, o.value);
        }
    }

    /// Adds to a counter (or observes a histogram value) directly.
    pub fn add(&self, metric: MetricId, labels: &Labels, value: f64) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        Self::add_locked(&mut inner, self.max_series_per_metric, metric, labels, value);
    }

    fn add_locked(inner: &mut Inner, max_series: usize, metric: MetricId, labels: &Labels, value: f64) {
        let def = metric.def();
        let series = inner.series.entry(metric).or_default();
        let key = if series.contains_key(labels) || series.len() < max_series {
            labels.clone()
        } else {
            // Over the cap: fold into one series per metric whose model is `_OTHER`.
            let folded: Labels = labels
                .iter()
                .map(|(k, v)| (*k, if *k == attr::REQUEST_MODEL { "_OTHER".to_string() } else { v.clone() }))
                .collect();
            inner.folded += 1;
            folded
        };
        let entry = series.entry(key).or_insert_with(|| new_value(def));
        match (entry, def.instrument) {
            (SeriesValue::Counter(c), _) => *c = c.saturating_add(value.round() as u64),
            (SeriesValue::Histogram { bucket_counts, sum, count, min, max }, Instrument::Histogram(bounds)) => {
                bucket_counts[bucket_index(bounds, value)] += 1;
                *sum += value;
                *count += 1;
                *min = min.min(value);
                *max = max.max(value);
            }
            (SeriesValue::Histogram { .. }, Instrument::Counter) => {}
        }
    }

    /// Sets a counter to an absolute value kept elsewhere (for example the finalize queue's drop
    /// counter). Counters only go up; a smaller value is ignored.
    pub fn set_counter(&self, metric: MetricId, labels: &Labels, value: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let entry = inner.series.entry(metric).or_default().entry(labels.clone()).or_insert(SeriesValue::Counter(0));
        if let SeriesValue::Counter(c) = entry {
            *c = (*c).max(value);
        }
    }

    /// Observations folded into `_OTHER` series because of the series cap.
    pub fn folded(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).folded
    }

    /// Every metric of the table, in table order, with its series sorted by labels.
    pub fn snapshot(&self) -> Vec<MetricSnapshot> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        METRICS
            .iter()
            .map(|def| MetricSnapshot {
                def,
                series: inner
                    .series
                    .get(&def.id)
                    .map(|s| {
                        s.iter()
                            .map(|(labels, value)| SeriesSnapshot { labels: labels.clone(), value: value.clone() })
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_have_inclusive_upper_bounds() {
        let bounds = [0.1, 0.5, 1.0];
        assert_eq!(bucket_index(&bounds, 0.05), 0);
        assert_eq!(bucket_index(&bounds, 0.1), 0);
        assert_eq!(bucket_index(&bounds, 0.2), 1);
        assert_eq!(bucket_index(&bounds, 1.0), 2);
        assert_eq!(bucket_index(&bounds, 7.0), 3);
    }

    #[test]
    fn series_are_capped_and_folded() {
        let registry = MetricRegistry::new(2);
        for model in ["a", "b", "c", "d"] {
            let labels = vec![(attr::REQUEST_MODEL, model.to_string())];
            registry.add(MetricId::Requests, &labels, 1.0);
        }
        let snapshot = registry.snapshot();
        let requests = snapshot.iter().find(|m| m.def.id == MetricId::Requests).unwrap();
        let models: Vec<&str> = requests.series.iter().map(|s| s.labels[0].1.as_str()).collect();
        assert_eq!(models, ["_OTHER", "a", "b"]);
        assert_eq!(requests.series[0].value, SeriesValue::Counter(2));
        assert_eq!(registry.folded(), 2);
    }

    #[test]
    fn snapshot_lists_every_metric_of_the_table() {
        let registry = MetricRegistry::new(10);
        registry.add(MetricId::TtftAnswer, &vec![], 0.3);
        registry.add(MetricId::TtftAnswer, &vec![], 0.7);
        let snapshot = registry.snapshot();
        assert_eq!(snapshot.len(), METRICS.len());
        let ttft = &snapshot[MetricId::TtftAnswer as usize];
        match &ttft.series[0].value {
            SeriesValue::Histogram { count, sum, min, max, bucket_counts } => {
                assert_eq!(*count, 2);
                assert!((sum - 1.0).abs() < 1e-9);
                assert_eq!((*min, *max), (0.3, 0.7));
                assert_eq!(bucket_counts.iter().sum::<u64>(), 2);
            }
            other => panic!("{other:?}"),
        }
    }
}
