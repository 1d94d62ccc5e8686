//! Off the forwarding path: completed requests go through a bounded queue to one worker thread
//! that runs the analysis, builds the [`Record`] and hands it to the store.
//!
//! Architecture invariant: submitting never blocks. Under overload tokentap sheds detail before
//! it loses records: once the queue is half full, a request's kept bytes are released at submit
//! and its record is written from the stamps alone, without stream analysis (`records.shed`);
//! only when the queue is full is a record dropped (`records.dropped`). Traffic is never slowed
//! down by analysis or disk writes.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokentap_analysis::audio::{
    SpeechAnalysis, SpeechAnalyzer, SpeechContext, TranscriptionAnalysis, TranscriptionAnalyzer,
};
use tokentap_analysis::{
    analyze_request, percentile, AnalysisLimits, RequestInfo, RequestTiming, ServerTiming, StreamAnalyzer,
    StreamContext, SPEECH_TO_TEXT, TEXT_TO_SPEECH,
};

use crate::config::ValidConfig;
use crate::request_data::{OpenRequest, RequestData};
use crate::route::RouteRole;
use crate::store::RecordStore;
use tokentap_record::browser::ProbeReport;
use tokentap_record::server_time;
use tokentap_record::trace::TraceContext;
use tokentap_record::turn::{ModelCall, StepInput, TurnRecord, TurnTracker, VoiceLinker, VoiceRequest};
use tokentap_record::{CapturedContent, Conditions, ErrorInfo, Outcome, Record, SelfOverhead, TimelineRecord};
use tokentap_telemetry::Telemetry;

/// A request that ended: its data, moved whole out of the request context, and how it ended.
pub struct CompletedRequest {
    pub data: RequestData,
    pub outcome: Outcome,
    pub error: Option<ErrorInfo>,
    /// Written without stream analysis (overload).
    pub shed: bool,
}

/// Counters of the record pipeline, shown by the admin API.
#[derive(Debug, Default)]
pub struct PipelineStats {
    pub submitted: AtomicU64,
    /// Records dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Records written without their stream analysis because the queue was backed up.
    pub shed: AtomicU64,
    /// Work items waiting in the queue now.
    pub queued: AtomicU64,
    /// Browser probe reports accepted at ingest, joined to their record, and given up on.
    pub browser_reports: AtomicU64,
    pub browser_joined: AtomicU64,
    pub browser_unmatched: AtomicU64,
    /// Browser probe reports refused at ingest: their trace had its reports, or over the budget.
    pub browser_trace_full: AtomicU64,
    pub browser_over_budget: AtomicU64,
    /// Work items dropped because handling them panicked (the worker went on).
    pub worker_panics: AtomicU64,
    /// Requests sent again on a fresh connection after a stale pooled upstream connection.
    pub stale_connection_retries: AtomicU64,
    /// Proxied requests routed but not yet recorded (`OpenRequest`).
    pub open_requests: Arc<AtomicU64>,
    pub turns: TurnStats,
    /// The bytes all requests keep for analysis (`[timeline] max_kept_bytes`).
    pub kept: Arc<crate::timeline::KeptBudget>,
    /// Client connections under `[connections]` (open, refused, slow heads).
    pub connections: Arc<crate::admission::ConnectionStats>,
    /// How long the proxy's runtime keeps a ready task waiting (`scheduling_lag`).
    pub scheduling_lag: Arc<crate::scheduling_lag::SchedulingLag>,
}

/// The turn tracker's state and counters, published by the worker (`/_tokentap/api/health` →
/// `turns`).
#[derive(Debug, Default)]
pub struct TurnStats {
    pub open: AtomicU64,
    pub conversations: AtomicU64,
    pub state_bytes: AtomicU64,
    pub opened: AtomicU64,
    pub closed: AtomicU64,
    pub conversations_evicted: AtomicU64,
    pub unknown_tool_results: AtomicU64,
    pub ambiguous_prefixes: AtomicU64,
    pub steps_not_listed: AtomicU64,
    pub tool_calls_not_tracked: AtomicU64,
    pub voice_transcriptions_linked: AtomicU64,
    pub voice_speech_linked: AtomicU64,
    pub voice_transcriptions_unlinked: AtomicU64,
    pub voice_speech_unlinked: AtomicU64,
}

impl TurnStats {
    fn publish_voice(&self, voice: &VoiceLinker) {
        let c = voice.counters();
        let set = |slot: &AtomicU64, v: u64| slot.store(v, Ordering::Relaxed);
        set(&self.voice_transcriptions_linked, c.transcriptions_linked);
        set(&self.voice_speech_linked, c.speech_linked);
        set(&self.voice_transcriptions_unlinked, c.transcriptions_unlinked);
        set(&self.voice_speech_unlinked, c.speech_unlinked);
    }

    fn publish(&self, tracker: &TurnTracker) {
        let c = tracker.counters();
        let set = |slot: &AtomicU64, v: u64| slot.store(v, Ordering::Relaxed);
        set(&self.open, tracker.open_turns() as u64);
        set(&self.conversations, tracker.conversations() as u64);
        set(&self.state_bytes, tracker.state_bytes() as u64);
        set(&self.opened, c.turns_opened);
        set(&self.closed, c.turns_closed);
        set(&self.conversations_evicted, c.conversations_evicted);
        set(&self.unknown_tool_results, c.unknown_tool_results);
        set(&self.ambiguous_prefixes, c.ambiguous_prefixes);
        set(&self.steps_not_listed, c.steps_not_listed);
        set(&self.tool_calls_not_tracked, c.tool_calls_not_tracked);
    }

    pub fn json(&self) -> serde_json::Value {
        let get = |slot: &AtomicU64| slot.load(Ordering::Relaxed);
        serde_json::json!({
            "open": get(&self.open),
            "conversations": get(&self.conversations),
            "state_bytes": get(&self.state_bytes),
            "opened": get(&self.opened),
            "closed": get(&self.closed),
            "conversations_evicted": get(&self.conversations_evicted),
            "unknown_tool_results": get(&self.unknown_tool_results),
            "ambiguous_prefixes": get(&self.ambiguous_prefixes),
            "steps_not_listed": get(&self.steps_not_listed),
            "tool_calls_not_tracked": get(&self.tool_calls_not_tracked),
            "voice": {
                "transcriptions_linked": get(&self.voice_transcriptions_linked),
                "speech_linked": get(&self.voice_speech_linked),
                "transcriptions_unlinked": get(&self.voice_transcriptions_unlinked),
                "speech_unlinked": get(&self.voice_speech_unlinked),
            },
        })
    }
}

impl tokentap_telemetry::PipelineCounters for PipelineStats {
    fn records_dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
    fn records_shed(&self) -> u64 {
        self.shed.load(Ordering::Relaxed)
    }
    fn connections_refused(&self) -> tokentap_telemetry::ConnectionRefusals {
        tokentap_telemetry::ConnectionRefusals {
            over_capacity: self.connections.refused_over_cap.load(Ordering::Relaxed),
            head_timeout: self.connections.head_timeouts.load(Ordering::Relaxed),
        }
    }
}

/// A callback that sees every finished record (the demo prints a summary line with it).
pub type RecordObserver = Box<dyn Fn(&Record) + Send + 'static>;

/// What the worker is handed.
pub enum WorkItem {
    /// A proxied request that ended.
    Request(Box<CompletedRequest>),
    /// A browser probe report to join to its request's record.
    BrowserReport(Box<ProbeReport>),
    /// Close every open turn (shutdown) and say when done.
    CloseTurns(SyncSender<()>),
}

/// Why a probe report was refused at ingest (counted in the pipeline's stats).
#[derive(Debug, Clone, Copy)]
pub enum RefusedReport {
    TraceFull,
    OverBudget,
}

/// The sending side of the finalize queue, owned by the proxy.
#[derive(Clone)]
pub struct FinalizeQueue {
    tx: SyncSender<WorkItem>,
    stats: Arc<PipelineStats>,
    /// Queue depth from which detail is shed (half the capacity).
    shed_from: u64,
}

impl FinalizeQueue {
    /// Counts a request retried on a fresh connection after a stale pooled one.
    pub fn count_stale_connection_retry(&self) {
        self.stats.stale_connection_retries.fetch_add(1, Ordering::Relaxed);
    }

    /// The budget of bytes all requests keep for analysis.
    pub fn kept_budget(&self) -> Arc<crate::timeline::KeptBudget> {
        self.stats.kept.clone()
    }

    /// Counts a routed request as open until its record is stored.
    pub fn open_request(&self) -> OpenRequest {
        OpenRequest::new(&self.stats.open_requests)
    }

    /// Hands a completed request to the worker without waiting.
    pub fn submit(&self, completed: CompletedRequest) {
        self.submit_boxed(Box::new(completed));
    }

    /// [`Self::submit`] for a request already on the heap (the tail watcher keeps them boxed, so
    /// that its queue moves pointers, not kilobytes).
    pub fn submit_boxed(&self, mut completed: Box<CompletedRequest>) {
        self.stats.submitted.fetch_add(1, Ordering::Relaxed);
        if self.backed_up() {
            // Release the kept bytes now: memory under overload is the stamps, not the bodies.
            completed.shed = true;
            completed.data.chunks.body.shed();
            completed.data.request_body.shed();
        }
        // Counted as queued before it is sent: the worker counts it out as soon as it receives
        // it, and must never see the count below zero (it would read as a huge backlog and shed).
        self.stats.queued.fetch_add(1, Ordering::Relaxed);
        if self.tx.try_send(WorkItem::Request(completed)).is_err() {
            self.stats.queued.fetch_sub(1, Ordering::Relaxed);
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn backed_up(&self) -> bool {
        self.stats.queued.load(Ordering::Relaxed) >= self.shed_from
    }

    /// Counts a probe report refused at ingest by its trace's cap or the budget of all clients.
    pub fn count_refused_report(&self, why: RefusedReport) {
        match why {
            RefusedReport::TraceFull => &self.stats.browser_trace_full,
            RefusedReport::OverBudget => &self.stats.browser_over_budget,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// Asks the worker to close every open turn and waits for it, at most `timeout` (shutdown).
    pub fn close_turns(&self, timeout: Duration) {
        let (done_tx, done_rx) = sync_channel(1);
        self.stats.queued.fetch_add(1, Ordering::Relaxed);
        if self.tx.try_send(WorkItem::CloseTurns(done_tx)).is_err() {
            self.stats.queued.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!("record queue full at shutdown: open turns are not written");
            return;
        }
        if done_rx.recv_timeout(timeout).is_err() {
            tracing::warn!(?timeout, "open turns not closed in time");
        }
    }

    /// Hands a validated probe report to the worker without waiting; false when the queue is full.
    pub fn submit_report(&self, report: ProbeReport) -> bool {
        self.stats.queued.fetch_add(1, Ordering::Relaxed);
        match self.tx.try_send(WorkItem::BrowserReport(Box::new(report))) {
            Ok(()) => {
                self.stats.browser_reports.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.stats.queued.fetch_sub(1, Ordering::Relaxed);
                false
            }
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
    let shed_from = (config.analysis.queue_capacity as u64).div_ceil(2);
    let worker_stats = stats.clone();
    let handle = std::thread::Builder::new()
        .name("tokentap-finalize".into())
        .spawn(move || run_worker(rx, shed_from, &config, &store, &worker_stats, observer, &telemetry))?;
    Ok((FinalizeQueue { tx, stats, shed_from }, handle))
}

/// Reports whose record is not (yet) in the store, kept a little while.
const PENDING_REPORTS: usize = 256;
const PENDING_FOR: Duration = Duration::from_secs(60);

fn run_worker(
    rx: Receiver<WorkItem>,
    shed_from: u64,
    config: &ValidConfig,
    store: &RecordStore,
    stats: &PipelineStats,
    observer: Option<RecordObserver>,
    telemetry: &Telemetry,
) {
    let panic_path = std::env::var(TEST_PANIC_PATH_VAR).ok();
    let delay = std::env::var(TEST_DELAY_VAR).ok().and_then(|v| v.parse().ok()).map(Duration::from_millis);
    set_priority(config.analysis.worker_priority);
    // Load the tokenizer's tables now, not on the first record.
    tokentap_analysis::load_encoding();
    let mut state = WorkerState {
        pending: VecDeque::new(),
        turns: config.turns.enabled.then(|| TurnTracker::new(config.turns.tracker_config())),
        voice: VoiceLinker::default(),
    };
    let mut ticked = Instant::now();
    loop {
        let mut item = match rx.recv_timeout(TURN_TICK) {
            Ok(item) => item,
            Err(RecvTimeoutError::Timeout) => {
                tick_turns(state.turns.as_mut(), &state.voice, store, stats, telemetry);
                ticked = Instant::now();
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let backlog = stats.queued.fetch_sub(1, Ordering::Relaxed).saturating_sub(1);
        if let WorkItem::Request(completed) = &mut item {
            // The worker is the bottleneck: skip the analysis of what it is behind on.
            if backlog >= shed_from {
                completed.shed = true;
            }
            if let Some(delay) = delay {
                std::thread::sleep(delay);
            }
        }
        // A panic while handling one item drops that item, is logged and counted, and the
        // worker goes on with the next one.
        let what = match &item {
            WorkItem::Request(completed) => format!("request {}", completed.data.request_id),
            WorkItem::BrowserReport(report) => format!("browser report for trace {}", report.trace_id),
            WorkItem::CloseTurns(_) => "closing the open turns".to_owned(),
        };
        let handled = std::panic::catch_unwind(AssertUnwindSafe(|| {
            if let (WorkItem::Request(completed), Some(path)) = (&item, &panic_path) {
                if completed.data.path == *path {
                    panic!("{TEST_PANIC_PATH_VAR}: injected panic");
                }
            }
            handle_item(item, config, store, stats, observer.as_ref(), telemetry, &mut state)
        }));
        if let Err(payload) = handled {
            stats.worker_panics.fetch_add(1, Ordering::Relaxed);
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(item = %what, panic = %message, "the record pipeline panicked; the item is dropped");
        }
        let pending = &mut state.pending;
        while pending.front().is_some_and(|(at, _)| at.elapsed() > PENDING_FOR) || pending.len() > PENDING_REPORTS {
            pending.pop_front();
            stats.browser_unmatched.fetch_add(1, Ordering::Relaxed);
        }
        if ticked.elapsed() >= TURN_TICK {
            tick_turns(state.turns.as_mut(), &state.voice, store, stats, telemetry);
            ticked = Instant::now();
        }
    }
}

/// What the worker keeps between items.
struct WorkerState {
    /// Reports whose record is not (yet) in the store.
    pending: VecDeque<(Instant, ProbeReport)>,
    turns: Option<TurnTracker>,
    /// Speech-to-text and text-to-speech requests joined to turns (with `turns`).
    voice: VoiceLinker,
}

/// How often idle turns are looked for.
const TURN_TICK: Duration = Duration::from_secs(1);

fn tick_turns(
    turns: Option<&mut TurnTracker>,
    voice: &VoiceLinker,
    store: &RecordStore,
    stats: &PipelineStats,
    telemetry: &Telemetry,
) {
    let Some(tracker) = turns else { return };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let closed = std::panic::catch_unwind(AssertUnwindSafe(|| tracker.tick(now))).unwrap_or_else(|_| {
        stats.worker_panics.fetch_add(1, Ordering::Relaxed);
        tracing::error!("the turn tracker panicked while closing idle turns");
        Vec::new()
    });
    for turn in closed {
        emit_turn(turn, voice, store, telemetry);
    }
    stats.turns.publish(tracker);
}

/// A closed turn: its metrics and spans, then `turns.jsonl`, the turn ring and the live feed.
fn emit_turn(mut turn: TurnRecord, voice: &VoiceLinker, store: &RecordStore, telemetry: &Telemetry) {
    if let Some(v) = voice.voice_of(&turn.turn_id, turn.t0_unix_ns) {
        turn.voice = Some(v);
    }
    point_voice_records(&turn, store);
    with_browser(&mut turn, store);
    with_voice_browser(&mut turn, store);
    telemetry.observe_turn(&turn);
    if voice_to_voice(&turn).is_some() {
        telemetry.observe_voice_turn(&turn);
    }
    if let Err(e) = store.append_turn(turn) {
        tracing::warn!(error = %e, "could not write a turn");
    }
}

/// The voice requests of a turn name it in their records (written again; their spans were
/// exported in their own traces when they ended before the turn was known).
fn point_voice_records(turn: &TurnRecord, store: &RecordStore) {
    let Some(voice) = &turn.voice else { return };
    let ids = voice.transcription.iter().map(|t| &t.request_id).chain(voice.speech.iter().map(|s| &s.request_id));
    for id in ids {
        let Some(stored) = store.get(id) else { continue };
        if stored.record.turn.is_some() {
            continue;
        }
        let mut record = stored.record.clone();
        record.turn = Some(voice_turn_ref(turn));
        if let Err(e) = store.update(record) {
            tracing::warn!(error = %e, "could not write a voice record joined to its turn");
        }
    }
}

fn voice_turn_ref(turn: &TurnRecord) -> tokentap_record::turn::TurnRef {
    tokentap_record::turn::TurnRef {
        turn_id: turn.turn_id.clone(),
        conversation_id: turn.conversation_id.clone(),
        step: 0,
        link: tokentap_record::turn::TurnLink::Voice,
        trace_id: turn.trace_id.clone(),
        agent_span_id: turn.agent_span_id.clone(),
    }
}

/// Adds what the browser saw of the turn, from its first and last steps' records in the store.
fn with_browser(turn: &mut TurnRecord, store: &RecordStore) -> bool {
    let step_record = |step: Option<&tokentap_record::turn::TurnStep>| step.and_then(|s| store.get(&s.request_id));
    let (first, last) = (step_record(turn.steps.first()), step_record(turn.steps.last()));
    turn.apply_browser(first.as_ref().map(|s| &s.record), last.as_ref().map(|s| &s.record))
}

/// Adds what the browser saw of the turn's voice requests (end of speech, playback), from their
/// records in the store.
fn with_voice_browser(turn: &mut TurnRecord, store: &RecordStore) -> bool {
    let Some(voice) = turn.voice.as_mut() else { return false };
    voice.apply_browser(|request_id| {
        let stored = store.get(request_id)?;
        Some((stored.record.timeline.t0_unix_ns, stored.record.browser.clone()?))
    })
}

fn voice_to_voice(turn: &TurnRecord) -> Option<f64> {
    turn.voice.as_ref()?.voice_to_voice_ms
}

/// A browser report joined a step or a voice request of a turn that is already written: the turn
/// is written again with what the browser saw (the last line for a turn id wins).
fn rejoin_turn(turn_id: &str, store: &RecordStore, telemetry: &Telemetry) {
    let Some(stored) = store.get_turn(turn_id) else { return };
    let mut turn = stored.turn.clone();
    let steps = with_browser(&mut turn, store);
    let had_voice_to_voice = voice_to_voice(&turn).is_some();
    if with_voice_browser(&mut turn, store) | steps {
        if !had_voice_to_voice && voice_to_voice(&turn).is_some() {
            telemetry.observe_voice_turn(&turn);
        }
        if let Err(e) = store.update_turn(turn) {
            tracing::warn!(error = %e, "could not write a turn joined to its browser report");
        }
    }
}

/// Lowers the calling (worker) thread's CPU priority; a failure is logged and changes nothing else.
fn set_priority(priority: crate::config::WorkerPriority) {
    use crate::config::WorkerPriority;
    use thread_priority::{ThreadPriority, ThreadPriorityValue};
    let result = match priority {
        WorkerPriority::Normal => return,
        #[cfg(target_os = "linux")]
        WorkerPriority::Idle => thread_priority::set_thread_priority_and_policy(
            thread_priority::thread_native_id(),
            ThreadPriority::Min,
            thread_priority::ThreadSchedulePolicy::Normal(thread_priority::NormalThreadSchedulePolicy::Idle),
        ),
        #[cfg(not(target_os = "linux"))]
        WorkerPriority::Idle => ThreadPriority::Min.set_for_current(),
        // Crossplatform value 22 of 0..=99 maps to nice 10 on Linux.
        WorkerPriority::Low => ThreadPriorityValue::try_from(22u8)
            .map_err(|_| thread_priority::Error::Priority("22"))
            .and_then(|v| ThreadPriority::Crossplatform(v).set_for_current()),
    };
    if let Err(e) = result {
        tracing::warn!(error = ?e, ?priority, "cannot lower the record worker's CPU priority; it runs at normal priority");
    }
}

/// Test-only fault injection: the worker panics on a request whose path is this variable's value
/// (the fault tests and the fault table in BENCHMARKS.md use it). Unset in normal operation.
pub const TEST_PANIC_PATH_VAR: &str = "TOKENTAP_TEST_WORKER_PANIC_PATH";

/// Test-only: the worker waits this many ms before each request (a deliberately slow worker, for
/// the overload test and the fault table). Unset in normal operation.
pub const TEST_DELAY_VAR: &str = "TOKENTAP_TEST_WORKER_DELAY_MS";

fn handle_item(
    item: WorkItem,
    config: &ValidConfig,
    store: &RecordStore,
    stats: &PipelineStats,
    observer: Option<&RecordObserver>,
    telemetry: &Telemetry,
    state: &mut WorkerState,
) {
    let WorkerState { pending, turns, voice } = state;
    let turns = turns.as_mut();
    match item {
        WorkItem::CloseTurns(done) => {
            if let Some(tracker) = turns {
                for turn in tracker.close_all() {
                    emit_turn(turn, voice, store, telemetry);
                }
                stats.turns.publish(tracker);
            }
            let _ = done.try_send(());
        }
        WorkItem::Request(mut completed) => {
            // Counted as open until stored: the graceful drain waits for this.
            let _open = completed.data.open.take();
            if completed.shed {
                stats.shed.fetch_add(1, Ordering::Relaxed);
            }
            let mut record = build_record(*completed, config);
            // Which turn this model call is a step of; the turns it closed go out after it.
            let mut closed_turns = Vec::new();
            // A voice request that joined a turn already written: the turn is written again.
            let mut voice_rejoined = None;
            if let Some(tracker) = turns {
                let headers = tracker.config().headers.clone();
                if let Some(step) = StepInput::from_record(&record, &headers) {
                    let placement = tracker.observe(step);
                    voice.on_model_call(&model_call(&record, &placement.turn, &headers));
                    record.turn = Some(placement.turn);
                    closed_turns = placement.closed;
                } else if let Some(request) = VoiceRequest::from_record(&record, &headers) {
                    if let Some(stored) = voice.observe(request).and_then(|id| store.get_turn(&id)) {
                        record.turn = Some(voice_turn_ref(&stored.turn));
                        voice_rejoined = Some(stored.turn.clone());
                    }
                }
                stats.turns.publish(tracker);
                stats.turns.publish_voice(voice);
            }
            if let Some(observe) = observer {
                observe(&record);
            }
            // Metrics and spans (never blocks: a full export queue drops and counts).
            telemetry.observe(&record);
            let trace_id = record.trace_id.clone();
            let page_trace =
                tokentap_record::browser::arrival::page_trace_of(&record.request_headers).map(str::to_string);
            let chain_peer = record.route_role.map(|_| record.clone());
            // The store counts written records and failed writes itself.
            if let Err(e) = store.append(record) {
                tracing::warn!(error = %e, "could not write a record");
            }
            // An ingress and an egress record of one user turn are joined in whichever order
            // they end (the ingress request usually ends last).
            if let Some(record) = chain_peer {
                join_chain(&record, store);
            }
            for turn in closed_turns {
                emit_turn(turn, voice, store, telemetry);
            }
            if let Some(mut turn) = voice_rejoined {
                if let Some(v) = voice.voice_of(&turn.turn_id, turn.t0_unix_ns) {
                    turn.voice = Some(v);
                }
                with_voice_browser(&mut turn, store);
                if let Err(e) = store.update_turn(turn) {
                    tracing::warn!(error = %e, "could not write a turn joined to a speech request");
                }
            }
            // A report that came before its record can be joined now.
            if let Some(i) =
                pending.iter().position(|(_, r)| r.trace_id == trace_id || page_trace.as_deref() == Some(&r.trace_id))
            {
                if let Some((_, report)) = pending.remove(i) {
                    join_report(report, store, stats, telemetry, pending);
                }
            }
        }
        WorkItem::BrowserReport(report) => join_report(*report, store, stats, telemetry, pending),
    }
}

fn join_report(
    report: ProbeReport,
    store: &RecordStore,
    stats: &PipelineStats,
    telemetry: &Telemetry,
    pending: &mut VecDeque<(Instant, ProbeReport)>,
) {
    let (stored, by_header) = match store.find_by_trace(&report.trace_id, &report.span_id) {
        Some(stored) => (stored, false),
        None => match store.find_by_page_trace(&report.trace_id) {
            Some(stored) => (stored, true),
            None => {
                pending.push_back((Instant::now(), report));
                return;
            }
        },
    };
    let mut record = stored.record.clone();
    let mut browser = tokentap_record::join::join(&record, &report);
    if by_header {
        browser.joined_by = tokentap_record::browser::arrival::JoinedBy::Header;
    }
    record.browser = Some(browser);
    record.diagnosis = rediagnose(&record, store);
    telemetry.observe_browser(&record);
    let turn_id = record.turn.as_ref().map(|t| t.turn_id.clone());
    match store.update(record) {
        Ok(()) => {
            stats.browser_joined.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => tracing::warn!(error = %e, "could not write a joined record"),
    }
    if let Some(turn_id) = turn_id {
        rejoin_turn(&turn_id, store, telemetry);
    }
}

/// The record's diagnosis: over the whole chain when an egress record is joined to it.
fn rediagnose(record: &Record, store: &RecordStore) -> Option<tokentap_record::hops::Diagnosis> {
    if let Some(egress) = record.chain.as_ref().and_then(|c| store.get(&c.egress_request_id)) {
        return tokentap_record::diagnosis::diagnose_chain(record, &egress.record);
    }
    tokentap_record::diagnosis::diagnose(record)
}

/// When `record` is one end of a chain (an ingress or egress route) and the other end of the same
/// trace is in the store, writes the ingress record again with the chain's diagnosis.
fn join_chain(record: &Record, store: &RecordStore) {
    let Some(pair) = store.find_chain_peer(record) else { return };
    let (ingress, egress) = match record.route_role {
        Some(RouteRole::Ingress) => (record.clone(), pair.record.clone()),
        Some(RouteRole::Egress) => (pair.record.clone(), record.clone()),
        None => return,
    };
    let Some(diagnosis) = tokentap_record::diagnosis::diagnose_chain(&ingress, &egress) else { return };
    let mut joined = ingress;
    joined.chain = Some(tokentap_record::hops::Chain {
        egress_request_id: egress.request_id.clone(),
        egress_route: egress.route.clone(),
        aligned_events: diagnosis.events,
    });
    joined.diagnosis = Some(diagnosis);
    if let Err(e) = store.update(joined) {
        tracing::warn!(error = %e, "could not write a chained record");
    }
}

/// What the voice linker needs of a model call the turn tracker just placed.
fn model_call<'a>(
    record: &'a Record,
    turn: &'a tokentap_record::turn::TurnRef,
    headers: &tokentap_record::turn::TurnHeaders,
) -> ModelCall<'a> {
    let analysis = record.analysis.as_ref();
    let t0 = record.timeline.t0_unix_ns;
    let answered = analysis.is_some_and(|a| a.tool_calls.is_empty());
    ModelCall {
        turn_id: &turn.turn_id,
        trace_id: &record.trace_id,
        traced: record.parent_span_id.is_some(),
        turn_header: tokentap_record::turn::step::header_value(record, &headers.turn),
        t0_unix_ns: t0,
        last_input: record.request.last_input,
        last_user_text_hash: record.request.last_user_text_hash,
        first_answer_unix_ns: analysis
            .and_then(|a| a.metrics.ttft_answer_ms)
            .map(|ms| t0.saturating_add((ms * 1e6) as u64)),
        answer_hashes: analysis.filter(|_| answered).and_then(|a| a.answer_hashes.as_ref()),
    }
}

/// Speech-to-text and text-to-speech responses, analysed from the kept body pieces.
fn voice_analysis(d: &RequestData, request: &RequestInfo) -> (Option<SpeechAnalysis>, Option<TranscriptionAnalysis>) {
    let ok = d.status.is_some_and(|s| (200..300).contains(&s));
    match request.operation.as_deref() {
        Some(TEXT_TO_SPEECH) if ok => {
            let mut analyzer = SpeechAnalyzer::new(SpeechContext {
                response_content_type: d.response_content_type.clone(),
                response_format: request.speech.as_ref().and_then(|s| s.response_format.clone()),
            });
            for (t, piece) in &d.chunks.body.pieces {
                analyzer.push_chunk(piece, *t);
            }
            (Some(analyzer.finish()), None)
        }
        Some(SPEECH_TO_TEXT) if d.status.is_some() => {
            let mut analyzer = TranscriptionAnalyzer::new(d.response_content_type.as_deref());
            for (t, piece) in &d.chunks.body.pieces {
                analyzer.push_chunk(piece, *t);
            }
            (None, Some(analyzer.finish(d.status)))
        }
        _ => (None, None),
    }
}

/// `gen_ai.operation.name` of a realtime WebSocket session's request span.
pub const REALTIME_OPERATION: &str = "realtime";

/// A WebSocket session: both directions' kept pieces, merged in the order they were stamped,
/// through the realtime analysis (frames, permessage-deflate as the 101 negotiated, events).
fn realtime_analysis(d: &RequestData) -> tokentap_analysis::realtime::RealtimeSession {
    use tokentap_analysis::realtime::{DeflateParams, Direction, RealtimeAnalyzer, RealtimeContext};
    let deflate = d.websocket_extensions.as_deref().and_then(DeflateParams::from_extensions_header);
    let mut analyzer = RealtimeAnalyzer::new(RealtimeContext { deflate, limits: Default::default() });
    let mut from_client = d.request_body.pieces.iter().peekable();
    let mut from_server = d.chunks.body.pieces.iter().peekable();
    loop {
        let client_first = match (from_client.peek(), from_server.peek()) {
            (None, None) => break,
            (Some(c), Some(s)) => c.0 <= s.0,
            (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        let (direction, (t, piece)) = if client_first {
            (Direction::ClientToServer, from_client.next().expect("peeked"))
        } else {
            (Direction::ServerToClient, from_server.next().expect("peeked"))
        };
        analyzer.push(direction, *t, piece);
    }
    let end =
        [d.t_end_ns, d.chunks.last_chunk_ns, d.request_body.pieces.last().map(|p| p.0)].into_iter().flatten().max();
    let mut session = analyzer.finish(end.unwrap_or(0));
    session.client.bytes_not_kept = d.request_body.truncated;
    session.server.bytes_not_kept = d.chunks.body.truncated;
    session
}

/// Turns a completed request into its record: runs the request and stream analysis.
pub fn build_record(c: CompletedRequest, config: &ValidConfig) -> Record {
    let CompletedRequest { data: mut d, outcome, error, shed } = c;
    if shed {
        d.chunks.body.shed();
        d.request_body.shed();
    }
    let t_upstream_sent_ns = d.t_upstream_sent_ns();
    if let Some(connection) = d.connection.as_mut() {
        connection.protocol = d.response_protocol.as_deref().and_then(tokentap_record::HttpProtocol::from_version);
    }
    let client_delivery = (!d.chunks.chunks.is_empty() || d.ack.unavailable.is_some())
        .then(|| tokentap_record::ack::apply(&d.ack, &mut d.chunks.chunks, d.chunks.chunks_truncated));
    // A WebSocket session (the upgrade answered 101): its "bodies" are frames in both directions,
    // read by the realtime analysis instead of the request and stream analyses.
    let websocket = d.status == Some(101);
    let request_body = if websocket { Vec::new() } else { d.request_body.concat() };
    let mut request =
        analyze_request(&d.path, d.request_content_type.as_deref(), &request_body, d.request_body.truncated);
    let realtime = (websocket && !shed).then(|| realtime_analysis(&d));
    if let Some(session) = &realtime {
        request.operation = Some(REALTIME_OPERATION.to_string());
        request.model = request.model.take().or_else(|| session.model.clone());
    }

    let mut analysis = d.status.filter(|_| !shed && !websocket).map(|status| {
        let limits = AnalysisLimits {
            stall_threshold_ns: config.analysis.stall_threshold_ms * 1_000_000,
            ..AnalysisLimits::default()
        };
        let mut analyzer = StreamAnalyzer::new(
            StreamContext {
                request_path: d.path.clone(),
                provider_hint: d.route.as_ref().and_then(|r| r.provider_hint).map(|p| p.as_str().to_string()),
                response_content_type: d.response_content_type.clone(),
                response_status: Some(status),
            },
            limits,
        );
        for (t_up_ns, piece) in &d.chunks.body.pieces {
            analyzer.push_chunk(piece, *t_up_ns);
        }
        let body_complete =
            d.upstream_eos && matches!(outcome, Outcome::Ok | Outcome::HttpError) && !d.chunks.body.truncated;
        analyzer.finish(RequestTiming {
            t_upstream_headers_ns: d.t_upstream_headers_ns,
            t_end_ns: d.t_end_ns.or(d.chunks.last_chunk_ns),
            body_complete,
        })
    });

    let (speech, transcription) = if shed { (None, None) } else { voice_analysis(&d, &request) };

    let mut lags_us: Vec<f64> = d
        .chunks
        .chunks
        .iter()
        .filter_map(|ch| ch.t_handoff_ns.map(|h| h.saturating_sub(ch.t_up_ns) as f64 / 1e3))
        .collect();
    lags_us.sort_by(f64::total_cmp);
    let self_overhead = SelfOverhead {
        hook_time_us: d.hook_ns as f64 / 1e3,
        handoff_lag_p50_us: (!lags_us.is_empty()).then(|| percentile(&lags_us, 50.0)),
        handoff_lag_p99_us: (!lags_us.is_empty()).then(|| percentile(&lags_us, 99.0)),
        handoff_lag_max_us: lags_us.last().copied(),
    };

    let content = config.privacy.capture_content.then(|| {
        let cap = config.privacy.capture_max_bytes;
        let response = d.chunks.body.concat();
        CapturedContent {
            request_body: String::from_utf8_lossy(&request_body[..request_body.len().min(cap)]).into_owned(),
            request_body_truncated: d.request_body.truncated || request_body.len() > cap,
            response_body: String::from_utf8_lossy(&response[..response.len().min(cap)]).into_owned(),
            response_body_truncated: d.chunks.body.truncated || response.len() > cap,
        }
    });

    if let (Some(analysis), Some(encoding)) = (analysis.as_mut(), d.response_content_encoding.as_deref()) {
        if !encoding.trim().eq_ignore_ascii_case("identity") {
            analysis.flags.encoded_body = Some(encoding.chars().take(64).collect());
        }
    }
    let warm_up = d.route.is_some() && d.route_request_index < config.analysis.warmup_requests;
    // The server's own timings: the body's report, else the timing headers'.
    let server = analysis
        .as_mut()
        .and_then(|a| a.server_timing.take())
        .or_else(|| ServerTiming::from_headers(d.timing_headers.iter().map(|(n, v)| (*n, v.as_str()))));
    let server_split = server.as_ref().zip(analysis.as_ref()).and_then(|(s, a)| server_time::split(s, a));
    let usage = analysis.as_ref().and_then(|a| a.usage.as_ref());
    let cached_prompt_tokens =
        usage.and_then(|u| u.cached_tokens).or_else(|| server.as_ref().and_then(|s| s.cached_prompt_tokens));
    let (cached_prompt_ratio, prompt_cache) = server_time::prompt_cache(
        cached_prompt_tokens,
        usage.and_then(|u| u.input_tokens).or_else(|| server.as_ref().and_then(|s| s.prompt_tokens)),
    );
    let trace = d.trace.unwrap_or_else(|| TraceContext::from_incoming(None));
    let mut record = Record {
        record_version: tokentap_record::RECORD_VERSION,
        request_id: d.request_id,
        trace_id: trace.trace_id,
        span_id: trace.span_id,
        parent_span_id: trace.parent_span_id,
        started_at: humantime::format_rfc3339_micros(d.anchor.wall).to_string(),
        route: d.route.as_ref().map(|r| r.name.clone()).unwrap_or_default(),
        route_role: d.route.as_ref().and_then(|r| r.role),
        upstream: d.route.as_ref().map(|r| r.upstream.url()).unwrap_or_default(),
        provider: d.route.as_ref().and_then(|r| r.provider_hint),
        method: d.method,
        path: d.path,
        status: d.status,
        outcome,
        error,
        request_headers: d.request_headers,
        response_content_type: d.response_content_type,
        response_content_encoding: d.response_content_encoding,
        conditions: Conditions {
            model: request.model.clone(),
            stream: request.stream,
            request_bytes: d.request_body.total_bytes,
            prompt_tokens: request.prompt_tokens,
            cached_prompt_tokens,
            cached_prompt_ratio,
            prompt_cache,
            concurrency_at_t0: d.concurrency_at_t0,
            upstream_connection_reused: d.connection.as_ref().map(|x| x.reused),
            warm_up,
            tokentap_version: env!("CARGO_PKG_VERSION").to_string(),
        },
        request,
        timeline: TimelineRecord {
            t0_unix_ns: d.anchor.wall_ns() as u64,
            t_upstream_sent_ns,
            t_upstream_headers_ns: d.t_upstream_headers_ns,
            t_end_ns: d.t_end_ns,
            connection: d.connection,
            chunk_count: d.chunks.chunk_count,
            body_bytes: d.chunks.body.total_bytes,
            chunks_truncated: d.chunks.chunks_truncated,
            analysis_bytes_truncated: d.chunks.body.truncated,
            client_delivery,
            chunks: std::mem::take(&mut d.chunks.chunks),
        },
        analysis,
        analysis_shed: shed,
        self_overhead,
        content,
        browser: None,
        diagnosis: None,
        chain: None,
        turn: None,
        speech,
        transcription,
        server,
        server_split,
        realtime,
    };
    record.diagnosis = tokentap_record::diagnosis::diagnose(&record);
    record
}
