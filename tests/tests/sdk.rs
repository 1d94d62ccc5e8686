//! The official Python SDKs parse the same results through tokentap as from the provider directly.

use tokentap_e2e::{Mock, Tokentap};

fn run_script(script: &str, base_url: &str) -> serde_json::Value {
    tokentap_e2e::process::run_sdk_script(script, &["--base-url", base_url])
}

#[test]
fn openai_sdk_results_match_direct_and_proxied() {
    let mock = Mock::start(&["--ttft-ms", "20", "--itl-ms", "2"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let direct = run_script("openai_chat.py", &format!("{}/v1", mock.url));
    let proxied = run_script("openai_chat.py", &format!("http://{}/v1", tokentap.addr));
    assert_eq!(direct, proxied);
    // The SDK saw real content: tool calls and text, not empty results that would trivially match.
    let text = direct.to_string();
    assert!(text.contains("get_weather"), "{text}");
    // Every SDK request produced a record without a single secret in it.
    let record = feed.next_record_for("/v1/chat/completions");
    assert_eq!(record["outcome"], "ok");
    assert!(!record.to_string().contains("sk-test-SECRET"));
}

#[test]
fn anthropic_sdk_results_match_direct_and_proxied() {
    let mock = Mock::start(&["--ttft-ms", "20", "--itl-ms", "2"]);
    let tokentap = Tokentap::start(&mock.url, &["--provider", "anthropic"]);
    let mut feed = tokentap.feed();
    let direct = run_script("anthropic_messages.py", &mock.url);
    let proxied = run_script("anthropic_messages.py", &format!("http://{}", tokentap.addr));
    assert_eq!(direct, proxied);
    let text = direct.to_string();
    assert!(text.contains("thinking") && text.contains("tool_use"), "{text}");
    let record = feed.next_record_for("/v1/messages");
    assert_eq!(record["analysis"]["format"], "anthropic_messages", "{record}");
}
