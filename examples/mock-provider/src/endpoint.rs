//! The endpoints the mock serves, from a request's method and path.

use http::Method;

/// What a request's method and path ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// A text-generation endpoint, answered through the wire formats.
    Provider(Endpoint),
    /// An OpenAI audio endpoint, answered by the audio module.
    Audio(AudioEndpoint),
}

impl Route {
    pub(crate) fn of(method: &Method, path: &str) -> Option<Route> {
        if let Some(audio) = AudioEndpoint::route(method, path) {
            return Some(Route::Audio(audio));
        }
        Endpoint::route(method, path).map(Route::Provider)
    }
}

/// The text-generation endpoints the mock serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    OpenAiChat,
    OpenAiResponses,
    AnthropicMessages,
    Gemini { model: String, streaming: bool },
    OllamaChat,
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

/// The OpenAI audio endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AudioEndpoint {
    /// `POST /v1/audio/speech`: text to speech.
    Speech,
    /// `POST /v1/audio/transcriptions` or `/v1/audio/translations`: speech to text.
    Transcription(AudioTask),
}

/// What a speech-to-text request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AudioTask {
    /// The text in the language spoken.
    Transcribe,
    /// The text in English.
    Translate,
}

impl AudioEndpoint {
    fn route(method: &Method, path: &str) -> Option<AudioEndpoint> {
        if method != Method::POST {
            return None;
        }
        match path {
            "/v1/audio/speech" => Some(AudioEndpoint::Speech),
            "/v1/audio/transcriptions" => Some(AudioEndpoint::Transcription(AudioTask::Transcribe)),
            "/v1/audio/translations" => Some(AudioEndpoint::Transcription(AudioTask::Translate)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audio_paths_route_to_the_audio_endpoints() {
        let route = |path| Route::of(&Method::POST, path);
        assert_eq!(route("/v1/audio/speech"), Some(Route::Audio(AudioEndpoint::Speech)));
        assert_eq!(
            route("/v1/audio/transcriptions"),
            Some(Route::Audio(AudioEndpoint::Transcription(AudioTask::Transcribe)))
        );
        assert_eq!(
            route("/v1/audio/translations"),
            Some(Route::Audio(AudioEndpoint::Transcription(AudioTask::Translate)))
        );
        assert_eq!(route("/v1/chat/completions"), Some(Route::Provider(Endpoint::OpenAiChat)));
        assert_eq!(Route::of(&Method::GET, "/v1/audio/speech"), None);
        assert_eq!(route("/v1/audio/voices"), None);
    }
}
