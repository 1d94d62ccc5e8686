//! Why an audio request is refused, answered as OpenAI does: 400 with
//! `{"error": {"message", "type": "invalid_request_error", "param", "code": null}}`.

use serde_json::Value;

use super::multipart::FormError;
use crate::formats::openai_invalid_request_body;
use crate::scenario::InvalidMockHeader;

#[derive(Debug, thiserror::Error)]
pub(crate) enum AudioRequestError {
    #[error("Missing required parameter: '{param}'.")]
    Missing { param: &'static str },
    #[error("Invalid value for '{param}': {detail}")]
    Invalid { param: &'static str, detail: String },
    /// mp3, opus, aac and flac: the mock does not pretend to encode them.
    #[error("the mock provider produces pcm and wav audio only")]
    EncodedAudio,
    #[error("We could not parse the JSON body of your request: {0}")]
    Json(#[from] serde_json::Error),
    #[error("Could not parse multipart form: {0}")]
    Form(#[from] FormError),
    #[error(transparent)]
    MockHeader(#[from] InvalidMockHeader),
}

impl AudioRequestError {
    pub(crate) fn invalid(param: &'static str, detail: impl Into<String>) -> AudioRequestError {
        AudioRequestError::Invalid { param, detail: detail.into() }
    }

    /// The request field at fault, if it is one.
    pub(crate) fn param(&self) -> Option<&'static str> {
        match self {
            AudioRequestError::Missing { param } | AudioRequestError::Invalid { param, .. } => Some(*param),
            AudioRequestError::EncodedAudio => Some("response_format"),
            AudioRequestError::Json(_) | AudioRequestError::Form(_) | AudioRequestError::MockHeader(_) => None,
        }
    }

    /// The JSON body of the 400 answer.
    pub(crate) fn body(&self) -> Value {
        openai_invalid_request_body(&self.to_string(), self.param())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies_name_the_field() {
        assert_eq!(
            AudioRequestError::Missing { param: "file" }.body(),
            json!({"error": {"message": "Missing required parameter: 'file'.", "type": "invalid_request_error",
                "param": "file", "code": null}})
        );
        assert_eq!(
            AudioRequestError::EncodedAudio.body(),
            json!({"error": {"message": "the mock provider produces pcm and wav audio only",
                "type": "invalid_request_error", "param": "response_format", "code": null}})
        );
        assert_eq!(AudioRequestError::from(FormError::NoBoundary).body()["error"]["param"], Value::Null);
    }
}
