//! The pipeline's counters (records dropped and shed, turns, voice links), as health and metrics
//! read them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokentap_record::turn::{TurnTracker, VoiceLinker};

/// Counters of the record pipeline, shown by the admin API.
#[derive(Debug, Default)]
pub(crate) struct PipelineStats {
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
    /// Whether the worker makes progress (stuck, not running, restarted).
    pub worker: super::liveness::WorkerLiveness,
    /// Requests sent again on a fresh connection after a stale pooled upstream connection.
    pub stale_connection_retries: AtomicU64,
    /// Upstreams found to close kept-alive connections right after answering (not pooled since).
    pub peers_closing_after_answer: AtomicU64,
    /// tokentap's relay's idle upstream connections (`forward::upstream_pool`).
    pub upstream_pool: Arc<UpstreamPoolStats>,
    /// Proxied requests routed but not yet recorded (`OpenRequest`).
    pub open_requests: Arc<AtomicU64>,
    /// Set once SIGTERM started the drain: a request whose task is dropped from then on was cut
    /// by the shutdown (its record says `shutdown`).
    pub shutting_down: std::sync::atomic::AtomicBool,
    pub turns: TurnStats,
    /// The bytes all requests keep for analysis (`[timeline] max_kept_bytes`).
    pub kept: Arc<crate::timeline::KeptBudget>,
    /// Client connections under `[connections]` (open, refused, slow heads).
    pub connections: Arc<crate::admission::ConnectionStats>,
    /// How long the proxy's runtime keeps a ready task waiting (`scheduling_lag`).
    pub scheduling_lag: Arc<crate::scheduling_lag::SchedulingLag>,
    /// MCP requests paired with answers from other exchanges of their session (`mcp_pairing`).
    pub mcp_pairing: McpPairingStats,
}

/// The idle upstream connections of tokentap's relay (`forward::upstream_pool`), for
/// `/_tokentap/api/health` → `upstream.pool`. pingora's own pool (HTTP/1.0 and HTTP/2 clients,
/// `relay = "pingora"`) is not counted here.
#[derive(Debug, Default)]
pub(crate) struct UpstreamPoolStats {
    /// Idle connections now.
    pub idle: AtomicU64,
    /// At most this many are kept idle (pingora's `upstream_keepalive_pool_size`).
    pub max_idle: AtomicU64,
    /// Requests sent on a connection taken from the pool.
    pub reused: AtomicU64,
    /// Idle connections found closed by the upstream (an end of stream, an error, or bytes nobody
    /// asked for) when taken or given back: closed, not reused.
    pub closed_by_upstream: AtomicU64,
    /// Closed because the pool was full: the one idle longest.
    pub closed_pool_full: AtomicU64,
    /// Closed when their idle timeout (`[timeouts] idle_pool_s`) passed.
    pub closed_idle_timeout: AtomicU64,
}

impl UpstreamPoolStats {
    pub(crate) fn json(&self) -> serde_json::Value {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "idle": n(&self.idle),
            "max_idle": n(&self.max_idle),
            "reused": n(&self.reused),
            "closed_by_upstream": n(&self.closed_by_upstream),
            "closed_pool_full": n(&self.closed_pool_full),
            "closed_idle_timeout": n(&self.closed_idle_timeout),
        })
    }
}

/// `tokentap_record::mcp_pairing::PairingStats`, published by the worker (`/_tokentap/api/health`
/// → `mcp_pairing`).
#[derive(Debug, Default)]
pub(crate) struct McpPairingStats {
    pub paired: AtomicU64,
    pub waiting: AtomicU64,
    pub waiting_bytes: AtomicU64,
    pub expired: AtomicU64,
    pub evicted: AtomicU64,
    pub session_ended: AtomicU64,
    pub answered_first: AtomicU64,
    pub answers_waiting: AtomicU64,
    pub answers_dropped: AtomicU64,
}

impl McpPairingStats {
    pub(super) fn publish(&self, pending: &tokentap_record::mcp_pairing::McpPending) {
        let s = pending.stats();
        let set = |slot: &AtomicU64, v: u64| slot.store(v, Ordering::Relaxed);
        set(&self.paired, s.paired);
        set(&self.waiting, s.waiting);
        set(&self.waiting_bytes, pending.bytes() as u64);
        set(&self.expired, s.expired);
        set(&self.evicted, s.evicted);
        set(&self.session_ended, s.session_ended);
        set(&self.answered_first, s.answered_first);
        set(&self.answers_waiting, pending.early_answers() as u64);
        set(&self.answers_dropped, s.answers_dropped);
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        let get = |slot: &AtomicU64| slot.load(Ordering::Relaxed);
        serde_json::json!({
            "paired": get(&self.paired),
            "waiting": get(&self.waiting),
            "waiting_bytes": get(&self.waiting_bytes),
            "expired": get(&self.expired),
            "evicted": get(&self.evicted),
            "session_ended": get(&self.session_ended),
            "answered_first": get(&self.answered_first),
            "answers_waiting": get(&self.answers_waiting),
            "answers_dropped": get(&self.answers_dropped),
        })
    }
}

/// The turn tracker's state and counters, published by the worker (`/_tokentap/api/health` →
/// `turns`).
#[derive(Debug, Default)]
pub(crate) struct TurnStats {
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
    pub(super) fn publish_voice(&self, voice: &VoiceLinker) {
        let c = voice.counters();
        let set = |slot: &AtomicU64, v: u64| slot.store(v, Ordering::Relaxed);
        set(&self.voice_transcriptions_linked, c.transcriptions_linked);
        set(&self.voice_speech_linked, c.speech_linked);
        set(&self.voice_transcriptions_unlinked, c.transcriptions_unlinked);
        set(&self.voice_speech_unlinked, c.speech_unlinked);
    }

    pub(super) fn publish(&self, tracker: &TurnTracker) {
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

    pub(crate) fn json(&self) -> serde_json::Value {
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
            over_client_share: self.connections.refused_over_client_share.load(Ordering::Relaxed),
            head_timeout: self.connections.head_timeouts.load(Ordering::Relaxed),
        }
    }
}
