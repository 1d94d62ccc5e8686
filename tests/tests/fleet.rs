//! A fleet: three tokentap instances sharing `[turns] fleet_key`, each step of an agent's turns
//! going to the next instance (what a round-robin load balancer does to a conversation). No
//! traceparent, no turn header: every instance must still name each turn, its conversation, its
//! trace and its agent span the same way, no instance may invent a turn out of steps of two, and
//! `tokentap report --records A B C` must rebuild every turn with its tool runs.

use std::collections::BTreeSet;

use serde_json::Value;
use tokentap_e2e::nginx::Nginx;
use tokentap_e2e::process::{run_sdk_script, run_tokentap};
use tokentap_e2e::{Mock, Tokentap};

const CHAT: &str = "/v1/chat/completions";
const FLEET_KEY: &str = "a fleet key shared by every instance of this test";
const INSTANCES: usize = 3;

fn fleet(mock: &Mock, key: Option<&str>) -> Vec<Tokentap> {
    let env: Vec<(&str, &str)> = key.map(|k| ("TOKENTAP_FLEET_KEY", k)).into_iter().collect();
    (0..INSTANCES).map(|_| Tokentap::start_with_env(&["--upstream", &mock.url], &env)).collect()
}

fn url(t: &Tokentap) -> String {
    format!("http://{}/v1", t.addr)
}

/// Runs two user turns of two tool rounds each (two parallel calls per round); step k of the
/// conversation goes to instance k mod 3. Returns the script's output and every step's record
/// (in conversation order).
fn run_split_conversation(instances: &[Tokentap]) -> (Value, Vec<Value>) {
    let mut feeds: Vec<_> = instances.iter().map(Tokentap::feed).collect();
    let mut args: Vec<String> = Vec::new();
    for t in instances {
        args.extend(["--base-url".to_owned(), url(t)]);
    }
    args.extend(["--user-turns", "2", "--header", "x-mock-agent-steps:2"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_sdk_script("agent_openai_loop.py", &args);
    let request_ids: Vec<String> = out["clients"][0]["turns"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["request_ids"].as_array().unwrap().iter().map(|id| id.as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(request_ids.len(), 6, "two turns of three steps: {out}");
    let mut records = Vec::new();
    for (k, id) in request_ids.iter().enumerate() {
        let record = feeds[k % INSTANCES].next_record_for(CHAT);
        assert_eq!(record["request_id"], id.as_str(), "step {k} on instance {}", k % INSTANCES);
        records.push(record);
    }
    (out, records)
}

/// `tokentap report --json --records` over every instance's journal.
fn report_over(instances: &[Tokentap]) -> Value {
    let files: Vec<String> = instances.iter().map(|t| t.records_file().display().to_string()).collect();
    let mut args = vec!["report", "--json", "--include-warmup", "--records"];
    args.extend(files.iter().map(String::as_str));
    let (status, stdout, stderr) = run_tokentap(&args);
    assert!(status.success(), "{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn turn_of(record: &Value) -> (&str, &str, &str, &str) {
    let t = &record["turn"];
    let s = |k: &str| t[k].as_str().unwrap_or_else(|| panic!("turn.{k} in {t}"));
    (s("turn_id"), s("conversation_id"), s("trace_id"), t["agent_span_id"].as_str().unwrap_or("none"))
}

#[test]
fn a_turn_split_across_instances_keeps_one_identity_and_report_rebuilds_it() {
    let mock = Mock::start(&[]);
    let instances = fleet(&mock, Some(FLEET_KEY));
    let mut last_feed = instances[2].feed();
    let (out, records) = run_split_conversation(&instances);

    // Every step of a turn, whichever instance served it, names the same turn, trace and agent
    // span; both turns name the same conversation.
    let (first, second) = records.split_at(3);
    for steps in [first, second] {
        let ids: BTreeSet<_> = steps.iter().map(turn_of).collect();
        assert_eq!(ids.len(), 1, "one identity per turn across the instances: {ids:?}");
        assert_ne!(turn_of(&steps[0]).3, "none", "an agent turn has its agent span");
    }
    assert_ne!(turn_of(&first[0]).0, turn_of(&second[0]).0, "two user turns");
    assert_eq!(turn_of(&first[0]).1, turn_of(&second[0]).1, "one conversation");
    let links: Vec<&str> = records.iter().map(|r| r["turn"]["link"].as_str().unwrap()).collect();
    assert_eq!(links[0], "first", "{links:?}");

    // The third instance saw each turn's final answer but not its start: fragments, with no tool
    // run made up from steps it never saw.
    for _ in 0..2 {
        let turn = last_feed.next_turn();
        assert_eq!(turn["fragment"], true, "{turn}");
        assert_eq!(turn["status"], "complete", "{turn}");
        assert!(turn["tool_runs"].as_array().is_none_or(Vec::is_empty), "{turn}");
    }

    // The three journals together: both turns whole again, with every tool run.
    let report = report_over(&instances);
    let turns = &report["turns"];
    assert_eq!(turns["turns"], 2, "{turns}");
    assert_eq!(turns["by_status"]["complete"], 2, "{turns}");
    assert_eq!(turns["rebuilt"]["split_turns"], 2, "{turns}");
    assert_eq!(turns["rebuilt"]["fleet_keyed"], true, "{turns}");
    let calls: usize =
        out["clients"][0]["turns"].as_array().unwrap().iter().map(|t| t["calls"].as_array().unwrap().len()).sum();
    assert_eq!(turns["tool_run_ms"]["count"], calls as u64, "every tool run rebuilt: {turns}");
    assert_eq!(turns["steps"]["max"], 3.0, "{turns}");
}

#[test]
fn without_a_fleet_key_each_instance_names_the_turn_its_own_way_and_report_still_rebuilds_it() {
    let mock = Mock::start(&[]);
    let instances = fleet(&mock, None);
    let (_, records) = run_split_conversation(&instances);
    let ids: BTreeSet<_> = records[..3].iter().map(|r| turn_of(r).0.to_owned()).collect();
    assert_eq!(ids.len(), 3, "per-instance ids: {ids:?}");
    let report = report_over(&instances);
    // Tool results link to their calls by id, whichever instance recorded each.
    assert_eq!(report["turns"]["by_status"]["complete"], 2, "{}", report["turns"]);
    assert_eq!(report["turns"]["rebuilt"]["fleet_keyed"], false, "{}", report["turns"]);
}

/// The shipped recipe (examples/fleet/nginx-affinity.conf) in a real nginx: a conversation stays on
/// one instance, so its turns are whole there, not fragments.
#[test]
fn the_affinity_recipe_keeps_a_conversation_on_one_instance() {
    let mock = Mock::start(&[]);
    let instances = fleet(&mock, Some(FLEET_KEY));
    let template = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet/nginx-affinity.conf");
    let nginx = Nginx::start_from_template(&template, &instances.iter().map(|t| t.addr).collect::<Vec<_>>());
    let feeds: Vec<_> = instances.iter().map(Tokentap::feed).collect();
    let out = run_sdk_script(
        "agent_openai_loop.py",
        &[
            "--base-url",
            &format!("http://{}/v1", nginx.addr),
            "--user-turns",
            "2",
            "--header",
            "x-mock-agent-steps:2",
            "--header",
            "x-tokentap-conversation:affinity-test",
        ],
    );
    let request_ids: Vec<&str> = out["clients"][0]["turns"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["request_ids"].as_array().unwrap().iter().map(|id| id.as_str().unwrap()))
        .collect();
    assert_eq!(request_ids.len(), 6, "{out}");
    // Whichever instance nginx chose records a step first; the others record nothing.
    let (tx, rx) = std::sync::mpsc::channel();
    for (i, mut feed) in feeds.into_iter().enumerate() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let record = feed.next_record_for(CHAT);
            let _ = tx.send((i, record, feed));
        });
    }
    let (served_by, first, mut feed) = rx.recv().expect("an instance recorded a step");
    assert_eq!(first["request_id"], request_ids[0], "{first}");
    for _ in 0..2 {
        let turn = feed.next_turn();
        assert_eq!(turn["status"], "complete", "{turn}");
        assert!(turn["fragment"].is_null(), "a whole turn: {turn}");
        assert_eq!(turn["totals"]["steps"], 3, "{turn}");
        assert_eq!(turn["conversation_id"], "affinity-test", "{turn}");
    }
    for id in &request_ids {
        let (status, record) = instances[served_by].admin_get(&format!("/_tokentap/api/requests/{id}"));
        assert_eq!(status, 200, "step {id} on the same instance: {record}");
    }
}

/// The issue a user meets first: an unmodified openai-agents run behind nginx's plain round robin
/// (the recipe without its `hash` line), three instances with a fleet key. The model call that
/// asks for the tools and the one that carries their results land on different instances; both
/// name the same turn and trace, and `report --records` rebuilds the turn with both tool runs.
#[test]
fn an_openai_agents_run_behind_round_robin_is_one_turn_across_the_fleet() {
    let mock = Mock::start(&[]);
    let instances = fleet(&mock, Some(FLEET_KEY));
    let recipe = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet/nginx-affinity.conf"),
    )
    .unwrap();
    assert!(recipe.contains("hash $tokentap_affinity consistent;"), "the recipe's affinity line moved");
    let dir = tempfile::tempdir().unwrap();
    let round_robin = dir.path().join("nginx-round-robin.conf");
    std::fs::write(&round_robin, recipe.replace("hash $tokentap_affinity consistent;", "")).unwrap();
    let nginx = Nginx::start_from_template(&round_robin, &instances.iter().map(|t| t.addr).collect::<Vec<_>>());
    let out = run_sdk_script("agent_openai_agents.py", &["--base-url", &format!("http://{}/v1", nginx.addr)]);
    let calls = out["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "the agent called both tools: {out}");

    // Both model calls recorded, on two instances (round robin); wait for the records.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let records = loop {
        let records: Vec<(usize, Value)> = instances
            .iter()
            .enumerate()
            .flat_map(|(i, t)| {
                let (_, list) = t.admin_get("/_tokentap/api/requests?limit=10");
                list["records"].as_array().cloned().unwrap_or_default().into_iter().map(move |r| (i, r))
            })
            .filter(|(_, r)| r["path"] == CHAT)
            .collect();
        if records.len() >= 2 {
            break records;
        }
        assert!(std::time::Instant::now() < deadline, "model calls recorded: {records:?}");
    };
    assert_eq!(records.len(), 2, "{records:?}");
    assert_ne!(records[0].0, records[1].0, "round robin sent the two calls to two instances");
    let ids: BTreeSet<_> = records.iter().map(|(_, r)| turn_of(r)).collect();
    assert_eq!(ids.len(), 1, "one turn, one trace, one agent span across the fleet: {ids:?}");

    let report = report_over(&instances);
    let turns = &report["turns"];
    assert_eq!(turns["by_status"]["complete"], 1, "{turns}");
    assert_eq!(turns["rebuilt"]["split_turns"], 1, "{turns}");
    assert_eq!(turns["tool_run_ms"]["count"], 2, "both tool runs: {turns}");
}
