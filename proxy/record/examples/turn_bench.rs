//! What turn tracking costs: the request-side conversation shape (JSON walk and prefix hashes)
//! and `TurnTracker::observe` per step, and the tracker's memory per open turn.
//!
//!     cargo run --release -p tokentap-record --example turn_bench
//!
//! Prints a markdown table (BENCHMARKS.md, "Turn tracking").

use std::time::Instant;

use serde_json::{json, Value};
use tokentap_analysis::analyze_request;
use tokentap_record::turn::{StepInput, StepToolCall, TurnConfig, TurnKeys, TurnTracker};
use tokentap_record::Outcome;

/// A chat body of `history` earlier exchanges (user, assistant with a tool call, tool result), then
/// tool results for `calls` new calls (`None`: a new user message).
fn body(conversation: usize, history: usize, calls: Option<&[String]>) -> Value {
    let mut messages =
        vec![json!({"role": "system", "content": "You are a helpful agent. Answer briefly and use the tools."})];
    for h in 0..history {
        messages.push(json!({"role": "user", "content": format!("conversation {conversation} question {h}: what is the weather like?")}));
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("call_{conversation}_{h}"), "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("call_{conversation}_{h}"), "content": "18 degrees and sunny, light wind from the west"}));
    }
    match calls {
        Some(ids) => {
            let tool_calls: Vec<Value> = ids
                .iter()
                .map(|id| json!({"id": id, "type": "function", "function": {"name": "get_time", "arguments": "{}"}}))
                .collect();
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": tool_calls}));
            for id in ids {
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": "12:00"}));
            }
        }
        None => {
            messages.push(json!({"role": "user", "content": format!("conversation {conversation}: and the time?")}))
        }
    }
    json!({"model": "gpt-4o-mini", "stream": true, "messages": messages,
           "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
                     {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]})
}

fn step(bytes: &[u8], i: usize, calls: &[String]) -> StepInput {
    let info = analyze_request("/v1/chat/completions", Some("application/json"), bytes, false);
    let t0 = 1_800_000_000_000_000_000 + i as u64 * 1_000_000;
    let keys = TurnKeys::of_request(&info, None);
    StepInput {
        request_id: format!("{i:024x}"),
        span_id: format!("{i:016x}"),
        trace_id: format!("{i:032x}"),
        parent_span_id: None,
        started_at: "2027-01-15T08:00:00Z".into(),
        route: "/".into(),
        t0_unix_ns: t0,
        end_unix_ns: t0 + 500_000,
        last_content_unix_ns: Some(t0 + 400_000),
        outcome: Outcome::Ok,
        model: info.model.clone(),
        ttft_answer_ms: None,
        ttft_tool_ms: Some(0.2),
        input_tokens: info.prompt_tokens,
        output_tokens: Some(20),
        turn_header: None,
        conversation_header: None,
        last_input: info.last_input,
        tool_result_ids: info.tool_result_ids,
        tool_result_names: info.tool_result_names,
        previous_response_id: None,
        prefix_hashes: info.prefix_hashes,
        response_id: Some(format!("chatcmpl-{i}")),
        tool_calls: calls
            .iter()
            .map(|id| StepToolCall {
                id: Some(id.clone()),
                name: Some("get_time".into()),
                ready_unix_ns: t0 + 450_000,
                arguments_hash: None,
            })
            .collect(),
        keys,
    }
}

fn main() {
    tokentap_analysis::load_encoding();
    println!("| history (exchanges) | body bytes | request analysis µs (all of it) | observe µs per step | open turns | tracker bytes per conversation |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for history in [0usize, 5, 20] {
        let conversations = 2000;
        // Step 1 of every conversation (a new user message; its response makes 2 calls), then
        // step 2 of half of them (the results): the other half stays open.
        let mut first = Vec::new();
        let mut second = Vec::new();
        for c in 0..conversations {
            let calls = vec![format!("call_{c}_new_a"), format!("call_{c}_new_b")];
            first.push((serde_json::to_vec(&body(c, history, None)).unwrap(), calls.clone()));
            second.push(serde_json::to_vec(&body(c, history, Some(&calls))).unwrap());
        }
        let started = Instant::now();
        let steps1: Vec<StepInput> = first.iter().enumerate().map(|(i, (b, calls))| step(b, i, calls)).collect();
        let steps2: Vec<StepInput> =
            second.iter().enumerate().take(conversations / 2).map(|(i, b)| step(b, conversations + i, &[])).collect();
        let analysis_us = started.elapsed().as_secs_f64() * 1e6 / (steps1.len() + steps2.len()) as f64;
        let mut tracker = TurnTracker::new(TurnConfig {
            max_conversations: 1_000_000,
            max_state_bytes: 1 << 34,
            ..TurnConfig::default()
        });
        let n = steps1.len() + steps2.len();
        let started = Instant::now();
        for s in steps1 {
            tracker.observe(s);
        }
        for s in steps2 {
            tracker.observe(s);
        }
        let observe_us = started.elapsed().as_secs_f64() * 1e6 / n as f64;
        let open = tracker.open_turns();
        let per_open = tracker.state_bytes() as f64 / tracker.conversations() as f64;
        println!(
            "| {history} | {} | {:.1} | {:.2} | {open} of {} | {:.0} |",
            first[0].0.len(),
            analysis_us,
            observe_us,
            tracker.conversations(),
            per_open
        );
    }
}
