//! Off the forwarding path: completed requests go through a bounded queue to one worker thread
//! that runs the analysis, builds the [`Record`] and hands it to the store.
//!
//! Architecture invariant: submitting never blocks. Under overload tokentap sheds detail before
//! it loses records: once the queue is half full, a request's kept bytes are released at submit
//! and its record is written from the stamps alone, without stream analysis (`records.shed`);
//! only when the queue is full is a record dropped (`records.dropped`). Traffic is never slowed
//! down by analysis or disk writes.

mod joins;
mod liveness;
mod queue;
mod record;
mod stats;
mod turns;

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::ValidConfig;
use crate::store::RecordStore;
use tokentap_record::browser::ProbeReport;
use tokentap_record::mcp_pairing::McpPending;
use tokentap_record::mcp_session::McpSessions;
use tokentap_record::turn::{McpCalls, StepInput, TurnTracker, VoiceLinker, VoiceRequest};
use tokentap_telemetry::Telemetry;

use joins::{join_chain, join_report};
pub(crate) use queue::{CompletedRequest, FinalizeQueue, RecordObserver, RefusedReport, WorkItem};
pub(crate) use record::build_record;
pub(crate) use stats::{PipelineStats, UpstreamPoolStats};
use turns::{emit_turn, model_call, tick_turns, voice_turn_ref, with_voice_browser, TURN_TICK};

/// Starts the worker thread; returns the queue to submit to.
pub(crate) fn start(
    config: Arc<ValidConfig>,
    store: Arc<RecordStore>,
    stats: Arc<PipelineStats>,
    observer: Option<RecordObserver>,
    telemetry: Arc<Telemetry>,
) -> std::io::Result<(FinalizeQueue, JoinHandle<()>)> {
    let (tx, rx) = sync_channel(config.analysis.queue_capacity);
    let shed_from = (config.analysis.queue_capacity as u64).div_ceil(2);
    let worker_stats = stats.clone();
    stats.worker.start(Duration::from_secs(config.analysis.worker_stuck_s));
    let handle = std::thread::Builder::new()
        .name("tokentap-finalize".into())
        .spawn(move || run_worker(rx, shed_from, &config, &store, &worker_stats, observer, &telemetry))?;
    Ok((FinalizeQueue { tx, stats, shed_from }, handle))
}

/// Reports whose record is not (yet) in the store, kept a little while.
pub(super) const PENDING_REPORTS: usize = 256;

pub(super) const PENDING_FOR: Duration = Duration::from_secs(60);

pub(super) fn run_worker(
    rx: Receiver<WorkItem>,
    shed_from: u64,
    config: &ValidConfig,
    store: &RecordStore,
    stats: &PipelineStats,
    observer: Option<RecordObserver>,
    telemetry: &Telemetry,
) {
    let _running = stats.worker.running();
    let faults = Faults::from_env();
    set_priority(config.analysis.worker_priority);
    // Load the tokenizer's tables now, not on the first record.
    tokentap_analysis::load_encoding();
    // Before the first request is analysed: conversation hashes keyed for the whole fleet.
    if let Some(key) = &config.turns.fleet_key {
        if !tokentap_analysis::conversation::use_fleet_key(key.as_bytes()) {
            tracing::warn!(
                "turns.fleet_key was set after conversation hashing had started: turn ids stay per instance"
            );
        }
    }
    let liveness = &stats.worker;
    let worker = Worker { shed_from, config, store, stats, observer: observer.as_ref(), telemetry, faults: &faults };
    // The supervisor: each step is guarded on its own (below); a panic that escapes the loop
    // anyway starts it again with fresh state, counted and shown in health.
    loop {
        let mut state = WorkerState::new(config);
        match std::panic::catch_unwind(AssertUnwindSafe(|| worker.run(&rx, &mut state))) {
            Ok(()) => break,
            Err(payload) => {
                let message = panic_message(payload.as_ref());
                let open_turns = state.turns.as_ref().map_or(0, TurnTracker::open_turns);
                stats.worker_panics.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    panic = %message,
                    open_turns_lost = open_turns,
                    "the record worker panicked outside one item; it starts again with fresh state"
                );
                liveness.restarted(message);
            }
        }
    }
}

/// What the worker reads on every item.
struct Worker<'a> {
    shed_from: u64,
    config: &'a ValidConfig,
    store: &'a RecordStore,
    stats: &'a PipelineStats,
    observer: Option<&'a RecordObserver>,
    telemetry: &'a Telemetry,
    faults: &'a Faults,
}

impl Worker<'_> {
    /// Handles items until the queue's senders are gone.
    fn run(&self, rx: &Receiver<WorkItem>, state: &mut WorkerState) {
        let Self { shed_from, config, store, stats, observer, telemetry, faults } = *self;
        let mut ticked = Instant::now();
        loop {
            let mut item = match rx.recv_timeout(TURN_TICK) {
                Ok(item) => item,
                Err(RecvTimeoutError::Timeout) => {
                    self.tick(state);
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
                if let Some(delay) = faults.delay {
                    std::thread::sleep(delay);
                }
                if faults.escape_path.as_deref() == Some(completed.data.path.as_str()) {
                    panic!("{TEST_ESCAPE_PATH_VAR}: injected panic outside the item's guard");
                }
            }
            // A panic while handling one item drops that item, is logged and counted, and the
            // worker goes on with the next one.
            let what = match &item {
                WorkItem::Request(completed) => format!("request {}", completed.data.request_id),
                WorkItem::BrowserReport(report) => format!("browser report for trace {}", report.trace_id),
                WorkItem::CloseTurns(_) => "closing the open turns".to_owned(),
            };
            guarded(stats, &what, || {
                if let (WorkItem::Request(completed), Some(path)) = (&item, &faults.panic_path) {
                    if completed.data.path == *path {
                        panic!("{TEST_PANIC_PATH_VAR}: injected panic");
                    }
                }
                handle_item(item, config, store, stats, observer, telemetry, state)
            });
            let pending = &mut state.pending;
            while pending.front().is_some_and(|(at, _)| at.elapsed() > PENDING_FOR) || pending.len() > PENDING_REPORTS {
                pending.pop_front();
                stats.browser_unmatched.fetch_add(1, Ordering::Relaxed);
            }
            stats.worker.beat();
            if ticked.elapsed() >= TURN_TICK {
                self.tick(state);
                ticked = Instant::now();
            }
        }
    }

    /// Idle turns closed and written, under the same guard as an item.
    fn tick(&self, state: &mut WorkerState) {
        let Self { store, stats, telemetry, .. } = *self;
        guarded(stats, "closing idle turns", || {
            if self.faults.tick_panic {
                panic!("{TEST_TICK_PANIC_VAR}: injected panic");
            }
            tick_turns(state.turns.as_mut(), &state.voice, &mut state.mcp_calls, store, stats, telemetry);
            close_idle_sessions(&mut state.mcp_sessions, &mut state.mcp_pending, stats, telemetry);
        });
        stats.worker.beat();
    }
}

/// Runs one step of the worker; a panic in it is logged and counted, and the worker goes on.
fn guarded(stats: &PipelineStats, what: &str, step: impl FnOnce()) {
    if let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(step)) {
        stats.worker_panics.fetch_add(1, Ordering::Relaxed);
        let message = panic_message(payload.as_ref());
        tracing::error!(item = %what, panic = %message, "the record pipeline panicked; the item is dropped");
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Test-only fault injection, read once from the environment (unset in normal operation).
#[derive(Default)]
struct Faults {
    panic_path: Option<String>,
    escape_path: Option<String>,
    tick_panic: bool,
    delay: Option<Duration>,
}

impl Faults {
    fn from_env() -> Self {
        let var = |name| std::env::var(name).ok();
        Self {
            panic_path: var(TEST_PANIC_PATH_VAR),
            escape_path: var(TEST_ESCAPE_PATH_VAR),
            tick_panic: var(TEST_TICK_PANIC_VAR).is_some(),
            delay: var(TEST_DELAY_VAR).and_then(|v| v.parse().ok()).map(Duration::from_millis),
        }
    }
}

/// What the worker keeps between items.
pub(super) struct WorkerState {
    /// Reports whose record is not (yet) in the store.
    pub(super) pending: VecDeque<(Instant, ProbeReport)>,
    pub(super) turns: Option<TurnTracker>,
    /// Speech-to-text and text-to-speech requests joined to turns (with `turns`).
    pub(super) voice: VoiceLinker,
    /// MCP sessions followed across their exchanges (`mcp.client.session.duration`).
    pub(super) mcp_sessions: McpSessions,
    /// Recent answered MCP tool calls, for joining closed turns' tool runs to them.
    pub(super) mcp_calls: McpCalls,
    /// MCP requests whose answer comes in another exchange of their session.
    pub(super) mcp_pending: McpPending,
}

/// An MCP record's `tools/call`s that ran a tool call of an open turn, without trace context of
/// their own: their spans go under that call's `execute_tool` span, in the turn's trace.
fn place_in_turn(record: &mut tokentap_record::Record, tracker: &TurnTracker) {
    let found = tracker.turn_tools(record);
    let Some(exchange) = record.mcp.as_mut() else { return };
    for t in found {
        let c = &t.call;
        let Some(span) =
            tokentap_telemetry::conventions::execute_tool_span_id(&c.agent_span_id, c.index, c.call_id.as_deref())
        else {
            continue;
        };
        if let Some(op) = exchange.operations.get_mut(t.operation) {
            op.turn_traceparent = Some(format!("00-{}-{span}-01", c.trace_id));
        }
    }
}

/// Closes the MCP sessions silent for `SESSION_IDLE_NS` and observes their duration; drops the
/// requests waiting too long for an answer from another exchange.
fn close_idle_sessions(
    sessions: &mut McpSessions,
    pending: &mut McpPending,
    stats: &PipelineStats,
    telemetry: &Telemetry,
) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    if pending.stats().waiting > 0 || pending.early_answers() > 0 {
        pending.expire(now);
        stats.mcp_pairing.publish(pending);
    }
    if sessions.is_empty() {
        return;
    }
    for closed in sessions.close_idle(now) {
        telemetry.observe_mcp_session(&closed);
    }
}

impl WorkerState {
    fn new(config: &ValidConfig) -> Self {
        Self {
            pending: VecDeque::new(),
            turns: config.turns.enabled.then(|| TurnTracker::new(config.turns.tracker_config())),
            voice: VoiceLinker::default(),
            mcp_sessions: McpSessions::default(),
            mcp_calls: McpCalls::default(),
            mcp_pending: McpPending::default(),
        }
    }
}

/// Lowers the calling (worker) thread's CPU priority; a failure is logged and changes nothing else.
pub(super) fn set_priority(priority: crate::config::WorkerPriority) {
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
pub(crate) const TEST_PANIC_PATH_VAR: &str = "TOKENTAP_TEST_WORKER_PANIC_PATH";

/// Test-only fault injection: the worker's loop panics outside an item's guard after taking a
/// request whose path is this variable's value (the supervisor starts the loop again).
pub(crate) const TEST_ESCAPE_PATH_VAR: &str = "TOKENTAP_TEST_WORKER_ESCAPE_PATH";

/// Test-only fault injection: closing idle turns panics on every tick while this variable is set.
pub(crate) const TEST_TICK_PANIC_VAR: &str = "TOKENTAP_TEST_WORKER_TICK_PANIC";

/// Test-only: the worker waits this many ms before each request (a deliberately slow worker, for
/// the overload test and the fault table). Unset in normal operation.
pub(crate) const TEST_DELAY_VAR: &str = "TOKENTAP_TEST_WORKER_DELAY_MS";

pub(super) fn handle_item(
    item: WorkItem,
    config: &ValidConfig,
    store: &RecordStore,
    stats: &PipelineStats,
    observer: Option<&RecordObserver>,
    telemetry: &Telemetry,
    state: &mut WorkerState,
) {
    let WorkerState { pending, turns, voice, mcp_sessions, mcp_calls, mcp_pending } = state;
    let turns = turns.as_mut();
    match item {
        WorkItem::CloseTurns(done) => {
            for closed in mcp_sessions.close_all() {
                telemetry.observe_mcp_session(&closed);
            }
            if let Some(tracker) = turns {
                for turn in tracker.close_all() {
                    emit_turn(turn, voice, mcp_calls, store, telemetry);
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
            // MCP answers that came in another exchange of their session join their requests;
            // tool calls without trace context of their own go in their agent turn's trace.
            if record.mcp.is_some() {
                mcp_pending.observe(&mut record);
                stats.mcp_pairing.publish(mcp_pending);
                if let Some(tracker) = turns.as_deref() {
                    place_in_turn(&mut record, tracker);
                }
            }
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
            for closed in mcp_sessions.observe(&record) {
                telemetry.observe_mcp_session(&closed);
            }
            mcp_calls.observe(&record);
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
                emit_turn(turn, voice, mcp_calls, store, telemetry);
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
