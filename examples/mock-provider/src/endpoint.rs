//! The provider endpoints the mock serves, from a request's method and path.

use http::Method;

/// The provider endpoints the mock serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    OpenAiChat,
    OpenAiResponses,
    AnthropicMessages,
    Gemini { model: String, streaming: bool },
    OllamaChat,
    AudioSpeech,
}

impl Endpoint {
    pub(crate) fn route(method: &Method, path: &str) -> Option<Endpoint> {
        if method != Method::POST {
            return None;
        }
        match path {
            "/v1/chat/completions" => return Some(Endpoint::OpenAiChat),
            "/v1/responses" => return Some(Endpoint::OpenAiResponses),
            "/v1/messages" => return Some(Endpoint::AnthropicMessages),
            "/api/chat" => return Some(Endpoint::OllamaChat),
            "/v1/audio/speech" => return Some(Endpoint::AudioSpeech),
            _ => {}
        }
        let rest = path.strip_prefix("/v1beta/models/").or_else(|| path.strip_prefix("/v1/models/"))?;
        let (model, method) = rest.rsplit_once(':')?;
        let streaming = match method {
            "streamGenerateContent" => true,
            "generateContent" => false,
            _ => return None,
        };
        Some(Endpoint::Gemini { model: model.to_owned(), streaming })
    }
}
