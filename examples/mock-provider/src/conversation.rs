//! The shape of the conversation a request carries, as far as an agent loop cares: which inputs are
//! real user messages, which are the model's earlier tool calls and which are tool results. From it
//! the mock learns how many tool rounds the current agent turn has already done.

use serde_json::Value;

use crate::endpoint::Endpoint;

/// One input of the conversation, reduced to its role in a tool loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// A message the user wrote: starts a new agent turn.
    User,
    /// The model asked for tools (an assistant message or item with tool calls).
    ToolCalls,
    /// The client ran tools and sends their results.
    ToolResults,
    /// Anything else: system prompts, assistant text, reasoning items.
    Other,
}

/// The inputs of one request in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Conversation {
    turns: Vec<Turn>,
}

impl Conversation {
    /// Reads the request body's inputs in the endpoint's shape: `messages` (OpenAI chat, Ollama,
    /// Anthropic), `input` (Responses) or `contents` (Gemini).
    pub(crate) fn parse(endpoint: &Endpoint, body: &Value) -> Conversation {
        let items = |key: &str| body.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let turns = match endpoint {
            Endpoint::OpenAiChat | Endpoint::OllamaChat => items("messages").iter().map(chat_turn).collect(),
            Endpoint::OpenAiResponses => match body.get("input") {
                Some(Value::String(_)) => vec![Turn::User],
                _ => items("input").iter().map(responses_turn).collect(),
            },
            Endpoint::AnthropicMessages => items("messages").iter().map(anthropic_turn).collect(),
            Endpoint::Gemini { .. } => items("contents").iter().map(gemini_turn).collect(),
        };
        Conversation { turns }
    }

    #[cfg(test)]
    pub(crate) fn from_turns(turns: Vec<Turn>) -> Conversation {
        Conversation { turns }
    }

    /// Tool rounds done since the last user message. A round is a run of tool calls answered by a
    /// run of tool results; whichever of the two runs is visible more often counts, so a client that
    /// sends only the results (e.g. with `previous_response_id`) still ends its loop.
    pub(crate) fn tool_rounds(&self) -> u32 {
        let since_user = match self.turns.iter().rposition(|t| *t == Turn::User) {
            Some(last_user) => &self.turns[last_user + 1..],
            None => &self.turns[..],
        };
        let (mut call_runs, mut result_runs) = (0, 0);
        let mut previous = Turn::Other;
        for turn in since_user.iter().copied().filter(|t| *t != Turn::Other) {
            if turn != previous {
                match turn {
                    Turn::ToolCalls => call_runs += 1,
                    Turn::ToolResults => result_runs += 1,
                    Turn::User | Turn::Other => {}
                }
            }
            previous = turn;
        }
        call_runs.max(result_runs)
    }
}

fn non_empty_array(value: Option<&Value>) -> bool {
    value.and_then(Value::as_array).is_some_and(|a| !a.is_empty())
}

fn has_block(content: Option<&Value>, kind: &str) -> bool {
    content
        .and_then(Value::as_array)
        .is_some_and(|blocks| blocks.iter().any(|b| b.get("type").and_then(Value::as_str) == Some(kind)))
}

/// OpenAI chat / Ollama: `user`, `assistant` with `tool_calls`, `tool` (and the legacy `function`).
fn chat_turn(message: &Value) -> Turn {
    match message.get("role").and_then(Value::as_str) {
        Some("user") => Turn::User,
        Some("tool" | "function") => Turn::ToolResults,
        Some("assistant") if non_empty_array(message.get("tool_calls")) || message.get("function_call").is_some() => {
            Turn::ToolCalls
        }
        _ => Turn::Other,
    }
}

/// Responses input items: `function_call` / `function_call_output` (and the custom-tool pair), or
/// messages with a role.
fn responses_turn(item: &Value) -> Turn {
    match item.get("type").and_then(Value::as_str) {
        Some("function_call" | "custom_tool_call") => Turn::ToolCalls,
        Some("function_call_output" | "custom_tool_call_output") => Turn::ToolResults,
        Some("message") | None if item.get("role").and_then(Value::as_str) == Some("user") => Turn::User,
        _ => Turn::Other,
    }
}

/// Anthropic: a user message with `tool_result` blocks carries results; an assistant message with
/// `tool_use` blocks is a round of calls.
fn anthropic_turn(message: &Value) -> Turn {
    let content = message.get("content");
    match message.get("role").and_then(Value::as_str) {
        Some("user") if has_block(content, "tool_result") => Turn::ToolResults,
        Some("user") => Turn::User,
        Some("assistant") if has_block(content, "tool_use") => Turn::ToolCalls,
        _ => Turn::Other,
    }
}

/// Gemini: `model` contents with `functionCall` parts, user contents with `functionResponse` parts.
fn gemini_turn(content: &Value) -> Turn {
    let has_part = |key: &str| {
        content.get("parts").and_then(Value::as_array).is_some_and(|parts| parts.iter().any(|p| p.get(key).is_some()))
    };
    match content.get("role").and_then(Value::as_str) {
        Some("model") if has_part("functionCall") => Turn::ToolCalls,
        Some("model") => Turn::Other,
        _ if has_part("functionResponse") => Turn::ToolResults,
        _ => Turn::User,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rounds(endpoint: Endpoint, body: Value) -> u32 {
        Conversation::parse(&endpoint, &body).tool_rounds()
    }

    #[test]
    fn rounds_per_format() {
        let gemini = || Endpoint::Gemini { model: "g".into(), streaming: false };
        let cases: Vec<(&str, Endpoint, Value, u32)> = vec![
            (
                "chat user",
                Endpoint::OpenAiChat,
                json!({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]}),
                0,
            ),
            (
                "chat one round, two parallel results",
                Endpoint::OpenAiChat,
                json!({"messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "a"}, {"id": "b"}]},
                {"role": "tool", "tool_call_id": "a", "content": "1"},
                {"role": "tool", "tool_call_id": "b", "content": "2"}]}),
                1,
            ),
            (
                "chat two rounds after an earlier turn",
                Endpoint::OpenAiChat,
                json!({"messages": [
                {"role": "user", "content": "first"},
                {"role": "assistant", "tool_calls": [{"id": "x"}]}, {"role": "tool", "tool_call_id": "x"},
                {"role": "assistant", "content": "done"},
                {"role": "user", "content": "again"},
                {"role": "assistant", "tool_calls": [{"id": "a"}]}, {"role": "tool", "tool_call_id": "a"},
                {"role": "assistant", "tool_calls": [{"id": "b"}]}, {"role": "tool", "tool_call_id": "b"}]}),
                2,
            ),
            ("responses string input", Endpoint::OpenAiResponses, json!({"input": "hi"}), 0),
            (
                "responses one round with reasoning",
                Endpoint::OpenAiResponses,
                json!({"input": [
                {"role": "user", "content": "hi"},
                {"type": "reasoning", "summary": []},
                {"type": "function_call", "call_id": "a"}, {"type": "function_call", "call_id": "b"},
                {"type": "function_call_output", "call_id": "a", "output": "1"},
                {"type": "function_call_output", "call_id": "b", "output": "2"}]}),
                1,
            ),
            (
                "responses results only (previous_response_id)",
                Endpoint::OpenAiResponses,
                json!({"input": [
                {"type": "function_call_output", "call_id": "a", "output": "1"}]}),
                1,
            ),
            (
                "anthropic two rounds",
                Endpoint::AnthropicMessages,
                json!({"messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "t"}, {"type": "tool_use", "id": "a"}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "b"}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b"}, {"type": "text", "text": "more"}]}]}),
                2,
            ),
            (
                "anthropic new user message",
                Endpoint::AnthropicMessages,
                json!({"messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "a"}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
                {"role": "assistant", "content": "answer"},
                {"role": "user", "content": [{"type": "text", "text": "next"}]}]}),
                0,
            ),
            (
                "gemini one round",
                gemini(),
                json!({"contents": [
                {"role": "user", "parts": [{"text": "hi"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}, {"functionCall": {"name": "g", "args": {}}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}, {"functionResponse": {"name": "g", "response": {}}}]}]}),
                1,
            ),
            ("gemini without roles", gemini(), json!({"contents": [{"parts": [{"text": "hi"}]}]}), 0),
            (
                "ollama one round",
                Endpoint::OllamaChat,
                json!({"messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f"}}]},
                {"role": "tool", "tool_name": "f", "content": "1"}]}),
                1,
            ),
        ];
        for (name, endpoint, body, expected) in cases {
            assert_eq!(rounds(endpoint, body), expected, "{name}");
        }
    }
}
