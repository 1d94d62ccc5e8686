//! The metric state both exporters read (OTLP on its interval, Prometheus on a scrape).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::conventions::{attr, Labels, MetricId, Objectives};
use crate::registry::{MetricRegistry, MetricSnapshot};
use crate::spool::Signal;
use crate::stats::{DropReason, ExportStats};

/// Counters kept by the record pipeline that the metrics report (`tokentap.records.dropped`).
pub trait PipelineCounters: Send + Sync {
    /// Records dropped because the pipeline's queue was full.
    fn records_dropped(&self) -> u64;
}

/// The metric state both exporters read: the registry, the counters kept elsewhere, this
/// process's identity.
pub struct Metrics {
    pub(crate) registry: MetricRegistry,
    pub(crate) objectives: Objectives,
    pub(crate) pipeline: Arc<dyn PipelineCounters>,
    pub stats: ExportStats,
    /// Start of the cumulative metrics, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// `service.instance.id` of this process.
    pub instance_id: String,
}

impl Metrics {
    /// The metrics, with the counters kept elsewhere (record pipeline, export) brought up to date.
    pub fn snapshot(&self) -> Vec<MetricSnapshot> {
        let dropped = self.pipeline.records_dropped();
        self.registry.set_counter(MetricId::RecordsDropped, &Vec::new(), dropped);
        for (signal, counters) in [(Signal::Traces, &self.stats.spans), (Signal::Metrics, &self.stats.metric_points)] {
            let labels: Labels = vec![(attr::SIGNAL, signal.as_str().to_string())];
            self.registry.set_counter(MetricId::TelemetryExported, &labels, counters.exported.load(Ordering::Relaxed));
            self.registry.set_counter(MetricId::TelemetrySpooled, &labels, counters.spooled.load(Ordering::Relaxed));
            for (reason, counter) in [
                (DropReason::QueueFull, &counters.dropped_queue_full),
                (DropReason::SpoolFull, &counters.dropped_spool_full),
                (DropReason::Rejected, &counters.rejected),
            ] {
                let mut labels = labels.clone();
                labels.push((attr::DROP_REASON, reason.as_str().to_string()));
                self.registry.set_counter(MetricId::TelemetryDropped, &labels, counter.load(Ordering::Relaxed));
            }
        }
        self.registry.snapshot()
    }
}
