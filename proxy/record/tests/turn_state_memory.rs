//! The turn tracker's `state_bytes` is what its state really takes from the allocator, within a
//! stated margin: `[turns] max_state_bytes` bounds memory, not a figure several times smaller.

use std::alloc::System;

use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use tokentap_analysis::LastInput;
use tokentap_record::turn::{StepInput, StepToolCall, TurnConfig, TurnKeys, TurnTracker};
use tokentap_record::Outcome;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The `n`th request of conversation `c`: a tool call to answer, prefix hashes that extend the
/// previous request's, a response id, realistic id lengths.
fn step(c: u64, n: u64) -> StepInput {
    let t = 1_800_000_000_000_000_000 + (c * 1000 + n) * 1_000_000;
    StepInput {
        request_id: format!("{:024x}", c * 1000 + n),
        span_id: format!("{:016x}", c * 1000 + n),
        trace_id: format!("{:032x}", c * 1000 + n),
        parent_span_id: None,
        started_at: "2027-01-15T08:00:00.000000Z".into(),
        route: "/v1/chat/completions".into(),
        t0_unix_ns: t,
        end_unix_ns: t + 500_000,
        last_content_unix_ns: Some(t + 400_000),
        outcome: Outcome::Ok,
        model: Some("gpt-4.1-mini-2025-04-14".into()),
        ttft_answer_ms: None,
        ttft_tool_ms: Some(120.0),
        input_tokens: Some(1000),
        output_tokens: Some(20),
        turn_header: None,
        conversation_header: None,
        last_input: Some(if n == 0 { LastInput::User } else { LastInput::ToolResult }),
        tool_result_ids: if n == 0 { vec![] } else { vec![format!("call_{c:08}_{:04}abcdefghijklmn", n - 1)] },
        tool_result_names: vec![],
        previous_response_id: None,
        prefix_hashes: (0..=n).map(|i| c << 20 | i).collect(),
        response_id: Some(format!("resp_{c:08}{n:04}abcdefghijklmnopqrstuvwxyz0123456789")),
        keys: TurnKeys { turn_anchor: Some(c << 20), conversation_anchor: Some(c << 20), ..TurnKeys::default() },
        tool_calls: vec![StepToolCall {
            id: Some(format!("call_{c:08}_{n:04}abcdefghijklmn")),
            name: Some("get_weather".into()),
            ready_unix_ns: t + 450_000,
            arguments_hash: Some(c),
        }],
    }
}

#[test]
fn state_bytes_is_the_memory_the_tracker_holds() {
    let region = Region::new(GLOBAL);
    let mut tracker = TurnTracker::new(TurnConfig { max_state_bytes: 1 << 30, ..TurnConfig::default() });
    // 2,000 conversations, each with an open turn of 6 steps (a tool call each).
    for c in 0..2000 {
        for n in 0..6 {
            let placement = tracker.observe(step(c, n));
            drop(placement);
        }
    }
    let change = region.change();
    let live_bytes = change.bytes_allocated + change.bytes_reallocated.max(0) as usize - change.bytes_deallocated;
    let live_allocations = change.allocations - change.deallocations;
    // What the allocator holds for them: the bytes asked for, plus its header and rounding (about
    // 16 bytes an allocation).
    let held = live_bytes + 16 * live_allocations;
    let estimate = tracker.state_bytes();
    assert_eq!(tracker.open_turns(), 2000);
    let ratio = estimate as f64 / held as f64;
    assert!(
        (0.75..=1.5).contains(&ratio),
        "state_bytes {estimate} vs {held} held ({live_bytes} B in {live_allocations} allocations): ratio {ratio:.2}"
    );
}
