//! Snapshot tests of the text outputs users read: `tokentap explain` for a request and for a turn,
//! and the markdown report (`tokentap report`). A change to any of them shows up as a diff in
//! review (`cargo insta review`, or `INSTA_UPDATE=always` then `git diff`), not as a silent drift.

use tokentap_record::diagnosis::diagnose;
use tokentap_record::fixtures::{smooth_browser, stream_record};
use tokentap_record::turn::TurnRecord;

use crate::summary::{build_report, ReportOptions};

fn agent_turn() -> TurnRecord {
    serde_json::from_value(serde_json::json!({
        "record_version": 1, "turn_id": "turn-agent", "conversation_id": "c1", "turn_index": 0,
        "trace_id": "0af7651916cd43dd8448eb211c80319c", "started_at": "2027-01-15T08:00:00Z",
        "t0_unix_ns": 1_800_000_000_000_000_000u64, "route": "/v1/chat/completions", "status": "complete",
        "totals": {"e2e_ms": 1500.0, "model_ms": 900.0, "tool_ms": 520.0, "client_ms": 80.0,
                   "steps": 2, "tool_calls": 1, "unanswered_tool_calls": 0},
        "steps": [
            {"step": 1, "request_id": "r1", "span_id": "b7ad6b7169203331", "link": "first", "start_ms": 0.0,
             "end_ms": 400.0, "outcome": "ok", "tool_calls": 1, "ttft_tool_ms": 180.0},
            {"step": 2, "request_id": "r2", "span_id": "b7ad6b7169203332", "link": "tool_result", "start_ms": 920.0,
             "end_ms": 1420.0, "outcome": "ok", "tool_calls": 0, "ttft_answer_ms": 210.0}
        ],
        "tool_runs": [{"call_id": "call_0", "name": "get_weather", "step": 1, "ready_ms": 400.0, "result_step": 2,
                       "result_ms": 920.0, "duration_ms": 520.0}],
        "critical_path": [{"kind": "model", "start_ms": 0.0, "end_ms": 400.0, "step": 1},
                          {"kind": "tool", "start_ms": 400.0, "end_ms": 920.0, "step": 2, "call_ids": ["call_0"]},
                          {"kind": "model", "start_ms": 920.0, "end_ms": 1420.0, "step": 2}]
    }))
    .expect("the agent turn fixture parses")
}

fn voice_turn() -> TurnRecord {
    let mut turn = agent_turn();
    turn.turn_id = "turn-voice".into();
    turn.voice = Some(
        serde_json::from_value(serde_json::json!({
            "t0_unix_ns": 1_800_000_000_000_000_000u64,
            "transcription": {"request_id": "stt", "link": "transcript", "upload_end_ms": 1.0, "transcript_done_ms": 290.0},
            "model_start_ms": 330.0, "first_answer_token_ms": 370.0,
            "speech": [{"request_id": "tts", "link": "answer_text", "start_ms": 500.0, "first_audio_ms": 620.0,
                        "first_audible_ms": 820.0, "leading_silence_ms": 200.0, "audio_ms": 1800.0, "predicted_underruns": 2}],
            "first_audible_ms": 820.0,
            "segments": [{"kind": "upload", "start_ms": 0.0, "end_ms": 1.0},
                         {"kind": "leading_silence", "start_ms": 620.0, "end_ms": 820.0}]
        }))
        .expect("the voice fixture parses"),
    );
    turn
}

#[test]
fn explain_of_a_streamed_request_with_its_browser() {
    let record = smooth_browser(stream_record(12));
    let diagnosis = diagnose(&record);
    insta::assert_snapshot!(crate::explain(&record, diagnosis.as_ref()));
}

#[test]
fn explain_of_an_agent_turn() {
    insta::assert_snapshot!(crate::explain::explain_turn(&agent_turn()));
}

#[test]
fn explain_of_a_voice_turn() {
    insta::assert_snapshot!(crate::explain::explain_turn(&voice_turn()));
}

#[test]
fn markdown_report_of_streamed_requests() {
    let records: Vec<_> = (3..9).map(stream_record).collect();
    let mut report = build_report(&records, &ReportOptions::default());
    report.generated_at = "2027-01-15T08:00:00Z".into();
    insta::assert_snapshot!(crate::markdown::render(&report));
}

#[test]
fn markdown_turns_section() {
    let turns = [agent_turn(), voice_turn()];
    let summary = crate::turns::summarize_turns(&turns, None, None);
    insta::assert_snapshot!(crate::markdown::render_turns(&summary));
}

/// A realtime session's record with two responses: one after the user's speech (server VAD), one
/// the client asked for after a tool call.
fn realtime_record() -> tokentap_record::Record {
    use tokentap_analysis::realtime::{RealtimeAnalyzer, RealtimeContext, RealtimeResponse};
    let response = |json: serde_json::Value| -> RealtimeResponse {
        serde_json::from_value(json).expect("the response fixture parses")
    };
    let mut session =
        RealtimeAnalyzer::new(RealtimeContext { deflate: None, limits: Default::default() }).finish(9_000_000_000);
    session.responses = vec![
        response(serde_json::json!({
            "response_id": "resp_1", "trigger": "server_vad", "created_ms": 1_210.0, "first_audio_ms": 1_480.0,
            "audio_deltas": 12, "audio_ms": 2_400.0, "real_time_factor": 0.4,
            "user": {"speech_stopped_ms": 1_200.0, "speech_end_estimated_ms": 700.0},
            "time_to_first_audio_from_speech_stopped_ms": 280.0, "time_to_first_audio_from_speech_end_ms": 780.0,
            "tool_calls": [{"call_id": "call_1", "name": "lookup", "ready_ms": 3_000.0, "tool_gap_ms": 350.0}],
            "interruption": {}
        })),
        response(serde_json::json!({
            "response_id": "resp_2", "trigger": "client", "create_sent_ms": 3_350.0, "created_ms": 3_360.0,
            "first_audio_ms": 3_700.0, "audio_deltas": 8, "audio_ms": 1_600.0, "real_time_factor": 0.5,
            "time_to_first_audio_from_create_ms": 350.0,
            "interruption": {"speech_started_ms": 4_100.0, "truncated_at_audio_ms": 400.0}
        })),
    ];
    let mut record = stream_record(1);
    record.realtime = Some(session);
    record
}

#[test]
fn markdown_realtime_section() {
    let records = [realtime_record()];
    let used: Vec<_> = records.iter().collect();
    let summary = crate::realtime::summarize_realtime(&used).expect("a realtime session is in the records");
    assert_eq!((summary.sessions, summary.responses, summary.responses_interrupted), (1, 2, 1));
    insta::assert_snapshot!(crate::markdown::render_realtime(&summary));
    assert!(crate::realtime::summarize_realtime(&[&stream_record(2)]).is_none());
}
