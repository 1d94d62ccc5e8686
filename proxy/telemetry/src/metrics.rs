//! The metric state both exporters read (OTLP on its interval, Prometheus on a scrape).

use std::sync::Arc;

use crate::conventions::Objectives;
use crate::registry::{MetricRegistry, MetricSnapshot};
use crate::stats::ExportStats;

pub use crate::stats::PipelineCounters;

/// The metric state both exporters read: the registry (whose observable counters read the
/// pipeline's and the export's counters), the objectives, this process's identity.
pub struct Metrics {
    pub(crate) registry: MetricRegistry,
    pub(crate) objectives: Objectives,
    pub stats: Arc<ExportStats>,
    /// `service.instance.id` of this process.
    pub instance_id: String,
}

impl Metrics {
    /// The metrics, with the counters kept elsewhere (record pipeline, export) brought up to date.
    pub fn snapshot(&self) -> Vec<MetricSnapshot> {
        self.registry.snapshot()
    }
}
