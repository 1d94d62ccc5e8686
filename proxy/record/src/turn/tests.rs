//! The tracker over steps built from real request bodies of each provider (through
//! `analyze_request`, so prefix hashes and tool results are what the server would compute).

use proptest::prelude::*;
use serde_json::{json, Value};
use tokentap_analysis::analyze_request;

use super::*;
use crate::Outcome;

const S: u64 = 1_000_000_000;
const T0: u64 = 1_800_000_000 * S;

/// A step from a request body; the response made `calls` (id, name, ready at seconds).
fn step(path: &str, body: &Value, t0_s: f64, end_s: f64, calls: &[(&str, &str, f64)]) -> StepInput {
    let bytes = serde_json::to_vec(body).unwrap();
    let info = analyze_request(path, Some("application/json"), &bytes, false);
    let at = |s: f64| T0 + (s * 1e9) as u64;
    let ids: Vec<&str> = calls.iter().map(|(id, _, _)| *id).filter(|id| !id.is_empty()).collect();
    let keys = TurnKeys::of_request(&info, tokentap_analysis::conversation::reply_key(ids, "an answer"));
    StepInput {
        request_id: format!("req-{t0_s}"),
        span_id: crate::trace::random_hex(8),
        trace_id: crate::trace::random_hex(16),
        parent_span_id: None,
        started_at: "2027-01-15T08:00:00Z".into(),
        route: "/".into(),
        t0_unix_ns: at(t0_s),
        end_unix_ns: at(end_s),
        last_content_unix_ns: Some(at(end_s) - 1_000_000),
        outcome: Outcome::Ok,
        model: info.model.clone(),
        ttft_answer_ms: None,
        ttft_tool_ms: None,
        input_tokens: info.prompt_tokens,
        output_tokens: Some(10),
        turn_header: None,
        conversation_header: None,
        last_input: info.last_input,
        tool_result_ids: info.tool_result_ids,
        tool_result_names: info.tool_result_names,
        previous_response_id: info.previous_response_id,
        prefix_hashes: info.prefix_hashes,
        response_id: None,
        tool_calls: calls
            .iter()
            .map(|(id, name, ready)| StepToolCall {
                id: (!id.is_empty()).then(|| id.to_string()),
                name: Some(name.to_string()),
                ready_unix_ns: at(*ready),
                arguments_hash: None,
            })
            .collect(),
        keys,
    }
}

fn tools() -> Value {
    json!([{"type":"function","function":{"name":"get_weather","parameters":{}}},
           {"type":"function","function":{"name":"get_time","parameters":{}}}])
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn an_openai_chat_tool_loop_with_parallel_calls_is_one_turn_with_a_run_per_call() {
    let mut tracker = TurnTracker::new(TurnConfig::default());
    let user = json!({"role":"user","content":"Weather and time in Paris?"});
    let first = step(
        "/v1/chat/completions",
        &json!({"model":"m","messages":[user],"tools":tools()}),
        0.0,
        1.0,
        &[("call_a", "get_weather", 0.8), ("call_b", "get_time", 0.9)],
    );
    let p1 = tracker.observe(first.clone());
    assert!(p1.closed.is_empty());
    assert_eq!((p1.turn.step, p1.turn.link), (1, TurnLink::First));
    assert_eq!(p1.turn.trace_id, first.trace_id);
    assert!(p1.turn.agent_span_id.is_some(), "a turn with tool calls has an agent span");
    let assistant = json!({"role":"assistant","content":null,"tool_calls":[
        {"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{}"}},
        {"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{}"}}]});
    let second = step(
        "/v1/chat/completions",
        &json!({"model":"m","messages":[user, assistant,
        {"role":"tool","tool_call_id":"call_a","content":"18C"},
        {"role":"tool","tool_call_id":"call_b","content":"noon"}],"tools":tools()}),
        1.6,
        2.5,
        &[],
    );
    let p2 = tracker.observe(second);
    assert_eq!((p2.turn.step, p2.turn.link), (2, TurnLink::ToolResult));
    assert_eq!(p2.turn.turn_id, p1.turn.turn_id);
    assert_eq!(p2.turn.trace_id, first.trace_id, "later steps join the first step's trace");
    assert_eq!(p2.turn.agent_span_id, p1.turn.agent_span_id);
    let [turn] = p2.closed.as_slice() else { panic!("the final answer closes the turn: {:?}", p2.closed) };
    assert_eq!(turn.status, TurnStatus::Complete);
    assert_eq!((turn.totals.steps, turn.totals.tool_calls, turn.totals.unanswered_tool_calls), (2, 2, 0));
    let runs: Vec<(Option<&str>, f64)> =
        turn.tool_runs.iter().map(|r| (r.call_id.as_deref(), r.duration_ms.unwrap())).collect();
    assert!(close(runs[0].1, 800.0) && close(runs[1].1, 700.0), "{runs:?}");
    assert_eq!(runs[0].0, Some("call_a"));
    let t = &turn.totals;
    assert!(close(t.e2e_ms, 2499.0), "{t:?}");
    assert!(close(t.model_ms, 1000.0 + 899.0), "{t:?}");
    assert!(close(t.tool_ms, 600.0), "{t:?}");
    assert!(close(t.model_ms + t.tool_ms + t.client_ms, t.e2e_ms), "{t:?}");
    let kinds: Vec<SegmentKind> = turn.critical_path.iter().map(|s| s.kind).collect();
    assert_eq!(kinds, [SegmentKind::Model, SegmentKind::Tool, SegmentKind::Model]);
    assert_eq!(turn.critical_path[1].call_ids, ["call_a", "call_b"]);
}

#[test]
fn anthropic_responses_and_gemini_results_link_by_their_own_ids() {
    // Anthropic: tool_use_id in a user message's tool_result block.
    let mut tracker = TurnTracker::new(TurnConfig::default());
    let user = json!({"role":"user","content":"Weather?"});
    let p1 = tracker.observe(step(
        "/v1/messages",
        &json!({"model":"c","system":"Be brief.","messages":[user],
        "tools":[{"name":"get_weather","input_schema":{}}]}),
        0.0,
        1.0,
        &[("toolu_1", "get_weather", 0.9)],
    ));
    let p2 = tracker.observe(step(
        "/v1/messages",
        &json!({"model":"c","system":"Be brief.","messages":[user,
        {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"18C"}]}]}),
        1.5,
        2.0,
        &[],
    ));
    assert_eq!((p2.turn.link, p2.turn.step), (TurnLink::ToolResult, 2));
    assert_eq!(p2.turn.turn_id, p1.turn.turn_id);
    assert_eq!(p2.closed[0].tool_runs[0].duration_ms, Some(600.0));

    // Responses: function_call_output by call_id, and a next turn by previous_response_id alone.
    let mut tracker = TurnTracker::new(TurnConfig::default());
    let mut s1 = step(
        "/v1/responses",
        &json!({"model":"o","input":"Weather?","tools":[{"type":"function","name":"get_weather"}]}),
        0.0,
        1.0,
        &[("call_r", "get_weather", 1.0)],
    );
    s1.response_id = Some("resp_1".into());
    let p1 = tracker.observe(s1);
    let mut s2 = step(
        "/v1/responses",
        &json!({"model":"o","previous_response_id":"resp_1",
        "input":[{"type":"function_call_output","call_id":"call_r","output":"18C"}]}),
        1.2,
        2.0,
        &[],
    );
    s2.response_id = Some("resp_2".into());
    let p2 = tracker.observe(s2);
    assert_eq!((p2.turn.link, p2.turn.turn_id.as_str()), (TurnLink::ToolResult, p1.turn.turn_id.as_str()));
    let p3 = tracker.observe(step(
        "/v1/responses",
        &json!({"model":"o","previous_response_id":"resp_2",
        "input":[{"role":"user","content":"And tomorrow?"}]}),
        5.0,
        6.0,
        &[],
    ));
    assert_eq!(p3.turn.link, TurnLink::NextTurn);
    assert_ne!(p3.turn.turn_id, p1.turn.turn_id);
    assert_eq!(p3.turn.conversation_id, p1.turn.conversation_id);
    assert_eq!(p3.closed[0].turn_index, 1);

    // Gemini without ids: the conversation is found by its prefix, the call by name and order.
    let mut tracker = TurnTracker::new(TurnConfig::default());
    let user = json!({"role":"user","parts":[{"text":"Weather?"}]});
    tracker.observe(step(
        "/v1beta/models/g:streamGenerateContent",
        &json!({"contents":[user],
        "tools":[{"functionDeclarations":[{"name":"get_weather"}]}]}),
        0.0,
        1.0,
        &[("", "get_weather", 1.0)],
    ));
    let p2 = tracker.observe(step(
        "/v1beta/models/g:streamGenerateContent",
        &json!({"contents":[user,
        {"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{}}}]},
        {"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"t":18}}}]}]}),
        1.4,
        2.0,
        &[],
    ));
    assert_eq!((p2.turn.link, p2.turn.step), (TurnLink::Prefix, 2));
    assert_eq!(p2.closed[0].tool_runs[0].duration_ms, Some(400.0));
}

#[test]
fn two_turns_of_one_conversation_share_its_id() {
    let mut tracker = TurnTracker::new(TurnConfig::default());
    let sys = json!({"role":"system","content":"Be brief."});
    let u1 = json!({"role":"user","content":"Hi"});
    let p1 = tracker.observe(step("/v1/chat/completions", &json!({"messages":[sys, u1]}), 0.0, 1.0, &[]));
    assert_eq!(p1.closed.len(), 1, "a plain answer is a one-step turn");
    let p2 = tracker.observe(step(
        "/v1/chat/completions",
        &json!({"messages":[sys, u1,
        {"role":"assistant","content":"Hello!"}, {"role":"user","content":"How are you?"}]}),
        9.0,
        10.0,
        &[],
    ));
    assert_eq!(p2.turn.link, TurnLink::NextTurn);
    assert_eq!(p2.turn.conversation_id, p1.turn.conversation_id);
    assert_ne!(p2.turn.turn_id, p1.turn.turn_id);
    assert_eq!((p1.closed[0].turn_index, p2.closed[0].turn_index), (0, 1));
    assert!(p1.closed[0].agent_span_id.is_none(), "no agent span without tool calls");
    // Another system prompt is another conversation.
    let p3 = tracker.observe(step(
        "/v1/chat/completions",
        &json!({"messages":[{"role":"system","content":"Other."}, u1,
        {"role":"assistant","content":"Hello!"}, {"role":"user","content":"How are you?"}]}),
        11.0,
        12.0,
        &[],
    ));
    assert_eq!(p3.turn.link, TurnLink::First);
}

#[test]
fn unknown_tool_results_and_shared_prefixes_link_nothing_and_are_counted() {
    let mut tracker = TurnTracker::new(TurnConfig::default());
    let p = tracker.observe(step(
        "/v1/chat/completions",
        &json!({"messages":[{"role":"user","content":"x"},
        {"role":"assistant","tool_calls":[{"id":"call_zz","type":"function","function":{"name":"f","arguments":"{}"}}]},
        {"role":"tool","tool_call_id":"call_zz","content":"1"}]}),
        0.0,
        1.0,
        &[],
    ));
    assert_eq!(p.turn.link, TurnLink::First);
    assert_eq!(tracker.counters().unknown_tool_results, 1);

    let hi = json!({"role":"user","content":"hi"});
    let a = tracker.observe(step("/v1/chat/completions", &json!({"messages":[hi]}), 2.0, 3.0, &[]));
    let b = tracker.observe(step("/v1/chat/completions", &json!({"messages":[hi]}), 2.1, 3.1, &[]));
    assert_ne!(a.turn.conversation_id, b.turn.conversation_id);
    let c = tracker.observe(step(
        "/v1/chat/completions",
        &json!({"messages":[hi,{"role":"assistant","content":"yo"},
        {"role":"user","content":"more"}]}),
        4.0,
        5.0,
        &[],
    ));
    assert_eq!(c.turn.link, TurnLink::First, "two conversations share the prefix: not linked to either");
    assert_eq!(tracker.counters().ambiguous_prefixes, 1);
}

#[test]
fn explicit_headers_and_client_traces_link_steps() {
    let mut tracker = TurnTracker::new(TurnConfig::default());
    let mut s1 = step(
        "/v1/chat/completions",
        &json!({"messages":[{"role":"user","content":"a"}]}),
        0.0,
        1.0,
        &[("c1", "f", 1.0)],
    );
    s1.turn_header = Some("turn-42".into());
    let p1 = tracker.observe(s1);
    assert_eq!(p1.turn.turn_id, "turn-42");
    // Another body entirely (e.g. a sub-agent), same header: same turn.
    let mut s2 = step("/v1/messages", &json!({"messages":[{"role":"user","content":"b"}]}), 1.5, 2.0, &[]);
    s2.turn_header = Some("turn-42".into());
    let p2 = tracker.observe(s2);
    assert_eq!((p2.turn.link, p2.turn.turn_id.as_str(), p2.turn.step), (TurnLink::Header, "turn-42", 2));

    let mut tracker = TurnTracker::new(TurnConfig::default());
    let trace = crate::trace::random_hex(16);
    let mut s1 = step(
        "/v1/chat/completions",
        &json!({"messages":[{"role":"user","content":"a"}]}),
        0.0,
        1.0,
        &[("c1", "f", 1.0)],
    );
    (s1.trace_id, s1.parent_span_id) = (trace.clone(), Some("b7ad6b7169203331".into()));
    let p1 = tracker.observe(s1);
    let mut s2 = step(
        "/v1/chat/completions",
        &json!({"messages":[{"role":"tool","tool_call_id":"other","content":"1"}]}),
        1.5,
        2.0,
        &[],
    );
    (s2.trace_id, s2.parent_span_id) = (trace.clone(), Some("b7ad6b7169203332".into()));
    let p2 = tracker.observe(s2);
    assert_eq!((p2.turn.link, p2.turn.turn_id.clone()), (TurnLink::TraceId, p1.turn.turn_id));
    assert_eq!(p2.closed[0].parent_span_id.as_deref(), Some("b7ad6b7169203331"));
}

#[test]
fn idle_turns_close_incomplete_and_memory_stays_bounded() {
    let config = TurnConfig { max_conversations: 3, ..TurnConfig::default() };
    let idle = config.idle_close_ns;
    let mut tracker = TurnTracker::new(config);
    tracker.observe(step(
        "/v1/chat/completions",
        &json!({"messages":[{"role":"user","content":"q"}]}),
        0.0,
        1.0,
        &[("c1", "f", 1.0)],
    ));
    assert!(tracker.tick(T0 + S).is_empty());
    let closed = tracker.tick(T0 + S + idle + 1);
    assert_eq!(closed.len(), 1);
    assert_eq!((tracker.open_turns(), tracker.open_turns_walked()), (0, 0));
    assert_eq!((closed[0].status, closed[0].totals.unanswered_tool_calls), (TurnStatus::Incomplete, 1));

    let mut evicted = 0;
    for i in 0..50 {
        let p = tracker.observe(step(
            "/v1/chat/completions",
            &json!({"messages":[{"role":"user","content":format!("q{i}")}]}),
            10.0 + f64::from(i),
            11.0 + f64::from(i),
            &[(&format!("call{i}"), "f", 11.0 + f64::from(i))],
        ));
        evicted += p.closed.iter().filter(|t| t.status == TurnStatus::Evicted).count();
        assert_eq!(tracker.open_turns(), tracker.open_turns_walked());
    }
    assert!(tracker.conversations() <= 3);
    assert_eq!(evicted, 47);
    assert!(tracker.counters().conversations_evicted >= 47);

    let config = TurnConfig { max_state_bytes: 64 << 10, ..TurnConfig::default() };
    let mut tracker = TurnTracker::new(config);
    for i in 0..2000 {
        let id = format!("{i:0>200}");
        tracker.observe(step(
            "/v1/chat/completions",
            &json!({"messages":[{"role":"user","content":id}]}),
            f64::from(i),
            f64::from(i) + 0.5,
            &[(&id, "f", f64::from(i) + 0.5)],
        ));
    }
    assert!(tracker.state_bytes() <= 64 << 10, "{}", tracker.state_bytes());
}

#[test]
fn a_turn_record_holds_no_message_text() {
    let mut tracker = TurnTracker::new(TurnConfig::default());
    let secret = "my secret prompt text";
    let p = tracker.observe(step(
        "/v1/chat/completions",
        &json!({"messages":[{"role":"user","content":secret}]}),
        0.0,
        1.0,
        &[],
    ));
    let json = serde_json::to_string(&p.closed).unwrap();
    assert!(!json.contains("secret"), "{json}");
}

/// A conversation of `turns` turns, each of `steps` steps; step requests are rebuilt as an SDK
/// would send them (the history grows by the reply and the tool results).
fn conversation_steps(c: usize, turns: usize, steps: usize) -> Vec<(usize, Value, Vec<String>)> {
    let mut messages = vec![json!({"role":"system","content":"agent"})];
    let mut out = Vec::new();
    for t in 0..turns {
        messages.push(json!({"role":"user","content":format!("conversation {c} turn {t}")}));
        for s in 0..steps {
            let last = s + 1 == steps;
            let calls: Vec<String> =
                if last { Vec::new() } else { vec![format!("call_{c}_{t}_{s}_0"), format!("call_{c}_{t}_{s}_1")] };
            out.push((t, json!({"messages": messages.clone(), "tools": tools()}), calls.clone()));
            if last {
                messages.push(json!({"role":"assistant","content":format!("answer {c} {t}")}));
            } else {
                let tool_calls: Vec<Value> = calls
                    .iter()
                    .map(|id| json!({"id":id,"type":"function","function":{"name":"get_time","arguments":"{}"}}))
                    .collect();
                messages.push(json!({"role":"assistant","content":null,"tool_calls":tool_calls}));
                for id in &calls {
                    messages.push(json!({"role":"tool","tool_call_id":id,"content":"ok"}));
                }
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn interleaved_conversations_are_never_mixed(
        shape in prop::collection::vec((1usize..3, 1usize..4), 1..5),
        order in prop::collection::vec(0usize..5, 0..80),
    ) {
        let convs: Vec<Vec<(usize, Value, Vec<String>)>> =
            shape.iter().enumerate().map(|(c, (turns, steps))| conversation_steps(c, *turns, *steps)).collect();
        let mut next = vec![0usize; convs.len()];
        let mut schedule = Vec::new();
        let mut picks = order.into_iter();
        while next.iter().zip(&convs).any(|(n, c)| *n < c.len()) {
            let live: Vec<usize> = (0..convs.len()).filter(|c| next[*c] < convs[*c].len()).collect();
            let c = live[picks.next().unwrap_or(0) % live.len()];
            schedule.push((c, next[c]));
            next[c] += 1;
        }
        let mut tracker = TurnTracker::new(TurnConfig::default());
        let mut seen: Vec<Vec<(String, String, usize)>> = vec![Vec::new(); convs.len()];
        for (i, (c, k)) in schedule.iter().enumerate() {
            let (turn, body, calls) = &convs[*c][*k];
            let t = i as f64;
            let call_refs: Vec<(&str, &str, f64)> = calls.iter().map(|id| (id.as_str(), "get_time", t + 0.5)).collect();
            let p = tracker.observe(step("/v1/chat/completions", body, t, t + 0.5, &call_refs));
            prop_assert_eq!(tracker.open_turns(), tracker.open_turns_walked());
            seen[*c].push((p.turn.conversation_id, p.turn.turn_id, *turn));
        }
        tracker.tick(T0 + 3600 * S);
        prop_assert_eq!((tracker.open_turns(), tracker.open_turns_walked()), (0, 0));
        for (c, steps) in seen.iter().enumerate() {
            // One conversation id per conversation, one turn id per turn, none shared.
            prop_assert!(steps.iter().all(|s| s.0 == steps[0].0), "conversation {} split: {:?}", c, steps);
            for other in seen.iter().skip(c + 1) {
                prop_assert!(other.iter().all(|o| o.0 != steps[0].0), "conversations mixed");
            }
            for a in steps {
                for b in steps {
                    prop_assert_eq!(a.1 == b.1, a.2 == b.2, "turns split or merged: {:?}", steps);
                }
            }
        }
        prop_assert_eq!(tracker.counters().unknown_tool_results, 0);
    }

    /// Ticks between steps, steps that end out of order, and both orders of the two idle bounds:
    /// a tick closes exactly the open turns last seen before its idle bound, forgets exactly the
    /// conversations last seen before both bounds, and the age indexes stay true.
    #[test]
    fn ticks_close_and_forget_exactly_what_has_been_idle(
        idle_s in 1u64..20,
        forget_s in 1u64..40,
        ops in prop::collection::vec((0usize..6, 0u64..60, any::<bool>()), 1..60),
    ) {
        let config = TurnConfig { idle_close_ns: idle_s * S, conversation_idle_ns: forget_s * S, ..TurnConfig::default() };
        let mut tracker = TurnTracker::new(config);
        let convs: Vec<Vec<(usize, Value, Vec<String>)>> = (0..6).map(|c| conversation_steps(c, 2, 2)).collect();
        let mut next = [0usize; 6];
        for (c, at_s, is_tick) in ops {
            let now = T0 + at_s * S;
            if is_tick {
                let open = tracker.ages();
                let idle = now - idle_s * S;
                let forget = (now - forget_s * S).min(idle);
                let closed = tracker.tick(now);
                let due = open.iter().filter(|(seen, is_open)| *is_open && *seen < idle).count();
                let kept = open.iter().filter(|(seen, _)| *seen >= forget).count();
                prop_assert_eq!(closed.len(), due, "turns closed");
                prop_assert_eq!(tracker.conversations(), kept, "conversations kept");
                prop_assert!(tracker.ages().iter().all(|(seen, is_open)| !is_open || *seen >= idle));
            } else if let Some((_, body, calls)) = convs[c].get(next[c]) {
                next[c] += 1;
                let end = at_s as f64;
                let call_refs: Vec<(&str, &str, f64)> = calls.iter().map(|id| (id.as_str(), "get_time", end)).collect();
                tracker.observe(step("/v1/chat/completions", body, end - 0.5, end, &call_refs));
            }
            prop_assert!(tracker.age_indexes_agree());
            prop_assert_eq!(tracker.open_turns(), tracker.open_turns_walked());
        }
        tracker.close_all();
        prop_assert!(tracker.age_indexes_agree());
    }
}

#[test]
fn the_browser_view_runs_from_the_users_send_to_the_final_paint() {
    let mut tracker = TurnTracker::new(TurnConfig::default());
    let user = json!({"role":"user","content":"Weather?"});
    let mut s1 = step("/v1/chat/completions", &json!({"messages":[user]}), 0.0, 1.0, &[("call_w", "get_weather", 0.9)]);
    s1.request_id = "first".into();
    tracker.observe(s1);
    let mut s2 = step(
        "/v1/chat/completions",
        &json!({"messages":[user,
        {"role":"assistant","tool_calls":[{"id":"call_w","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},
        {"role":"tool","tool_call_id":"call_w","content":"18C"}]}),
        1.5,
        2.0,
        &[],
    );
    s2.request_id = "last".into();
    let mut turn = tracker.observe(s2).closed.remove(0);
    assert!(!turn.apply_browser(None, None), "nothing seen, nothing changed");

    let browser = |id: &str, marks: Vec<crate::browser::timeline::BrowserMark>, last_paint: Option<f64>| {
        let mut r = crate::fixtures::smooth_browser(crate::fixtures::stream_record(2));
        r.request_id = id.into();
        let b = r.browser.as_mut().unwrap();
        b.marks = marks;
        b.last_paint_ms = last_paint;
        r
    };
    let first =
        browser("first", vec![crate::browser::timeline::BrowserMark { name: "user_send".into(), t_ms: -30.0 }], None);
    let last = browser("last", vec![], Some(620.0));
    assert!(turn.apply_browser(Some(&first), Some(&last)));
    let b = turn.browser.clone().unwrap();
    assert_eq!((b.user_send_ms, b.final_paint_ms), (Some(-30.0), Some(2120.0)));
    assert!(close(b.e2e_ms, 2150.0), "{b:?}");
    assert!(!turn.apply_browser(Some(&first), Some(&last)), "the same reports change nothing");
}

/// The messages of a two-turn conversation, each turn one tool call then an answer.
fn two_turn_history() -> [Value; 8] {
    let call = |id: &str| {
        json!({"role":"assistant","content":null,"tool_calls":[
            {"id":id,"type":"function","function":{"name":"get_time","arguments":"{}"}}]})
    };
    [
        json!({"role":"user","content":"Time in Paris?"}),
        call("call_1"),
        json!({"role":"tool","tool_call_id":"call_1","content":"noon"}),
        json!({"role":"assistant","content":"It is noon."}),
        json!({"role":"user","content":"And in Tokyo?"}),
        call("call_2"),
        json!({"role":"tool","tool_call_id":"call_2","content":"8pm"}),
        json!({"role":"assistant","content":"It is 8pm."}),
    ]
}

fn chat(messages: &[Value], t0_s: f64, end_s: f64, calls: &[(&str, &str, f64)]) -> StepInput {
    step("/v1/chat/completions", &json!({"model":"m","messages":messages,"tools":tools()}), t0_s, end_s, calls)
}

#[test]
fn a_step_of_a_later_turn_never_joins_the_open_turn_it_does_not_belong_to() {
    // This instance saw turn 1's first step and turn 2's second step (the rest went elsewhere).
    let h = two_turn_history();
    let mut tracker = TurnTracker::new(TurnConfig::default());
    let p1 = tracker.observe(chat(&h[..1], 0.0, 1.0, &[("call_1", "get_time", 0.9)]));
    let p2 = tracker.observe(chat(&h[..7], 5.0, 6.0, &[]));
    assert_ne!(p2.turn.turn_id, p1.turn.turn_id, "another turn of the same conversation");
    assert_eq!(p2.turn.conversation_id, p1.turn.conversation_id);
    assert_eq!(p2.closed.len(), 2, "turn 1 closes unanswered; turn 2's fragment ends with its answer");
    let (turn1, turn2) = (&p2.closed[0], &p2.closed[1]);
    assert_eq!((turn1.status, turn1.totals.unanswered_tool_calls, turn1.fragment), (TurnStatus::Incomplete, 1, false));
    assert!(turn1.tool_runs.iter().all(|r| r.duration_ms.is_none()), "no tool run is made up: {turn1:?}");
    assert_eq!((turn2.status, turn2.totals.steps, turn2.fragment), (TurnStatus::Complete, 1, true));
}

#[test]
fn fleet_instances_name_a_split_turn_the_same_way() {
    let h = two_turn_history();
    let fleet = TurnConfig { fleet: true, ..TurnConfig::default() };
    let (mut a, mut b) = (TurnTracker::new(fleet.clone()), TurnTracker::new(fleet));
    let first = a.observe(chat(&h[..1], 0.0, 1.0, &[("call_1", "get_time", 0.9)]));
    let second = b.observe(chat(&h[..3], 1.5, 2.0, &[]));
    let (ta, tb) = (&first.turn, &second.turn);
    assert_eq!(
        (&tb.turn_id, &tb.conversation_id, &tb.trace_id, &tb.agent_span_id),
        (&ta.turn_id, &ta.conversation_id, &ta.trace_id, &ta.agent_span_id),
        "every instance derives the same ids"
    );
    assert!(ta.agent_span_id.is_some());
    let [fragment] = second.closed.as_slice() else { panic!("{:?}", second.closed) };
    assert!(fragment.fragment, "B did not see the turn start");
    let closed_on_a = a.tick(T0 + 1000 * S);
    assert!(closed_on_a.iter().all(|t| !t.fragment && t.turn_id == ta.turn_id), "{closed_on_a:?}");

    // Turn 2 lands on B alone: the same conversation id as turn 1's on A.
    let third = b.observe(chat(&h[..5], 10.0, 11.0, &[("call_2", "get_time", 10.9)]));
    assert_eq!(third.turn.conversation_id, ta.conversation_id);
    assert_ne!(third.turn.turn_id, ta.turn_id);
    // And another instance that sees only turn 2's second step names it the same.
    let mut c = TurnTracker::new(TurnConfig { fleet: true, ..TurnConfig::default() });
    let fourth = c.observe(chat(&h[..7], 12.0, 13.0, &[]));
    assert_eq!(
        (&fourth.turn.turn_id, &fourth.turn.trace_id, &fourth.turn.conversation_id),
        (&third.turn.turn_id, &third.turn.trace_id, &third.turn.conversation_id)
    );
}

#[test]
fn without_a_fleet_key_ids_are_drawn_per_instance() {
    let h = two_turn_history();
    let (mut a, mut b) = (TurnTracker::new(TurnConfig::default()), TurnTracker::new(TurnConfig::default()));
    let first = a.observe(chat(&h[..1], 0.0, 1.0, &[("call_1", "get_time", 0.9)]));
    let second = b.observe(chat(&h[..3], 1.5, 2.0, &[]));
    assert_ne!(first.turn.turn_id, second.turn.turn_id);
    assert_ne!(first.turn.trace_id, second.turn.trace_id);
}
