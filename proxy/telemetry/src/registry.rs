//! The metrics: OpenTelemetry SDK instruments made from the metric table, read by the Prometheus
//! endpoint and by the OTLP metric export alike (two cumulative readers of one meter provider),
//! so both show the same numbers.
//!
//! Label values come partly from requests (the model name), so they are capped in front of the SDK:
//! per metric at most [`MAX_MODELS_PER_METRIC`] distinct model names, and at most
//! `max_series_per_metric` label sets; past either cap, new ones are folded into the series whose
//! model is `_OTHER` (and counted). Counters kept elsewhere (the record pipeline's drops, the export counters) are
//! observable counters, read when a reader collects.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use std::time::Duration;

use opentelemetry::metrics::{
    BoundCounter, BoundHistogram, Counter, Histogram, Meter, MeterProvider as _, ObservableCounter,
};
use opentelemetry::KeyValue;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{
    Instrument as SdkInstrument, InstrumentKind, ManualReader, Pipeline, SdkMeterProvider, Stream, Temporality,
};
use opentelemetry_sdk::Resource;

use crate::conventions::{attr, Instrument, Labels, MetricDef, MetricId, Observation, METRICS};
use crate::spool::Signal;
use crate::stats::PipelineCounters;
use crate::stats::{DropReason, ExportStats};

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

/// One series of a snapshot: attribute key → value, sorted by key.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesSnapshot {
    pub labels: Vec<(String, String)>,
    pub value: SeriesValue,
}

/// One metric of a snapshot.
#[derive(Debug, Clone)]
pub struct MetricSnapshot {
    pub def: &'static MetricDef,
    pub series: Vec<SeriesSnapshot>,
}

/// A cumulative `ManualReader` the registry keeps a handle on after giving it to the provider.
#[derive(Debug, Clone)]
struct SharedReader(Arc<ManualReader>);

impl SharedReader {
    fn new() -> SharedReader {
        SharedReader(Arc::new(ManualReader::builder().with_temporality(Temporality::Cumulative).build()))
    }
}

impl MetricReader for SharedReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline)
    }
    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

enum Recorder {
    Histogram(Histogram<f64>),
    Counter(Counter<u64>),
    /// Observed from counters kept elsewhere, by the callback registered with the instrument.
    Observed,
}

/// Distinct model names kept per metric; later ones are recorded as model `_OTHER`. Clients choose
/// the model name, and every one multiplies the series of every metric (histograms most).
pub const MAX_MODELS_PER_METRIC: usize = 100;

/// The model value label sets are folded into.
pub const OTHER: &str = "_OTHER";

/// A series' instrument bound to its attributes (the SDK's bound instruments): recording through
/// it skips the SDK's per-call attribute lookup (hashing every key and value), which is most of
/// what a stream's per-gap observations cost. The handle writes to the same series an unbound
/// call with those attributes would.
#[derive(Clone)]
enum Bound {
    Histogram(BoundHistogram<f64>),
    Counter(BoundCounter<u64>),
    Observed,
}

impl Bound {
    fn record(&self, value: f64) {
        match self {
            Bound::Histogram(h) => h.record(value),
            Bound::Counter(c) => c.add(value.round() as u64),
            Bound::Observed => {}
        }
    }
}

impl fmt::Debug for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Bound::Histogram(_) => "Bound::Histogram",
            Bound::Counter(_) => "Bound::Counter",
            Bound::Observed => "Bound::Observed",
        })
    }
}

/// The label sets (each with its bound series) and model names seen per metric, for the caps;
/// `metrics` is indexed by [`MetricId`].
#[derive(Debug)]
struct SeriesCap {
    metrics: Vec<MetricSeries>,
    folded: u64,
    /// Keys the label sets' hashes (a label set's hash is taken once per record, not per metric):
    /// foldhash, seeded per process. SipHash (std's) took ~1,300 instructions a label set, a
    /// handful of sets a record; the hash only finds a series, the label sets are compared.
    hasher: foldhash::quality::RandomState,
}

impl SeriesCap {
    fn new() -> SeriesCap {
        SeriesCap {
            metrics: METRICS.iter().map(|_| MetricSeries::default()).collect(),
            folded: 0,
            hasher: foldhash::quality::RandomState::default(),
        }
    }
}

/// One metric's admitted label sets, found by their keyed hash, each with its bound series.
#[derive(Debug, Default)]
struct MetricSeries {
    by_hash: HashMap<u64, Vec<(Labels, Bound)>, BuildHasherDefault<PreHashed>>,
    count: usize,
    models: HashSet<String>,
}

impl MetricSeries {
    fn get(&self, hash: u64, labels: &Labels) -> Option<&Bound> {
        self.by_hash.get(&hash)?.iter().find(|(l, _)| l == labels).map(|(_, bound)| bound)
    }

    fn insert(&mut self, hash: u64, labels: Labels, bound: Bound) {
        self.by_hash.entry(hash).or_default().push((labels, bound));
        self.count += 1;
    }
}

/// The map's keys are hashes already, seeded per process (of label sets a client partly chooses,
/// so not predictable to it): used as they are.
#[derive(Default)]
struct PreHashed(u64);

impl Hasher for PreHashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Where the observable counters read from.
pub struct ObservedSources {
    pub pipeline: Arc<dyn PipelineCounters>,
    pub stats: Arc<ExportStats>,
}

/// The metric instruments and their readers.
pub struct MetricRegistry {
    /// Kept for the instruments' lifetime (dropping the last handle shuts the readers down).
    _provider: SdkMeterProvider,
    /// Indexed by `MetricId as usize`.
    recorders: Vec<Recorder>,
    /// The observable counters' handles, kept with the provider.
    _observed: Vec<ObservableCounter<u64>>,
    prometheus: SharedReader,
    otlp: Option<SharedReader>,
    cap: Mutex<SeriesCap>,
    max_series_per_metric: usize,
}

impl fmt::Debug for MetricRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricRegistry")
            .field("max_series_per_metric", &self.max_series_per_metric)
            .field("otlp", &self.otlp.is_some())
            .finish_non_exhaustive()
    }
}

/// The SDK's attributes for a label set. Values are reference-counted strings: one record's
/// attributes are cloned for each of its metrics, and a clone is then a count, not a copy.
fn key_values(labels: &Labels) -> Vec<KeyValue> {
    labels.iter().map(|(k, v)| KeyValue::new(*k, opentelemetry::Value::from(Arc::<str>::from(v.as_str())))).collect()
}

/// The current value of one of the counters kept elsewhere, per label set.
fn observed_values(id: MetricId, sources: &ObservedSources) -> Vec<(u64, Vec<KeyValue>)> {
    use std::sync::atomic::Ordering::Relaxed;
    if id == MetricId::RecordsDropped {
        return vec![(sources.pipeline.records_dropped(), Vec::new())];
    }
    if id == MetricId::RecordsShed {
        return vec![(sources.pipeline.records_shed(), Vec::new())];
    }
    if id == MetricId::ConnectionsRefused {
        let refused = sources.pipeline.connections_refused();
        return [
            ("over_capacity", refused.over_capacity),
            ("over_client_share", refused.over_client_share),
            ("head_timeout", refused.head_timeout),
        ]
        .into_iter()
        .map(|(reason, n)| (n, vec![KeyValue::new(attr::DROP_REASON, reason)]))
        .collect();
    }
    let mut out = Vec::new();
    for (signal, c) in [(Signal::Traces, &sources.stats.spans), (Signal::Metrics, &sources.stats.metric_points)] {
        let signal_kv = KeyValue::new(attr::SIGNAL, signal.as_str());
        match id {
            MetricId::TelemetryExported => out.push((c.exported.load(Relaxed), vec![signal_kv])),
            MetricId::TelemetrySpooled => out.push((c.spooled.load(Relaxed), vec![signal_kv])),
            MetricId::TelemetryDropped => {
                for (reason, counter) in [
                    (DropReason::QueueFull, &c.dropped_queue_full),
                    (DropReason::SpoolFull, &c.dropped_spool_full),
                    (DropReason::Rejected, &c.rejected),
                ] {
                    let reason_kv = KeyValue::new(attr::DROP_REASON, reason.as_str());
                    out.push((counter.load(Relaxed), vec![signal_kv.clone(), reason_kv]));
                }
            }
            _ => {}
        }
    }
    out
}

fn is_observed(id: MetricId) -> bool {
    matches!(
        id,
        MetricId::RecordsDropped
            | MetricId::RecordsShed
            | MetricId::ConnectionsRefused
            | MetricId::TelemetryExported
            | MetricId::TelemetrySpooled
            | MetricId::TelemetryDropped
    )
}

fn recorder(
    meter: &Meter,
    def: &'static MetricDef,
    sources: &Arc<ObservedSources>,
    observed: &mut Vec<ObservableCounter<u64>>,
) -> Recorder {
    match def.instrument {
        Instrument::Histogram(bounds) => Recorder::Histogram(
            meter
                .f64_histogram(def.name)
                .with_unit(def.unit)
                .with_description(def.description)
                .with_boundaries(bounds.to_vec())
                .build(),
        ),
        Instrument::Counter if is_observed(def.id) => {
            let sources = sources.clone();
            let id = def.id;
            observed.push(
                meter
                    .u64_observable_counter(def.name)
                    .with_unit(def.unit)
                    .with_description(def.description)
                    .with_callback(move |observer| {
                        for (value, attributes) in observed_values(id, &sources) {
                            observer.observe(value, &attributes);
                        }
                    })
                    .build(),
            );
            Recorder::Observed
        }
        Instrument::Counter => {
            Recorder::Counter(meter.u64_counter(def.name).with_unit(def.unit).with_description(def.description).build())
        }
    }
}

impl MetricRegistry {
    /// The instruments of the metric table, with a reader for `/metrics` and, when `otlp` is
    /// given (the resource of the exports), one for the OTLP export.
    pub fn new(max_series_per_metric: usize, otlp: Option<Resource>, sources: ObservedSources) -> Self {
        let max_series_per_metric = max_series_per_metric.max(1);
        let prometheus = SharedReader::new();
        let otlp_reader = otlp.as_ref().map(|_| SharedReader::new());
        // Room for the capped series and the `_OTHER` ones they fold into.
        let cardinality_limit = max_series_per_metric.saturating_mul(2).max(2000);
        let mut builder =
            SdkMeterProvider::builder().with_reader(prometheus.clone()).with_view(move |_: &SdkInstrument| {
                Stream::builder().with_cardinality_limit(cardinality_limit).build().ok()
            });
        if let Some(reader) = &otlp_reader {
            builder = builder.with_reader(reader.clone());
        }
        if let Some(resource) = otlp {
            builder = builder.with_resource(resource);
        }
        let provider = builder.build();
        let meter = provider.meter_with_scope(crate::spans::scope());
        let sources = Arc::new(sources);
        let mut observed = Vec::new();
        let recorders = METRICS.iter().map(|def| recorder(&meter, def, &sources, &mut observed)).collect();
        MetricRegistry {
            _provider: provider,
            recorders,
            _observed: observed,
            prometheus,
            otlp: otlp_reader,
            cap: Mutex::new(SeriesCap::new()),
            max_series_per_metric,
        }
    }

    /// The series to record `labels` under, bound: its own, or past a cap its `_OTHER` fold
    /// (`true`). Only label sets the caps admit are kept, so the bound series are as bounded as
    /// the series themselves.
    fn series(&self, cap: &mut SeriesCap, metric: MetricId, labels: &Labels, hash: u64) -> (Bound, bool) {
        let fold = |labels: &Labels| -> Labels {
            labels
                .iter()
                .map(|(k, v)| (*k, if *k == attr::REQUEST_MODEL { OTHER.to_string() } else { v.clone() }))
                .collect()
        };
        let series = &mut cap.metrics[metric as usize];
        let new_model = labels.iter().find(|(k, _)| *k == attr::REQUEST_MODEL).is_some_and(|(_, model)| {
            let models = &mut series.models;
            if models.contains(model) || model == OTHER {
                false
            } else if models.len() < MAX_MODELS_PER_METRIC {
                models.insert(model.clone());
                false
            } else {
                true
            }
        });
        if !new_model {
            if let Some(bound) = series.get(hash, labels) {
                return (bound.clone(), false);
            }
            if series.count < self.max_series_per_metric {
                let bound = self.bind(metric, labels);
                series.insert(hash, labels.clone(), bound.clone());
                return (bound, false);
            }
        }
        let folded = fold(labels);
        let folded_hash = cap.hasher.hash_one(&folded);
        cap.folded += 1;
        let series = &mut cap.metrics[metric as usize];
        let bound = match series.get(folded_hash, &folded) {
            Some(bound) => bound.clone(),
            None => {
                let bound = self.bind(metric, &folded);
                series.insert(folded_hash, folded, bound.clone());
                bound
            }
        };
        (bound, true)
    }

    fn bind(&self, metric: MetricId, labels: &Labels) -> Bound {
        let attributes = key_values(labels);
        match &self.recorders[metric as usize] {
            Recorder::Histogram(h) => Bound::Histogram(h.bind(&attributes)),
            Recorder::Counter(c) => Bound::Counter(c.bind(&attributes)),
            Recorder::Observed => Bound::Observed,
        }
    }

    /// Adds observations (one record's worth, typically). A label set shared by several
    /// observations (one `Arc`) is checked against the caps once per metric and its series
    /// found once: a stream's gaps all carry the record's labels.
    pub fn record(&self, observations: &[Observation]) {
        // (metric, label set) → its bound series, and whether it is a fold into `_OTHER`; a
        // record has a handful.
        let mut resolved: Vec<(MetricId, *const Labels, Bound, bool)> = Vec::with_capacity(observations.len());
        // Label set → its keyed hash, taken once: a record's metrics share one or two sets.
        let mut hashes: Vec<(*const Labels, u64)> = Vec::with_capacity(4);
        let mut cap = None;
        for o in observations {
            let ptr = Arc::as_ptr(&o.labels);
            let cap = cap.get_or_insert_with(|| self.cap.lock());
            let at = match resolved.iter().position(|(m, p, ..)| *m == o.metric && std::ptr::eq(*p, ptr)) {
                Some(i) => {
                    // Counted per observation, as when each was checked on its own.
                    cap.folded += u64::from(resolved[i].3);
                    i
                }
                None => {
                    let hash = match hashes.iter().find(|(p, _)| std::ptr::eq(*p, ptr)) {
                        Some((_, hash)) => *hash,
                        None => {
                            let hash = cap.hasher.hash_one(&*o.labels);
                            hashes.push((ptr, hash));
                            hash
                        }
                    };
                    let (bound, folded) = self.series(cap, o.metric, &o.labels, hash);
                    resolved.push((o.metric, ptr, bound, folded));
                    resolved.len() - 1
                }
            };
            resolved[at].2.record(o.value);
        }
    }

    /// Adds to a counter (or observes a histogram value) directly.
    pub fn add(&self, metric: MetricId, labels: &Labels, value: f64) {
        self.record(&[Observation { metric, labels: Arc::new(labels.clone()), value }]);
    }

    /// Observations folded into `_OTHER` series because of the series cap.
    pub fn folded(&self) -> u64 {
        self.cap.lock().folded
    }

    /// What the OTLP reader collects now; `None` without an OTLP export.
    pub(crate) fn collect_otlp(&self) -> Option<ResourceMetrics> {
        let reader = self.otlp.as_ref()?;
        let mut rm = ResourceMetrics::default();
        match reader.collect(&mut rm) {
            Ok(()) => Some(rm),
            Err(e) => {
                tracing::warn!(error = %e, "collecting metrics for OTLP failed");
                None
            }
        }
    }

    /// Every metric of the table, in table order, with its series sorted by labels.
    pub fn snapshot(&self) -> Vec<MetricSnapshot> {
        let mut rm = ResourceMetrics::default();
        if let Err(e) = self.prometheus.collect(&mut rm) {
            tracing::warn!(error = %e, "collecting metrics failed");
        }
        let mut by_name: HashMap<String, Vec<SeriesSnapshot>> = HashMap::new();
        for sm in rm.scope_metrics() {
            for m in sm.metrics() {
                by_name.entry(m.name().to_string()).or_default().extend(series_of(m.data()));
            }
        }
        METRICS
            .iter()
            .map(|def| {
                let mut series = by_name.remove(def.name).unwrap_or_default();
                series.sort_by(|a, b| a.labels.cmp(&b.labels));
                MetricSnapshot { def, series }
            })
            .collect()
    }
}

fn labels_of<'a>(attributes: impl Iterator<Item = &'a KeyValue>) -> Vec<(String, String)> {
    let mut labels: Vec<(String, String)> =
        attributes.map(|kv| (kv.key.as_str().to_string(), kv.value.as_str().into_owned())).collect();
    labels.sort();
    labels
}

/// Data points of histograms (f64) and counters (u64), the only kinds the table has.
fn series_of(data: &AggregatedMetrics) -> Vec<SeriesSnapshot> {
    match data {
        AggregatedMetrics::F64(MetricData::Histogram(h)) => h
            .data_points()
            .map(|dp| SeriesSnapshot {
                labels: labels_of(dp.attributes()),
                value: SeriesValue::Histogram {
                    bucket_counts: dp.bucket_counts().collect(),
                    sum: dp.sum(),
                    count: dp.count(),
                    min: dp.min().unwrap_or(f64::INFINITY),
                    max: dp.max().unwrap_or(f64::NEG_INFINITY),
                },
            })
            .collect(),
        AggregatedMetrics::U64(MetricData::Sum(s)) => s
            .data_points()
            .map(|dp| SeriesSnapshot { labels: labels_of(dp.attributes()), value: SeriesValue::Counter(dp.value()) })
            .collect(),
        _ => Vec::new(),
    }
}

/// Data points in a collection (the items counted for the export counters).
pub(crate) fn data_points(rm: &ResourceMetrics) -> u64 {
    let mut n = 0usize;
    for sm in rm.scope_metrics() {
        for m in sm.metrics() {
            n += match m.data() {
                AggregatedMetrics::F64(MetricData::Histogram(h)) => h.data_points().count(),
                AggregatedMetrics::U64(MetricData::Sum(s)) => s.data_points().count(),
                AggregatedMetrics::F64(MetricData::Sum(s)) => s.data_points().count(),
                AggregatedMetrics::I64(MetricData::Sum(s)) => s.data_points().count(),
                _ => 0,
            };
        }
    }
    n as u64
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    struct NoPipeline;
    impl PipelineCounters for NoPipeline {
        fn records_dropped(&self) -> u64 {
            7
        }
        fn records_shed(&self) -> u64 {
            3
        }
    }

    pub(crate) fn registry(max_series: usize) -> MetricRegistry {
        MetricRegistry::new(
            max_series,
            None,
            ObservedSources { pipeline: Arc::new(NoPipeline), stats: Arc::new(ExportStats::default()) },
        )
    }

    #[test]
    fn histogram_buckets_have_inclusive_upper_bounds() {
        let registry = registry(10);
        // TTFT_BUCKETS start 0.001, 0.005, 0.01.
        for v in [0.0005, 0.001, 0.002, 0.005, 100.0] {
            registry.add(MetricId::TtftAnswer, &vec![], v);
        }
        let snapshot = registry.snapshot();
        let SeriesValue::Histogram { bucket_counts, .. } = &snapshot[MetricId::TtftAnswer as usize].series[0].value
        else {
            panic!("not a histogram")
        };
        assert_eq!(&bucket_counts[..3], &[2, 2, 0]);
        assert_eq!(*bucket_counts.last().unwrap(), 1);
    }

    /// Per-gap values go through a bound series: both readers (`/metrics` and the OTLP export)
    /// must see every value of every record, recorded under the record's attributes.
    #[test]
    fn bound_series_reach_both_readers_across_records() {
        let registry = MetricRegistry::new(
            10,
            Some(Resource::builder_empty().build()),
            ObservedSources { pipeline: Arc::new(NoPipeline), stats: Arc::new(ExportStats::default()) },
        );
        for record in 0..3 {
            let labels: crate::conventions::SharedLabels =
                Arc::new(vec![(attr::REQUEST_MODEL, "m".to_string()), (attr::ROUTE, "/".to_string())]);
            let gaps: Vec<Observation> = (0..40)
                .map(|i| Observation {
                    metric: MetricId::TimePerOutputChunk,
                    labels: labels.clone(),
                    value: f64::from(record * 40 + i) / 1000.0,
                })
                .collect();
            registry.record(&gaps);
        }
        let snapshot = registry.snapshot();
        let series = &snapshot[MetricId::TimePerOutputChunk as usize].series;
        assert_eq!(series.len(), 1);
        let expected =
            vec![(attr::REQUEST_MODEL.to_string(), "m".to_string()), (attr::ROUTE.to_string(), "/".to_string())];
        assert_eq!(series[0].labels, expected);
        let SeriesValue::Histogram { count, max, .. } = series[0].value else { panic!("not a histogram") };
        assert_eq!((count, max), (120, 0.119));
        let otlp = registry.collect_otlp().expect("an OTLP reader");
        let points: Vec<(u64, Vec<(String, String)>)> = otlp
            .scope_metrics()
            .flat_map(|sm| sm.metrics())
            .filter(|m| m.name() == METRICS[MetricId::TimePerOutputChunk as usize].name)
            .flat_map(|m| match m.data() {
                AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                    h.data_points().map(|dp| (dp.count(), labels_of(dp.attributes()))).collect::<Vec<_>>()
                }
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(points, [(120, expected)]);
    }

    #[test]
    fn label_sets_with_one_hash_stay_apart() {
        let mut series = MetricSeries::default();
        let a: Labels = vec![(attr::ROUTE, "/a".to_string())];
        let b: Labels = vec![(attr::ROUTE, "/b".to_string())];
        series.insert(7, a.clone(), Bound::Observed);
        assert!(series.get(7, &b).is_none(), "same hash, other labels: not found");
        series.insert(7, b.clone(), Bound::Observed);
        assert!(series.get(7, &a).is_some() && series.get(7, &b).is_some() && series.get(8, &a).is_none());
        assert_eq!(series.count, 2);
    }

    #[test]
    fn series_are_capped_and_folded() {
        let registry = registry(2);
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
    fn a_shared_label_set_is_folded_per_metric() {
        // One series per metric: `Requests` already has model "a", `Stalls` has none yet.
        let registry = registry(1);
        registry.add(MetricId::Requests, &vec![(attr::REQUEST_MODEL, "a".to_string())], 1.0);
        let shared: crate::conventions::SharedLabels = Arc::new(vec![(attr::REQUEST_MODEL, "b".to_string())]);
        let observation = |metric| Observation { metric, labels: shared.clone(), value: 1.0 };
        registry.record(&[
            observation(MetricId::Requests),
            observation(MetricId::Stalls),
            observation(MetricId::Requests),
            observation(MetricId::Stalls),
        ]);
        let snapshot = registry.snapshot();
        let series = |id: MetricId| -> Vec<(String, SeriesValue)> {
            let metric = snapshot.iter().find(|m| m.def.id == id).unwrap();
            metric.series.iter().map(|s| (s.labels[0].1.clone(), s.value.clone())).collect()
        };
        assert_eq!(
            series(MetricId::Requests),
            [(OTHER.to_string(), SeriesValue::Counter(2)), ("a".to_string(), SeriesValue::Counter(1))]
        );
        assert_eq!(series(MetricId::Stalls).len(), 1);
        assert_eq!(series(MetricId::Stalls)[0].0, "b");
        assert_eq!(registry.folded(), 2);
    }

    #[test]
    fn model_names_are_capped_per_metric() {
        let registry = registry(100_000);
        for i in 0..(MAX_MODELS_PER_METRIC + 50) {
            let labels = vec![(attr::REQUEST_MODEL, format!("model-{i}")), (attr::ROUTE, "/".to_string())];
            registry.add(MetricId::Requests, &labels, 1.0);
            registry.add(MetricId::Requests, &labels, 1.0);
        }
        // A model seen before the cap keeps its series.
        registry.add(
            MetricId::Requests,
            &vec![(attr::REQUEST_MODEL, "model-0".into()), (attr::ROUTE, "/".into())],
            1.0,
        );
        let snapshot = registry.snapshot();
        let requests = snapshot.iter().find(|m| m.def.id == MetricId::Requests).unwrap();
        let model_of = |s: &SeriesSnapshot| s.labels.iter().find(|(k, _)| k == attr::REQUEST_MODEL).unwrap().1.clone();
        let models: HashSet<String> = requests.series.iter().map(model_of).collect();
        assert_eq!(models.len(), MAX_MODELS_PER_METRIC + 1);
        assert!(models.contains(OTHER) && models.contains("model-99") && !models.contains("model-100"));
        let other = requests.series.iter().find(|s| model_of(s) == OTHER).unwrap();
        assert_eq!(other.value, SeriesValue::Counter(100));
        let first = requests.series.iter().find(|s| model_of(s) == "model-0").unwrap();
        assert_eq!(first.value, SeriesValue::Counter(3));
        assert_eq!(registry.folded(), 100);
    }

    #[test]
    fn snapshot_lists_every_metric_of_the_table() {
        let registry = registry(10);
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
        // The counters kept elsewhere are observed: records dropped, and every export counter.
        let dropped = &snapshot[MetricId::RecordsDropped as usize];
        assert_eq!(dropped.series, vec![SeriesSnapshot { labels: vec![], value: SeriesValue::Counter(7) }]);
        assert_eq!(snapshot[MetricId::TelemetryDropped as usize].series.len(), 6);
    }
}
