//! Turn-level aggregates over `turns.jsonl`: how long users waited per turn and where that time
//! went (model, tools, the client), steps and tool calls per turn. `markdown` renders them and
//! `explain` prints one turn.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use tokentap_analysis::Distribution;
use tokentap_record::turn::TurnRecord;

/// Turns read from files given oldest first; for a turn id seen twice the last line wins.
#[derive(Debug, Default)]
pub struct LoadedTurns {
    pub turns: Vec<TurnRecord>,
    pub skipped_lines: u64,
    pub files: Vec<PathBuf>,
}

/// Reads `turns.jsonl` and its rotated files in `data_dir` (none: no turns).
pub fn load_turns(data_dir: &Path) -> std::io::Result<LoadedTurns> {
    let files = crate::load::journal_files(data_dir, "turns");
    let last = crate::load::last_versions::<TurnRecord>(&files, |t| &t.turn_id)?;
    let mut out = LoadedTurns { turns: last.entries, skipped_lines: last.skipped_lines, files };
    out.turns.sort_by(|a, b| a.t0_unix_ns.cmp(&b.t0_unix_ns).then_with(|| a.turn_id.cmp(&b.turn_id)));
    Ok(out)
}

/// Turns rebuilt from request records, possibly written by several instances.
#[derive(Debug, Default)]
pub struct RebuiltTurns {
    pub turns: Vec<TurnRecord>,
    /// Turns whose steps came from more than one file (instance).
    pub split: u64,
    /// The records carried fleet turn keys (`[turns] fleet_key`): ids are the instances' own.
    pub fleet_keyed: bool,
}

/// Rebuilds turns from request records sorted by t0 (`records[i]` read from file `origins[i]`),
/// as one instance would have built them had it seen every request: tool results link to the
/// calls of a step another instance recorded. With fleet keys in the records, a turn keeps the
/// ids its instances derived.
pub fn rebuild_turns(
    records: &[tokentap_record::Record],
    origins: &[usize],
    mut config: tokentap_record::turn::TurnConfig,
) -> RebuiltTurns {
    use tokentap_record::turn::{StepInput, TurnTracker};
    let fleet_keyed = records.iter().any(|r| r.request.turn_anchor.is_some());
    config.fleet = fleet_keyed;
    // Nothing is forgotten for lack of room: a report reads what it is given.
    config.max_conversations = usize::MAX;
    config.max_state_bytes = usize::MAX;
    let headers = config.headers.clone();
    let mut tracker = TurnTracker::new(config);
    let origin_of: std::collections::HashMap<&str, usize> =
        records.iter().zip(origins).map(|(r, o)| (r.request_id.as_str(), *o)).collect();
    let mut steps: Vec<StepInput> = records.iter().filter_map(|r| StepInput::from_record(r, &headers)).collect();
    // In the order the instances placed them: when each step's record was complete.
    steps.sort_by_key(|s| (s.end_unix_ns, s.t0_unix_ns));
    let mut turns = Vec::new();
    for step in steps {
        turns.extend(tracker.tick(step.end_unix_ns));
        turns.extend(tracker.observe(step).closed);
    }
    turns.extend(tracker.tick(u64::MAX));
    let split = turns
        .iter()
        .filter(|t| {
            let mut files = t.steps.iter().filter_map(|s| origin_of.get(s.request_id.as_str()));
            files.next().is_some_and(|first| files.any(|f| f != first))
        })
        .count() as u64;
    turns.sort_by(|a, b| a.t0_unix_ns.cmp(&b.t0_unix_ns).then_with(|| a.turn_id.cmp(&b.turn_id)));
    RebuiltTurns { turns, split, fleet_keyed }
}

/// Turn percentiles (docs/metrics.md, "Turns").
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TurnSummary {
    /// Turns in the window.
    pub turns: u64,
    /// … of which made tool calls (agent turns).
    pub agent_turns: u64,
    /// Turns by how they ended.
    pub by_status: BTreeMap<String, u64>,
    /// Over complete turns: end to end, ms.
    pub e2e_ms: Option<Distribution>,
    /// Over complete agent turns: the share of e2e spent in model calls, tool runs and the client
    /// (0–1, each turn's own share).
    pub model_share: Option<Distribution>,
    pub tool_share: Option<Distribution>,
    pub client_share: Option<Distribution>,
    /// Over complete turns.
    pub steps: Option<Distribution>,
    pub tool_calls: Option<Distribution>,
    /// Over answered tool calls of every turn: ready → the request with the result, ms.
    pub tool_run_ms: Option<Distribution>,
    /// Over tool runs joined to an MCP call: the tool server's time, and the harness's (before +
    /// after the call), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_server_ms: Option<Distribution>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_harness_ms: Option<Distribution>,
    /// Turns with a voice part (a transcription or speech requests joined).
    pub voice_turns: u64,
    /// Over voice turns: from the transcription request's start (else the turn's) to the first
    /// audible sample of the answer's speech, ms (docs/metrics.md, "Voice").
    pub voice_to_first_audible_ms: Option<Distribution>,
    /// Over voice turns with a transcription: its upload start → transcript done, ms.
    pub transcription_ms: Option<Distribution>,
    /// Over speech requests of voice turns: sent → first audible sample, ms.
    pub speech_to_first_audible_ms: Option<Distribution>,
    /// Speech requests of voice turns with at least one predicted underrun.
    pub speech_with_underruns: u64,
    /// Over voice turns the browser probe saw both ends of: end of speech → heard, ms.
    pub voice_to_voice_ms: Option<Distribution>,
    /// Speech requests whose playback in the browser ran dry at least once, and those interrupted.
    pub speech_with_observed_underruns: u64,
    pub speech_interrupted: u64,
    /// Turns another instance began (`fragment`): left out of every figure above.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fragments: u64,
    /// Set when the turns were rebuilt from several instances' records (`report --records`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuilt: Option<RebuiltNote>,
    /// Each distribution's samples by its field's name (for plots; not serialized).
    #[serde(skip)]
    pub samples: BTreeMap<&'static str, Vec<f64>>,
}

/// How turns were rebuilt from records.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RebuiltNote {
    pub files: u64,
    /// Turns with steps in more than one file.
    pub split_turns: u64,
    pub fleet_keyed: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Aggregates the turns that started in `[since, until)`.
pub fn summarize_turns(turns: &[TurnRecord], since_unix_ns: Option<u64>, until_unix_ns: Option<u64>) -> TurnSummary {
    let windowed = turns
        .iter()
        .filter(|t| since_unix_ns.is_none_or(|s| t.t0_unix_ns >= s) && until_unix_ns.is_none_or(|u| t.t0_unix_ns < u));
    let (fragments, in_window): (Vec<&TurnRecord>, Vec<&TurnRecord>) = windowed.partition(|t| t.fragment);
    let mut by_status = BTreeMap::new();
    for t in &in_window {
        *by_status.entry(t.status.as_str().to_owned()).or_insert(0) += 1;
    }
    let complete: Vec<&TurnRecord> =
        in_window.iter().copied().filter(|t| t.status == tokentap_record::turn::TurnStatus::Complete).collect();
    let agent: Vec<&TurnRecord> =
        complete.iter().copied().filter(|t| t.totals.tool_calls > 0 && t.totals.e2e_ms > 0.0).collect();
    let voice: Vec<&tokentap_record::turn::TurnVoice> = in_window.iter().filter_map(|t| t.voice.as_ref()).collect();
    let speech = || voice.iter().flat_map(|v| v.speech.iter());
    let mcp = || in_window.iter().flat_map(|t| t.tool_runs.iter().filter_map(|r| r.mcp.as_ref()));
    let per_turn = |turns: &[&TurnRecord], f: &dyn Fn(&TurnRecord) -> f64| turns.iter().map(|t| f(t)).collect();
    // Each distribution's samples are kept too, by the field's name, for plots.
    let mut samples = BTreeMap::new();
    let mut dist = |name: &'static str, values: Vec<f64>| {
        let d = Distribution::from_samples(&values);
        if d.is_some() {
            samples.insert(name, values);
        }
        d
    };
    let mut summary = TurnSummary {
        turns: in_window.len() as u64,
        agent_turns: in_window.iter().filter(|t| t.totals.tool_calls > 0).count() as u64,
        by_status,
        e2e_ms: dist("e2e_ms", per_turn(&complete, &|t| t.totals.e2e_ms)),
        model_share: dist("model_share", per_turn(&agent, &|t| t.totals.model_ms / t.totals.e2e_ms)),
        tool_share: dist("tool_share", per_turn(&agent, &|t| t.totals.tool_ms / t.totals.e2e_ms)),
        client_share: dist("client_share", per_turn(&agent, &|t| t.totals.client_ms / t.totals.e2e_ms)),
        steps: dist("steps", per_turn(&complete, &|t| f64::from(t.totals.steps))),
        tool_calls: dist("tool_calls", per_turn(&complete, &|t| f64::from(t.totals.tool_calls))),
        tool_run_ms: dist(
            "tool_run_ms",
            in_window.iter().flat_map(|t| t.tool_runs.iter().filter_map(|r| r.duration_ms)).collect(),
        ),
        tool_server_ms: dist("tool_server_ms", mcp().map(|m| m.server_ms).collect()),
        tool_harness_ms: dist("tool_harness_ms", mcp().map(|m| m.harness_before_ms + m.harness_after_ms).collect()),
        voice_turns: voice.len() as u64,
        voice_to_first_audible_ms: dist(
            "voice_to_first_audible_ms",
            voice.iter().filter_map(|v| v.first_audible_ms).collect(),
        ),
        transcription_ms: dist(
            "transcription_ms",
            voice.iter().filter_map(|v| v.transcription.as_ref()?.transcript_done_ms).collect(),
        ),
        speech_to_first_audible_ms: dist(
            "speech_to_first_audible_ms",
            speech().filter_map(|s| Some(s.first_audible_ms? - s.start_ms)).collect(),
        ),
        speech_with_underruns: speech().filter(|s| s.predicted_underruns.is_some_and(|n| n > 0)).count() as u64,
        voice_to_voice_ms: dist("voice_to_voice_ms", voice.iter().filter_map(|v| v.voice_to_voice_ms).collect()),
        speech_with_observed_underruns: speech().filter(|s| s.playout.as_ref().is_some_and(|p| p.underruns > 0)).count()
            as u64,
        speech_interrupted: speech().filter(|s| s.playout.as_ref().is_some_and(|p| p.interrupted)).count() as u64,
        fragments: fragments.len() as u64,
        rebuilt: None,
        samples: BTreeMap::new(),
    };
    summary.samples = samples;
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(id: &str, t0: u64, status: &str, e2e: f64, model: f64, tool: f64, tool_calls: u32) -> TurnRecord {
        serde_json::from_value(serde_json::json!({
            "record_version": 1, "turn_id": id, "conversation_id": "c", "turn_index": 0,
            "trace_id": "0af7651916cd43dd8448eb211c80319c", "started_at": "2027-01-15T08:00:00Z",
            "t0_unix_ns": t0, "route": "/", "status": status,
            "totals": {"e2e_ms": e2e, "model_ms": model, "tool_ms": tool, "client_ms": e2e - model - tool,
                       "steps": 1 + tool_calls.min(1), "tool_calls": tool_calls, "unanswered_tool_calls": 0},
            "steps": [{"step": 1, "request_id": "r", "span_id": "b7ad6b7169203331", "link": "first", "start_ms": 0.0,
                       "end_ms": model, "outcome": "ok", "tool_calls": tool_calls, "ttft_tool_ms": 5.0}],
            "tool_runs": (0..tool_calls).map(|i| serde_json::json!({"call_id": format!("call_{i}"), "name": "f", "step": 1,
                       "ready_ms": 10.0, "result_step": 2, "result_ms": 10.0 + tool, "duration_ms": tool})).collect::<Vec<_>>(),
            "critical_path": [{"kind": "model", "start_ms": 0.0, "end_ms": model, "step": 1},
                              {"kind": "tool", "start_ms": model, "end_ms": model + tool, "step": 2, "call_ids": ["call_0"]}]
        }))
        .unwrap()
    }

    #[test]
    fn turn_percentiles_cover_complete_turns_and_shares_cover_agent_turns() {
        let turns = vec![
            turn("a", 10, "complete", 1000.0, 500.0, 500.0, 2),
            turn("b", 20, "complete", 2000.0, 1500.0, 500.0, 1),
            turn("c", 30, "complete", 300.0, 300.0, 0.0, 0),
            turn("d", 40, "incomplete", 9000.0, 100.0, 0.0, 1),
            turn("e", 50, "complete", 100.0, 100.0, 0.0, 0),
        ];
        let s = summarize_turns(&turns, None, Some(50));
        assert_eq!((s.turns, s.agent_turns), (4, 3));
        assert_eq!(s.by_status.get("incomplete"), Some(&1));
        let e2e = s.e2e_ms.as_ref().unwrap();
        assert_eq!((e2e.count, e2e.max), (3, 2000.0));
        let model = s.model_share.as_ref().unwrap();
        assert_eq!((model.count, model.p50), (2, 0.625));
        assert_eq!(s.tool_run_ms.as_ref().unwrap().count, 4, "every answered call of every turn");
        let md = crate::markdown::render_turns(&s);
        assert!(md.contains("| turn e2e (ms) | 3 |"), "{md}");
        let text = crate::explain::explain_turn(&turns[0]);
        assert!(text.contains("model 500 ms (50%), tools 500 ms (50%)"), "{text}");
        assert!(text.contains("f [call_1] from step 1: ready 10 → result 510 (step 2) = 500 ms"), "{text}");
        assert_eq!(s.voice_turns, 0);
        assert!(!md.contains("voice turns"), "{md}");
    }

    #[test]
    fn voice_turns_get_their_own_rows_and_explain_lays_out_the_wait() {
        let mut voiced = turn("v", 10, "complete", 400.0, 400.0, 0.0, 0);
        voiced.voice = Some(
            serde_json::from_value(serde_json::json!({
                "t0_unix_ns": 5,
                "transcription": {"request_id": "stt", "link": "transcript", "upload_end_ms": 1.0, "transcript_done_ms": 290.0},
                "model_start_ms": 330.0, "first_answer_token_ms": 370.0,
                "speech": [{"request_id": "tts", "link": "answer_text", "start_ms": 500.0, "first_audio_ms": 620.0,
                            "first_audible_ms": 820.0, "leading_silence_ms": 200.0, "audio_ms": 1800.0, "predicted_underruns": 2}],
                "first_audible_ms": 820.0,
                "segments": [{"kind": "upload", "start_ms": 0.0, "end_ms": 1.0},
                             {"kind": "leading_silence", "start_ms": 620.0, "end_ms": 820.0}]
            }))
            .unwrap(),
        );
        let s = summarize_turns(&[voiced.clone(), turn("plain", 20, "complete", 100.0, 100.0, 0.0, 0)], None, None);
        assert_eq!((s.voice_turns, s.speech_with_underruns), (1, 1));
        assert_eq!(s.voice_to_first_audible_ms.as_ref().map(|d| d.p50), Some(820.0));
        assert_eq!(s.speech_to_first_audible_ms.as_ref().map(|d| d.p50), Some(320.0));
        let md = crate::markdown::render_turns(&s);
        assert!(md.contains("| voice to first audible sample (ms) | 1 |"), "{md}");
        let text = crate::explain::explain_turn(&voiced);
        assert!(text.contains("to the first audible sample"), "{text}");
        assert!(text.contains("voice to first audible sample (wire): 820 ms"), "{text}");
        assert!(
            text.contains("speech tts: sent 500, first byte 620, first audible 820 (leading silence 200)"),
            "{text}"
        );
    }
}
