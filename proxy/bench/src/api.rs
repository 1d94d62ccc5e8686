//! The request bodies of the two streaming APIs.

use serde_json::{json, Value};

use crate::config::Api;

/// The JSON body of one streaming request: `prompt` as the one user message, `max_tokens` as the
/// output length (plus `ignore_eos` and `min_tokens` when asked), temperature 0.
pub fn request_body(api: Api, model: &str, prompt: &str, max_tokens: u32, ignore_eos: bool) -> Value {
    match api {
        Api::Openai => {
            let mut body = json!({
                "model": model,
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": max_tokens,
                "temperature": 0,
                "stream": true,
                "stream_options": {"include_usage": true},
            });
            if ignore_eos {
                body["ignore_eos"] = json!(true);
                body["min_tokens"] = json!(max_tokens);
            }
            body
        }
        Api::Anthropic => json!({
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": true,
        }),
    }
}

/// The route hint tokentap's analyzer uses for this API.
pub fn provider_hint(api: Api) -> &'static str {
    match api {
        Api::Openai => "openai",
        Api::Anthropic => "anthropic",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_ask_for_a_stream_of_the_given_length() {
        let b = request_body(Api::Openai, "m", "hi", 64, true);
        assert_eq!(b["max_tokens"], 64);
        assert_eq!(b["min_tokens"], 64);
        assert_eq!(b["ignore_eos"], true);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert!(request_body(Api::Openai, "m", "hi", 64, false).get("ignore_eos").is_none());
        let a = request_body(Api::Anthropic, "m", "hi", 8, false);
        assert_eq!((a["max_tokens"].as_u64(), a["stream"].as_bool()), (Some(8), Some(true)));
    }
}
