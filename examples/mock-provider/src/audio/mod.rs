//! OpenAI's audio endpoints: speech to text (`/v1/audio/transcriptions`, `/v1/audio/translations`)
//! and text to speech (`/v1/audio/speech`).
//!
//! Code map: `multipart` + `wav` (reading the upload) → `transcription`; `signal` + `wav` (writing
//! audio) → `speech`; `pacing` (when each chunk goes out, on the mock's absolute schedule);
//! `error` (OpenAI-shaped 400 answers). This file turns a request into its response. The generic
//! `x-mock-*` headers that are not about text apply here too: `x-mock-status`,
//! `x-mock-headers-delay-ms`, `x-mock-jitter-ms`, `x-mock-stall-at/-ms`, `x-mock-reset-at`,
//! `x-mock-error-at` (the stream just ends), `x-mock-response-header`, `x-mock-seed`.

mod error;
mod multipart;
mod pacing;
mod signal;
mod speech;
mod transcription;
mod wav;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use tokio::time::Instant;

use self::error::AudioRequestError;
use self::pacing::{finish_offset, stream_timeline, Delivery, SpeechPacing, TranscriptPacing};
use self::speech::SpeechRequest;
use self::transcription::{transcript_text, Transcription, TranscriptionRequest};
use crate::body::MockBody;
use crate::completion::ResponseIds;
use crate::config::MockConfig;
use crate::endpoint::AudioEndpoint;
use crate::formats::openai_error_body;
use crate::request::body_hash;
use crate::scenario::{EarlyEnd, RequestWishes, ResponsePlan};
use crate::schedule::Timing;
use crate::shared::{full_response, json_response, mock_status_response};
use crate::stats::RequestOutcome;
use crate::timeline::Step;

/// Everything that decides one audio response, resolved before any byte is sent.
struct AudioAnswer {
    plan: ResponsePlan,
    timing: Timing,
    delivery: Delivery,
}

impl AudioAnswer {
    fn prepare(
        endpoint: AudioEndpoint,
        config: &MockConfig,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Result<AudioAnswer, AudioRequestError> {
        match endpoint {
            AudioEndpoint::Speech => {
                let request = SpeechRequest::parse(body)?;
                let signal = speech::signal(&request, headers)?;
                let pacing = SpeechPacing::from_headers(headers)?;
                let plan = ResponsePlan::resolve(config, headers, RequestWishes::default())?;
                let delivery = speech::delivery(&request, &signal, &pacing);
                Ok(AudioAnswer { timing: pacing.timing(&plan), plan, delivery })
            }
            AudioEndpoint::Transcription(task) => {
                let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
                let form = multipart::parse(content_type, body)?;
                let request = TranscriptionRequest::from_form(task, &form)?;
                let text = transcript_text(headers)?;
                let pacing = TranscriptPacing::from_headers(headers)?;
                let plan = ResponsePlan::resolve(config, headers, RequestWishes::default())?;
                let delivery = Transcription { request: &request, text: &text }.delivery();
                Ok(AudioAnswer { timing: pacing.timing(&plan), plan, delivery })
            }
        }
    }
}

/// Answers an audio request whose body was read whole at `arrival`.
pub(crate) async fn respond(
    endpoint: AudioEndpoint,
    config: &MockConfig,
    parts: &http::request::Parts,
    body: Bytes,
    arrival: Instant,
    outcome: RequestOutcome,
) -> Response<MockBody> {
    let answer = match AudioAnswer::prepare(endpoint, config, &parts.headers, &body) {
        Ok(answer) => answer,
        Err(error) => return json_response(StatusCode::BAD_REQUEST, &error.body(), Some(outcome)),
    };
    let AudioAnswer { plan, timing, delivery } = answer;
    let request_id = ResponseIds::new(body_hash(parts.uri.path(), &body), plan.seed).id("req_", "request");
    tokio::time::sleep_until(arrival + timing.headers_offset()).await;

    let mut response = match (plan.status, delivery) {
        (Some(status), _) => mock_status_response(status, openai_error_body, outcome),
        (None, Delivery::Stream { content_type, chunks, finish }) => {
            let timeline = stream_timeline(chunks, finish, &timing, plan.early_end);
            let mut response = Response::new(MockBody::scheduled(arrival, timeline, outcome));
            let headers = response.headers_mut();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            response
        }
        (None, Delivery::Whole { content_type, body, slots }) => {
            // Sent whole when the stream would have finished.
            tokio::time::sleep_until(arrival + finish_offset(&timing, slots)).await;
            match plan.early_end {
                None => full_response(content_type, body, outcome),
                Some(EarlyEnd::ErrorEvent { .. }) => {
                    let status = StatusCode::INTERNAL_SERVER_ERROR;
                    json_response(status, &openai_error_body(status, "Mock error mid-transcription."), Some(outcome))
                }
                Some(EarlyEnd::Reset { .. }) => {
                    let reset = vec![(std::time::Duration::ZERO, Step::Reset)];
                    let mut response = Response::new(MockBody::scheduled(Instant::now(), reset, outcome));
                    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
                    response
                }
            }
        }
    };
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("x-request-id", value);
    }
    for (name, value) in &plan.response_headers {
        response.headers_mut().append(name.clone(), value.clone());
    }
    response
}
