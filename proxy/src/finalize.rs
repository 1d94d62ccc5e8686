//! Off the forwarding path: completed requests go through a bounded queue to one worker thread
//! that runs the analysis, builds the [`Record`] and hands it to the store.
//!
//! Architecture invariant: submitting never blocks. When the queue is full the request's record is
//! dropped and counted; traffic is never slowed down by analysis or disk writes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokentap_analysis::{analyze_request, percentile, AnalysisLimits, RequestTiming, StreamAnalyzer, StreamContext};

use crate::ack::AckTracker;
use crate::browser::ProbeReport;
use crate::config::ValidConfig;
use crate::export::Telemetry;
use crate::proxy::RequestCtx;
use crate::record::{CapturedContent, Conditions, ErrorInfo, Outcome, Record, SelfOverhead, TimelineRecord};
use crate::route::{Route, RouteRole};
use crate::store::RecordStore;
use crate::timeline::{Anchor, CapturedBody, ChunkTimeline, UpstreamConnection};
use crate::trace::TraceContext;

/// Everything the worker needs, moved out of the request context when the request ends.
pub struct CompletedRequest {
    anchor: Anchor,
    request_id: String,
    trace: Option<TraceContext>,
    route: Option<Arc<Route>>,
    method: String,
    path: String,
    request_headers: Vec<(String, String)>,
    request_content_type: Option<String>,
    request_body: CapturedBody,
    concurrency_at_t0: u64,
    route_request_index: u64,
    t_upstream_sent_ns: Option<u64>,
    connection: Option<UpstreamConnection>,
    t_upstream_headers_ns: Option<u64>,
    status: Option<u16>,
    response_content_type: Option<String>,
    response_content_encoding: Option<String>,
    chunks: ChunkTimeline,
    ack: AckTracker,
    upstream_eos: bool,
    t_end_ns: Option<u64>,
    hook_ns: u64,
    outcome: Outcome,
    error: Option<ErrorInfo>,
}

impl CompletedRequest {
    /// Moves the request's data out of `ctx` (cheap: vectors and `Bytes` handles move, not bytes).
    pub fn take_from(ctx: &mut RequestCtx, outcome: Outcome, error: Option<ErrorInfo>) -> Self {
        // The request reached the upstream when both its head and its body had been handed on.
        let t_upstream_sent_ns = match (ctx.t_upstream_request_ns, ctx.t_request_body_end_ns) {
            (Some(head), Some(body)) => Some(head.max(body)),
            (Some(head), None) => Some(head),
            _ => None,
        };
        let mut connection = ctx.connection.take();
        if let Some(c) = connection.as_mut() {
            c.protocol = ctx.response_protocol.clone().map(|p| match p.as_str() {
                "HTTP/2.0" => "h2".to_string(),
                "HTTP/1.1" => "http/1.1".to_string(),
                "HTTP/1.0" => "http/1.0".to_string(),
                other => other.to_ascii_lowercase(),
            });
        }
        Self {
            anchor: ctx.anchor,
            request_id: std::mem::take(&mut ctx.request_id),
            trace: ctx.trace.take(),
            route: ctx.route.clone(),
            method: std::mem::take(&mut ctx.method),
            path: std::mem::take(&mut ctx.path),
            request_headers: std::mem::take(&mut ctx.request_headers),
            request_content_type: ctx.request_content_type.take(),
            request_body: std::mem::take(&mut ctx.request_body),
            concurrency_at_t0: ctx.concurrency_at_t0,
            route_request_index: ctx.route_request_index,
            t_upstream_sent_ns,
            connection,
            t_upstream_headers_ns: ctx.t_upstream_headers_ns,
            status: ctx.status,
            response_content_type: ctx.response_content_type.take(),
            response_content_encoding: ctx.response_content_encoding.take(),
            chunks: std::mem::take(&mut ctx.chunks),
            ack: std::mem::take(&mut ctx.ack),
            upstream_eos: ctx.upstream_eos,
            t_end_ns: ctx.t_end_ns,
            hook_ns: ctx.hook_ns,
            outcome,
            error,
        }
    }
}

/// Counters of the record pipeline, shown by the admin API.
#[derive(Debug, Default)]
pub struct PipelineStats {
    pub submitted: AtomicU64,
    /// Records dropped because the queue was full.
    pub dropped: AtomicU64,
    pub written: AtomicU64,
    pub store_errors: AtomicU64,
    /// Browser probe reports accepted at ingest, joined to their record, and given up on.
    pub browser_reports: AtomicU64,
    pub browser_joined: AtomicU64,
    pub browser_unmatched: AtomicU64,
}

/// A callback that sees every finished record (the demo prints a summary line with it).
pub type RecordObserver = Box<dyn Fn(&Record) + Send + 'static>;

/// What the worker is handed.
pub enum WorkItem {
    /// A proxied request that ended.
    Request(Box<CompletedRequest>),
    /// A browser probe report to join to its request's record.
    BrowserReport(Box<ProbeReport>),
}

/// The sending side of the finalize queue, owned by the proxy.
#[derive(Clone)]
pub struct FinalizeQueue {
    tx: SyncSender<WorkItem>,
    stats: Arc<PipelineStats>,
}

impl FinalizeQueue {
    /// Hands a completed request to the worker without waiting.
    pub fn submit(&self, completed: CompletedRequest) {
        self.stats.submitted.fetch_add(1, Ordering::Relaxed);
        if self.tx.try_send(WorkItem::Request(Box::new(completed))).is_err() {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Hands a validated probe report to the worker without waiting; false when the queue is full.
    pub fn submit_report(&self, report: ProbeReport) -> bool {
        match self.tx.try_send(WorkItem::BrowserReport(Box::new(report))) {
            Ok(()) => {
                self.stats.browser_reports.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => false,
        }
    }
}

/// Starts the worker thread; returns the queue to submit to.
pub fn start(
    config: Arc<ValidConfig>,
    store: Arc<RecordStore>,
    stats: Arc<PipelineStats>,
    observer: Option<RecordObserver>,
    telemetry: Arc<Telemetry>,
) -> std::io::Result<(FinalizeQueue, JoinHandle<()>)> {
    let (tx, rx) = sync_channel(config.analysis.queue_capacity);
    let worker_stats = stats.clone();
    let handle = std::thread::Builder::new()
        .name("tokentap-finalize".into())
        .spawn(move || run_worker(rx, &config, &store, &worker_stats, observer, &telemetry))?;
    Ok((FinalizeQueue { tx, stats }, handle))
}

/// Reports whose record is not (yet) in the store, kept a little while.
const PENDING_REPORTS: usize = 256;
const PENDING_FOR: Duration = Duration::from_secs(60);

fn run_worker(
    rx: Receiver<WorkItem>,
    config: &ValidConfig,
    store: &RecordStore,
    stats: &PipelineStats,
    observer: Option<RecordObserver>,
    telemetry: &Telemetry,
) {
    let mut pending: VecDeque<(Instant, ProbeReport)> = VecDeque::new();
    while let Ok(item) = rx.recv() {
        match item {
            WorkItem::Request(completed) => {
                let record = build_record(*completed, config);
                if let Some(observe) = &observer {
                    observe(&record);
                }
                // Metrics and spans (never blocks: a full export queue drops and counts).
                telemetry.observe(&record);
                let trace_id = record.trace_id.clone();
                let chain_peer = record.route_role.map(|_| record.clone());
                match store.append(record) {
                    Ok(()) => {
                        stats.written.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        stats.store_errors.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(error = %e, "could not write a record");
                    }
                }
                // An ingress and an egress record of one user turn are joined in whichever order
                // they end (the ingress request usually ends last).
                if let Some(record) = chain_peer {
                    join_chain(&record, store, stats);
                }
                // A report that came before its record can be joined now.
                if let Some(i) = pending.iter().position(|(_, r)| r.trace_id == trace_id) {
                    if let Some((_, report)) = pending.remove(i) {
                        join_report(report, store, stats, telemetry, &mut pending);
                    }
                }
            }
            WorkItem::BrowserReport(report) => join_report(*report, store, stats, telemetry, &mut pending),
        }
        while pending.front().is_some_and(|(at, _)| at.elapsed() > PENDING_FOR) || pending.len() > PENDING_REPORTS {
            pending.pop_front();
            stats.browser_unmatched.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn join_report(
    report: ProbeReport,
    store: &RecordStore,
    stats: &PipelineStats,
    telemetry: &Telemetry,
    pending: &mut VecDeque<(Instant, ProbeReport)>,
) {
    let Some(stored) = store.find_by_trace(&report.trace_id, &report.span_id) else {
        pending.push_back((Instant::now(), report));
        return;
    };
    let mut record = stored.record.clone();
    record.browser = Some(crate::browser::join(&record, &report));
    record.diagnosis = rediagnose(&record, store);
    telemetry.observe_browser(&record);
    match store.update(record) {
        Ok(()) => {
            stats.browser_joined.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            stats.store_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "could not write a joined record");
        }
    }
}

/// The record's diagnosis: over the whole chain when an egress record is joined to it.
fn rediagnose(record: &Record, store: &RecordStore) -> Option<crate::hops::Diagnosis> {
    if let Some(egress) = record.chain.as_ref().and_then(|c| store.get(&c.egress_request_id)) {
        return crate::hops::diagnose_chain(record, &egress.record);
    }
    crate::hops::diagnose(record)
}

/// When `record` is one end of a chain (an ingress or egress route) and the other end of the same
/// trace is in the store, writes the ingress record again with the chain's diagnosis.
fn join_chain(record: &Record, store: &RecordStore, stats: &PipelineStats) {
    let Some(pair) = store.find_chain_peer(record) else { return };
    let (ingress, egress) = match record.route_role {
        Some(RouteRole::Ingress) => (record.clone(), pair.record.clone()),
        Some(RouteRole::Egress) => (pair.record.clone(), record.clone()),
        None => return,
    };
    let Some(diagnosis) = crate::hops::diagnose_chain(&ingress, &egress) else { return };
    let mut joined = ingress;
    joined.chain = Some(crate::hops::Chain {
        egress_request_id: egress.request_id.clone(),
        egress_route: egress.route.clone(),
        aligned_events: diagnosis.events,
    });
    joined.diagnosis = Some(diagnosis);
    if let Err(e) = store.update(joined) {
        stats.store_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(error = %e, "could not write a chained record");
    }
}

/// Turns a completed request into its record: runs the request and stream analysis.
pub fn build_record(mut c: CompletedRequest, config: &ValidConfig) -> Record {
    let client_delivery = (!c.chunks.chunks.is_empty() || c.ack.unavailable.is_some())
        .then(|| crate::ack::apply(&c.ack, &mut c.chunks.chunks, c.chunks.chunks_truncated));
    let request_body = c.request_body.concat();
    let request = analyze_request(&c.path, c.request_content_type.as_deref(), &request_body, c.request_body.truncated);

    let analysis = c.status.map(|status| {
        let mut limits = AnalysisLimits::default();
        limits.stall_threshold_ns = config.analysis.stall_threshold_ms * 1_000_000;
        let mut analyzer = StreamAnalyzer::new(
            StreamContext {
                request_path: c.path.clone(),
                provider_hint: c.route.as_ref().and_then(|r| r.provider_hint.clone()),
                response_content_type: c.response_content_type.clone(),
                response_status: Some(status),
            },
            limits,
        );
        for (t_up_ns, piece) in &c.chunks.body.pieces {
            analyzer.push_chunk(piece, *t_up_ns);
        }
        let body_complete =
            c.upstream_eos && matches!(c.outcome, Outcome::Ok | Outcome::HttpError) && !c.chunks.body.truncated;
        analyzer.finish(RequestTiming {
            t_upstream_headers_ns: c.t_upstream_headers_ns,
            t_end_ns: c.t_end_ns.or(c.chunks.last_chunk_ns),
            body_complete,
        })
    });

    let mut lags_us: Vec<f64> = c
        .chunks
        .chunks
        .iter()
        .filter_map(|ch| ch.t_handoff_ns.map(|h| h.saturating_sub(ch.t_up_ns) as f64 / 1e3))
        .collect();
    lags_us.sort_by(f64::total_cmp);
    let self_overhead = SelfOverhead {
        hook_time_us: c.hook_ns as f64 / 1e3,
        handoff_lag_p50_us: (!lags_us.is_empty()).then(|| percentile(&lags_us, 50.0)),
        handoff_lag_p99_us: (!lags_us.is_empty()).then(|| percentile(&lags_us, 99.0)),
        handoff_lag_max_us: lags_us.last().copied(),
    };

    let content = config.privacy.capture_content.then(|| {
        let cap = config.privacy.capture_max_bytes;
        let response = c.chunks.body.concat();
        CapturedContent {
            request_body: String::from_utf8_lossy(&request_body[..request_body.len().min(cap)]).into_owned(),
            request_body_truncated: c.request_body.truncated || request_body.len() > cap,
            response_body: String::from_utf8_lossy(&response[..response.len().min(cap)]).into_owned(),
            response_body_truncated: c.chunks.body.truncated || response.len() > cap,
        }
    });

    let warm_up = c.route.is_some() && c.route_request_index < config.analysis.warmup_requests;
    let cached_prompt_tokens = analysis.as_ref().and_then(|a| a.usage.as_ref()).and_then(|u| u.cached_tokens);
    let trace = c.trace.unwrap_or_else(|| TraceContext::from_incoming(None));
    let mut record = Record {
        record_version: crate::record::RECORD_VERSION,
        request_id: c.request_id,
        trace_id: trace.trace_id,
        span_id: trace.span_id,
        parent_span_id: trace.parent_span_id,
        started_at: humantime::format_rfc3339_micros(c.anchor.wall).to_string(),
        route: c.route.as_ref().map(|r| r.name.clone()).unwrap_or_default(),
        route_role: c.route.as_ref().and_then(|r| r.role),
        upstream: c.route.as_ref().map(|r| r.upstream.url()).unwrap_or_default(),
        provider: c.route.as_ref().and_then(|r| r.provider_hint.clone()),
        method: c.method,
        path: c.path,
        status: c.status,
        outcome: c.outcome,
        error: c.error,
        request_headers: c.request_headers,
        response_content_type: c.response_content_type,
        response_content_encoding: c.response_content_encoding,
        conditions: Conditions {
            model: request.model.clone(),
            stream: request.stream,
            request_bytes: c.request_body.total_bytes,
            prompt_tokens: request.prompt_tokens,
            cached_prompt_tokens,
            concurrency_at_t0: c.concurrency_at_t0,
            upstream_connection_reused: c.connection.as_ref().map(|x| x.reused),
            warm_up,
            tokentap_version: env!("CARGO_PKG_VERSION").to_string(),
        },
        request,
        timeline: TimelineRecord {
            t0_unix_ns: c.anchor.wall_ns() as u64,
            t_upstream_sent_ns: c.t_upstream_sent_ns,
            t_upstream_headers_ns: c.t_upstream_headers_ns,
            t_end_ns: c.t_end_ns,
            connection: c.connection,
            chunk_count: c.chunks.chunk_count,
            body_bytes: c.chunks.body.total_bytes,
            chunks_truncated: c.chunks.chunks_truncated,
            analysis_bytes_truncated: c.chunks.body.truncated,
            client_delivery,
            chunks: c.chunks.chunks,
        },
        analysis,
        self_overhead,
        content,
        browser: None,
        diagnosis: None,
        chain: None,
    };
    record.diagnosis = crate::hops::diagnose(&record);
    record
}
