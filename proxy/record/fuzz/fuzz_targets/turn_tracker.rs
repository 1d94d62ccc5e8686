//! Arbitrary request bodies (cut from the input at 0xFF bytes) through `analyze_request` and the
//! turn tracker, with tool calls whose ids the input picks (often ids the bodies carry results for,
//! so links happen). Checks: nothing panics, the tracker stays within its conversation cap, and
//! every closed turn's model, tool and client time add up to its e2e, none negative.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokentap_analysis::analyze_request;
use tokentap_record::turn::{StepInput, StepToolCall, TurnConfig, TurnKeys, TurnRecord, TurnTracker};
use tokentap_record::Outcome;

const PATHS: &[&str] =
    &["/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1beta/models/g:streamGenerateContent", "/api/chat"];

fn check(turn: &TurnRecord) {
    let t = &turn.totals;
    for v in [t.e2e_ms, t.model_ms, t.tool_ms, t.client_ms] {
        assert!(v.is_finite() && v >= 0.0, "{t:?}");
    }
    assert!((t.model_ms + t.tool_ms + t.client_ms - t.e2e_ms).abs() <= 1e-6 * t.e2e_ms.max(1.0), "{t:?}");
    assert!(turn.steps.len() as u32 <= t.steps);
}

fuzz_target!(|data: &[u8]| {
    let config = TurnConfig { max_conversations: 4, max_state_bytes: 16 << 10, max_steps: 8, ..TurnConfig::default() };
    let mut tracker = TurnTracker::new(config);
    let mut now = 1_800_000_000_000_000_000u64;
    for (i, body) in data.split(|b| *b == 0xff).take(32).enumerate() {
        let path = PATHS[body.first().map_or(0, |b| *b as usize) % PATHS.len()];
        let info = analyze_request(path, Some("application/json"), body, false);
        let Some(last_input) = info.last_input else { continue };
        // Tool calls: reuse the ids of the results this body sends (a later body may answer them),
        // plus one new id derived from the position.
        let mut tool_calls: Vec<StepToolCall> = info
            .tool_result_ids
            .iter()
            .take(body.len() % 3)
            .map(|id| StepToolCall { id: Some(id.clone()), name: Some("f".into()), ready_unix_ns: now + 10, arguments_hash: None })
            .collect();
        if body.len() % 2 == 1 {
            tool_calls.push(StepToolCall { id: Some(format!("call_{i}")), name: None, ready_unix_ns: now + 5, arguments_hash: None });
        }
        let keys = TurnKeys::of_request(&info, (body.len() % 3 == 0).then_some(i as u64));
        let step = StepInput {
            request_id: format!("{i:024x}"),
            span_id: format!("{i:016x}"),
            trace_id: format!("{:032x}", i % 3),
            parent_span_id: (body.len() % 5 == 0).then(|| "b7ad6b7169203331".to_owned()),
            started_at: "2027-01-15T08:00:00Z".into(),
            route: "/".into(),
            t0_unix_ns: now,
            end_unix_ns: now + (body.len() as u64) * 1000,
            last_content_unix_ns: (body.len() % 4 != 0).then_some(now + 500),
            outcome: if body.len() % 7 == 0 { Outcome::HttpError } else { Outcome::Ok },
            model: info.model.clone(),
            ttft_answer_ms: None,
            ttft_tool_ms: None,
            input_tokens: info.prompt_tokens,
            output_tokens: None,
            turn_header: (body.len() % 11 == 0).then(|| String::from_utf8_lossy(&body[..body.len().min(8)]).into_owned()),
            conversation_header: None,
            last_input: Some(last_input),
            tool_result_ids: info.tool_result_ids,
            tool_result_names: info.tool_result_names,
            previous_response_id: info.previous_response_id,
            prefix_hashes: info.prefix_hashes,
            response_id: Some(format!("resp_{}", i % 4)),
            tool_calls,
            keys,
        };
        let placement = tracker.observe(step);
        assert!(placement.turn.step >= 1);
        placement.closed.iter().for_each(check);
        assert!(tracker.conversations() <= 4);
        now += 1_000_000 * (1 + u64::from(body.first().copied().unwrap_or(0)));
        if body.len() % 13 == 0 {
            tracker.tick(now + 200_000_000_000).iter().for_each(check);
        }
    }
    tracker.close_all().iter().for_each(check);
    assert_eq!(tracker.open_turns(), 0);
});
