//! Arbitrary bytes as an MCP exchange (request body and response, as SSE and as JSON) through the
//! MCP analysis. Besides "never panics", it checks that where the network cut the response (with
//! equal stamps) does not change the result.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokentap_analysis::mcp::{McpAnalyzer, McpContext, McpLimits};

fn run(data: &[u8], content_type: &str, cut: Option<usize>) -> String {
    let limits = McpLimits { max_message_bytes: 4096, max_messages: 64, max_operations: 16 };
    let ctx = McpContext {
        http_method: "POST".into(),
        status: Some(200),
        response_content_type: Some(content_type.into()),
        ..McpContext::default()
    };
    let mut a = McpAnalyzer::new(ctx, limits);
    // The first byte picks where the request body ends and the response begins.
    let split = data.first().map_or(0, |b| usize::from(*b) * data.len() / 256);
    let (request, response) = data.split_at(split.min(data.len()));
    a.request_body(request, false);
    match cut {
        Some(step) => response.chunks(step.max(1)).for_each(|c| a.push_response(c, 1)),
        None => a.push_response(response, 1),
    }
    serde_json::to_string(&a.finish(false)).expect("serializes")
}

fuzz_target!(|data: &[u8]| {
    for content_type in ["text/event-stream", "application/json"] {
        let whole = run(data, content_type, None);
        let step = data.get(1).map_or(1, |b| usize::from(*b % 17) + 1);
        assert_eq!(whole, run(data, content_type, Some(step)));
    }
});
