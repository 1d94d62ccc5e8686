//! Google Gemini `GenerateContentResponse`: each SSE data line (or each element of a JSON array
//! stream, or a whole body) is a complete response object with a slice of the output.

use serde::Deserialize;
use serde_json::Value;

use super::{json_text, parse_failure, text, Out, Parsed, Text};
use crate::event::EventClass;

#[derive(Debug, Default)]
pub(crate) struct Gemini;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response<'a> {
    #[serde(borrow, default)]
    candidates: Option<Vec<Candidate<'a>>>,
    #[serde(default)]
    usage_metadata: Option<Value>,
    #[serde(borrow, default)]
    model_version: Option<Text<'a>>,
    #[serde(borrow, default)]
    response_id: Option<Text<'a>>,
    #[serde(default)]
    prompt_feedback: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate<'a> {
    #[serde(borrow, default)]
    content: Option<Content<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct Content<'a> {
    #[serde(borrow, default)]
    parts: Option<Vec<Part<'a>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(borrow, default)]
    text: Option<Text<'a>>,
    #[serde(default)]
    thought: Option<bool>,
    #[serde(default)]
    function_call: Option<FunctionCall>,
}

#[derive(Deserialize)]
struct FunctionCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    args: Option<Value>,
}

impl Gemini {
    pub(crate) fn classify(&mut self, data: &str, out: &mut Out<'_>) -> Parsed {
        if data.starts_with('[') {
            // Without `alt=sse` the stream is one JSON array of responses; as a whole body it is
            // classified element by element.
            return match serde_json::from_str::<Vec<Response<'_>>>(data) {
                Ok(responses) => {
                    for response in &responses {
                        self.response(response, out);
                    }
                    Parsed::Yes
                }
                Err(_) => parse_failure(data),
            };
        }
        match serde_json::from_str::<Response<'_>>(data) {
            Ok(response) => {
                self.response(&response, out);
                Parsed::Yes
            }
            Err(_) => parse_failure(data),
        }
    }

    fn response(&mut self, response: &Response<'_>, out: &mut Out<'_>) {
        out.findings.note_id(text(&response.response_id));
        out.findings.note_model(text(&response.model_version));
        if let Some(error) = &response.error {
            out.error(error);
        }
        let pieces_before = out.timeline.pieces_in_frame();
        let mut finished = false;
        for candidate in response.candidates.iter().flatten() {
            let parts = candidate.content.as_ref().and_then(|c| c.parts.as_ref());
            for part in parts.into_iter().flatten() {
                if let Some(t) = text(&part.text).filter(|t| !t.is_empty()) {
                    let class = if part.thought == Some(true) { EventClass::Reasoning } else { EventClass::Answer };
                    out.piece(class, t);
                }
                if let Some(call) = &part.function_call {
                    let name = call.name.as_deref().unwrap_or("");
                    let arguments = json_text(call.args.as_ref());
                    let slot = out.findings.new_tool_call();
                    out.tool_call(slot, call.id.as_deref(), Some(name), &arguments);
                    out.piece(EventClass::ToolCall, &format!("{name}{arguments}"));
                }
            }
            if let Some(reason) = text(&candidate.finish_reason) {
                out.findings.finish_reason(reason);
                finished = true;
            }
        }
        if let Some(reason) =
            response.prompt_feedback.as_ref().and_then(|f| f.get("blockReason")).and_then(Value::as_str)
        {
            // The prompt itself was blocked: the user gets a refusal instead of an answer.
            out.findings.refusal = true;
            out.findings.finish_reason(reason);
            finished = true;
        }
        if let Some(usage) = response.usage_metadata.as_ref().filter(|u| u.is_object()) {
            // Repeated on every chunk: the last report wins. It is its own event only on chunks
            // that carry nothing else.
            out.findings.absorb_usage(usage);
            if out.timeline.pieces_in_frame() == pieces_before && !finished {
                out.piece(EventClass::Usage, "");
            }
        }
        if finished {
            out.piece(EventClass::Done, "");
        }
    }
}
