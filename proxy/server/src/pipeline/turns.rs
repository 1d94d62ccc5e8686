//! Agent and voice turns on the worker: a model call placed in its turn, closed turns written and
//! exported, and a turn written again when a browser report joined one of its requests.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::store::RecordStore;
use tokentap_record::turn::{McpCalls, ModelCall, TurnRecord, TurnTracker, VoiceLinker};
use tokentap_record::Record;
use tokentap_telemetry::Telemetry;

use super::stats::PipelineStats;

/// How often idle turns are looked for.
pub(super) const TURN_TICK: Duration = Duration::from_secs(1);

pub(super) fn tick_turns(
    turns: Option<&mut TurnTracker>,
    voice: &VoiceLinker,
    mcp_calls: &mut McpCalls,
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
        emit_turn(turn, voice, mcp_calls, store, telemetry);
    }
    mcp_calls.expire(now);
    stats.turns.publish(tracker);
}

/// A closed turn: its metrics and spans, then `turns.jsonl`, the turn ring and the live feed.
pub(super) fn emit_turn(
    mut turn: TurnRecord,
    voice: &VoiceLinker,
    mcp_calls: &mut McpCalls,
    store: &RecordStore,
    telemetry: &Telemetry,
) {
    // Tool runs executed by MCP calls that passed tokentap: server time and harness time.
    if !mcp_calls.is_empty() {
        mcp_calls.join(&mut turn);
    }
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
pub(super) fn point_voice_records(turn: &TurnRecord, store: &RecordStore) {
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

pub(super) fn voice_turn_ref(turn: &TurnRecord) -> tokentap_record::turn::TurnRef {
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
pub(super) fn with_browser(turn: &mut TurnRecord, store: &RecordStore) -> bool {
    let step_record = |step: Option<&tokentap_record::turn::TurnStep>| step.and_then(|s| store.get(&s.request_id));
    let (first, last) = (step_record(turn.steps.first()), step_record(turn.steps.last()));
    turn.apply_browser(first.as_ref().map(|s| &s.record), last.as_ref().map(|s| &s.record))
}

/// Adds what the browser saw of the turn's voice requests (end of speech, playback), from their
/// records in the store.
pub(super) fn with_voice_browser(turn: &mut TurnRecord, store: &RecordStore) -> bool {
    let Some(voice) = turn.voice.as_mut() else { return false };
    voice.apply_browser(|request_id| {
        let stored = store.get(request_id)?;
        Some((stored.record.timeline.t0_unix_ns, stored.record.browser.clone()?))
    })
}

pub(super) fn voice_to_voice(turn: &TurnRecord) -> Option<f64> {
    turn.voice.as_ref()?.voice_to_voice_ms
}

/// A browser report joined a step or a voice request of a turn that is already written: the turn
/// is written again with what the browser saw (the last line for a turn id wins).
pub(super) fn rejoin_turn(turn_id: &str, store: &RecordStore, telemetry: &Telemetry) {
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

/// What the voice linker needs of a model call the turn tracker just placed.
pub(super) fn model_call<'a>(
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
