//! Server-wide defaults of the mock, as command-line flags. Every timing and shape knob here can be
//! overridden per request by an `x-mock-*` header (see [`REQUEST_HEADERS_HELP`]).

use std::path::PathBuf;

/// Defaults for every response the mock produces. `Default` gives the same values as the flags.
#[derive(clap::Args, Clone, Debug)]
pub struct MockConfig {
    /// Time to first content event, after the response headers (ms).
    #[arg(long, default_value_t = 200)]
    pub ttft_ms: u64,
    /// Inter-event latency: content event k is sent at ttft + k * itl (ms).
    #[arg(long, default_value_t = 20)]
    pub itl_ms: u64,
    /// Maximum extra delay added to each event from a seeded PRNG; never accumulates (ms).
    #[arg(long, default_value_t = 0)]
    pub jitter_ms: u64,
    /// Answer tokens (one vocabulary word with a leading space each, about one o200k token).
    #[arg(long, default_value_t = 40)]
    pub tokens: u32,
    /// Tokens carried by each content event.
    #[arg(long, default_value_t = 1)]
    pub tokens_per_chunk: u32,
    /// Reasoning tokens streamed before the answer on the same schedule (0 = no reasoning phase).
    #[arg(long, default_value_t = 0)]
    pub reasoning_tokens: u32,
    /// Delay before the response headers are sent (ms); the content schedule starts after it.
    #[arg(long, default_value_t = 0)]
    pub headers_delay_ms: u64,
    /// Seed for the jitter PRNG, the generated words and the response ids.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Field of the chat-completions delta that carries reasoning text.
    #[arg(long, value_enum, default_value_t = ReasoningField::ReasoningContent)]
    pub reasoning_field: ReasoningField,
    /// Named preset applied to every request unless `x-mock-scenario` says otherwise.
    #[arg(long, value_enum, default_value_t = Scenario::Text)]
    pub scenario: Scenario,
    /// Content event index before which the stream stalls.
    #[arg(long)]
    pub stall_at: Option<u32>,
    /// Length of the stall (ms).
    #[arg(long)]
    pub stall_ms: Option<u64>,
    /// Heartbeat period during a stall (ms); none when absent.
    #[arg(long)]
    pub heartbeat_ms: Option<u64>,
    /// Send a provider-shaped error event after this content event, then end the stream.
    #[arg(long)]
    pub error_at: Option<u32>,
    /// Abort the connection (no clean end of body) after this content event.
    #[arg(long)]
    pub reset_at: Option<u32>,
    /// Pad each content event to about this many bytes.
    #[arg(long)]
    pub event_bytes: Option<usize>,
    /// Agent mode: answer a request that offers tools with tool calls until the turn has done its
    /// rounds, then with the final answer.
    #[arg(long)]
    pub agent: bool,
    /// Agent mode: tool rounds per turn before the final answer.
    #[arg(long, default_value_t = 1)]
    pub agent_steps: u32,
    /// Agent mode: tool calls per round, sent in parallel in one response.
    #[arg(long, default_value_t = 1)]
    pub agent_parallel: u32,
    /// Fragments each tool call's argument JSON streams in (default: pieces of at most 8 bytes).
    #[arg(long)]
    pub tool_fragments: Option<u32>,
    /// PEM certificate chain: serve HTTPS (ALPN h2 + http/1.1) instead of HTTP/1.1 + h2c.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for `--tls-cert`.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            ttft_ms: 200,
            itl_ms: 20,
            jitter_ms: 0,
            tokens: 40,
            tokens_per_chunk: 1,
            reasoning_tokens: 0,
            headers_delay_ms: 0,
            seed: 0,
            reasoning_field: ReasoningField::ReasoningContent,
            scenario: Scenario::Text,
            stall_at: None,
            stall_ms: None,
            heartbeat_ms: None,
            error_at: None,
            reset_at: None,
            event_bytes: None,
            agent: false,
            agent_steps: 1,
            agent_parallel: 1,
            tool_fragments: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// Where OpenAI-compatible servers put reasoning text in a chat-completions delta.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningField {
    /// `delta.reasoning_content` (DeepSeek, older vLLM).
    #[value(name = "reasoning_content")]
    ReasoningContent,
    /// `delta.reasoning` (newer vLLM, Groq, OpenRouter).
    #[value(name = "reasoning")]
    Reasoning,
}

impl ReasoningField {
    /// The JSON key used in the delta.
    pub fn key(self) -> &'static str {
        match self {
            ReasoningField::ReasoningContent => "reasoning_content",
            ReasoningField::Reasoning => "reasoning",
        }
    }
}

/// Endpoints, per-request headers and control endpoints; shown by `--help` and mirrored in README.md.
pub const REQUEST_HEADERS_HELP: &str = "\
PROVIDER ENDPOINTS (streaming when the JSON body has \"stream\": true):
  POST /v1/chat/completions                      OpenAI Chat Completions (SSE data: lines, [DONE])
  POST /v1/responses                             OpenAI Responses (event: + data:, sequence_number)
  POST /v1/messages                              Anthropic Messages (thinking, text, tool_use, ping)
  POST /v1beta/models/{model}:streamGenerateContent?alt=sse   Gemini SSE (always streams)
  POST /v1beta/models/{model}:generateContent    Gemini non-streaming
  POST /api/chat                                 Ollama NDJSON (streams unless \"stream\": false)
  POST /v1/audio/transcriptions                  OpenAI speech to text (multipart upload; json, text, verbose_json,
                                                 srt, vtt; SSE transcript.text.delta/done with \"stream\": \"true\")
  POST /v1/audio/translations                    the same, in English
  POST /v1/audio/speech                          OpenAI text to speech: 24 kHz 16-bit mono pcm or wav, streamed in
                                                 chunks (SSE speech.audio.delta/done with stream_format sse)
  Request bodies over 32 MiB are answered with 413.

PER-REQUEST HEADERS (override the flags for one request):
  x-mock-scenario: NAME         text | reasoning | tool_call | reasoning_tool | agent | reasoning_agent |
                                stall | stall_heartbeat | error_midstream | reset | slow_headers | huge_event
  x-mock-ttft-ms: MS            time to first content event, counted after the headers
  x-mock-itl-ms: MS             gap between content events (absolute schedule, never drifts)
  x-mock-jitter-ms: MS          seeded random extra delay per event (0..=MS, not cumulative)
  x-mock-tokens: N              answer tokens (words)
  x-mock-tokens-per-chunk: N    tokens per content event
  x-mock-reasoning-tokens: N    reasoning tokens before the answer (0 = none)
  x-mock-reasoning-field: F     reasoning_content | reasoning (chat completions delta field)
  x-mock-headers-delay-ms: MS   delay before the response headers
  x-mock-stall-at: K            stall before content event K ...
  x-mock-stall-ms: MS           ... for MS
  x-mock-heartbeat-ms: MS       heartbeats during the stall (SSE ': keep-alive' comment; Anthropic ping)
  x-mock-error-at: K            provider-shaped error event after content event K, then a clean end
  x-mock-reset-at: K            abort the connection after content event K (no terminating chunk / RST_STREAM)
  x-mock-event-bytes: N         pad each content event to about N bytes (padding field, text unchanged)
  x-mock-status: CODE           answer with this HTTP status and a provider-shaped error body
                                (429 adds retry-after: 1)
  x-mock-seed: N                seed for jitter, words and ids
  x-mock-tool-call: 1           same as the tool_call part of the scenarios: answer text, then a call of
                                the request's first tool (one call, one round, ids from the body hash)
  x-mock-agent: 1|0             agent mode on/off: a request offering tools whose conversation ends with
                                a user message gets tool calls (no text); one ending with tool results
                                gets another round while fewer than x-mock-agent-steps rounds were done
                                since the last user message, else the final answer; no tools: an answer.
                                Ids are unique per response, even for identical requests
  x-mock-agent-steps: K         tool rounds per agent turn before the final answer (default 1)
  x-mock-agent-parallel: N      parallel tool calls per round (default 1), the offered tools in order,
                                cycling when N exceeds them
  x-mock-tool-fragments: M      argument JSON of each call in M streamed fragments (default: 8-byte pieces)
  x-mock-response-header: N: V  add response header N with value V (repeatable), e.g.
                                \"x-mock-response-header: X-Accel-Buffering: no\"

AUDIO HEADERS (also honoured there: status, headers-delay, jitter, stall, reset-at, response-header, seed):
  x-mock-transcript: TEXT       what the speech-to-text endpoints hear (UTF-8; default
                                \"What is the weather in Paris today?\"), one SSE delta per word
  x-mock-stt-first-ms: MS       first transcript delta after MS (default 150)
  x-mock-stt-delta-ms: MS       then a delta every MS (default 20); a whole answer comes when the last would
  x-mock-tts-silence-ms: MS     leading silence of the speech audio, exact zeros (default 200)
  x-mock-tts-audio-ms: MS       speech after the silence (default 60 ms per input character at speed 1,
                                within 200..30000); a 220 Hz tone between -26 and -12 dBFS
  x-mock-tts-chunk-ms: MS       audio per chunk (default 100)
  x-mock-tts-first-ms: MS       first chunk after MS (default 120)
  x-mock-tts-rtf: F             each next chunk chunk-ms x F later (default 0.5; above 1 a player starves)

CONTROL ENDPOINTS (for tests):
  GET /_mock/stats              {\"requests\",\"completed\",\"cancelled\",\"reset\",\"in_flight\"}
  GET /_mock/wait?cancelled=N&requests=N&completed=N&reset=N&timeout_ms=MS
                                long-poll until every given counter reaches N (200) or timeout (408)
  GET /_mock/last_request       {method, path_and_query, version, headers: [[name, value]...],
                                 body_sha256, body_len} of the last provider request
";

/// A named preset of the mock's behaviour.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Scenario {
    /// Plain answer text.
    #[default]
    #[value(name = "text")]
    Text,
    /// A reasoning phase, then the answer.
    #[value(name = "reasoning")]
    Reasoning,
    /// Answer text, then a call to the request's first tool.
    #[value(name = "tool_call")]
    ToolCall,
    /// Reasoning, answer text and a tool call.
    #[value(name = "reasoning_tool")]
    ReasoningTool,
    /// Agent mode: tool calls until the turn has done its rounds, then the answer.
    #[value(name = "agent")]
    Agent,
    /// Agent mode with a reasoning phase before every step.
    #[value(name = "reasoning_agent")]
    ReasoningAgent,
    /// A 1500 ms stall before the middle content event.
    #[value(name = "stall")]
    Stall,
    /// The same stall with heartbeats every 250 ms.
    #[value(name = "stall_heartbeat")]
    StallHeartbeat,
    /// A provider-shaped error event in the middle of the stream.
    #[value(name = "error_midstream")]
    ErrorMidstream,
    /// An abrupt connection abort in the middle of the stream.
    #[value(name = "reset")]
    Reset,
    /// Response headers held back for 1000 ms.
    #[value(name = "slow_headers")]
    SlowHeaders,
    /// Every content event padded to about 64 KiB.
    #[value(name = "huge_event")]
    HugeEvent,
}

impl Scenario {
    /// Parses the scenario name used in `x-mock-scenario`.
    pub fn from_name(name: &str) -> Option<Scenario> {
        <Scenario as clap::ValueEnum>::from_str(name.trim(), true).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readme_mirrors_the_help_text() {
        assert!(include_str!("../README.md").contains(REQUEST_HEADERS_HELP), "README.md's help block is stale");
        for header in ["x-mock-agent:", "x-mock-agent-steps:", "x-mock-agent-parallel:", "x-mock-tool-fragments:"] {
            assert!(REQUEST_HEADERS_HELP.contains(header), "{header}");
        }
    }
}
