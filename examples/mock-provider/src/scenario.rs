//! Named presets (`x-mock-scenario`) and the resolution of one request's [`ResponsePlan`]:
//! flag defaults, then the scenario preset, then explicit `x-mock-*` headers, each overriding the last.

use std::time::Duration;

use http::HeaderMap;

use crate::agent::AgentPlan;
use crate::config::{MockConfig, ReasoningField, Scenario};
use crate::schedule::{Stall, Timing};

/// Reasoning tokens used when a scenario or the request asks for reasoning but no count was given.
const DEFAULT_REASONING_TOKENS: u32 = 16;

/// How the mock ends a stream early, if at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EarlyEnd {
    /// A provider-shaped error event after content event `after`, then a clean end.
    ErrorEvent { after: u32 },
    /// The body fails after content event `after`: hyper aborts the connection / stream.
    Reset { after: u32 },
}

/// Everything that decides one response, resolved before any byte is sent.
#[derive(Clone, Debug)]
pub(crate) struct ResponsePlan {
    pub(crate) timing: Timing,
    pub(crate) answer_tokens: u32,
    pub(crate) tokens_per_chunk: u32,
    pub(crate) reasoning_tokens: u32,
    pub(crate) reasoning_field: ReasoningField,
    /// One call of the first tool after the answer text (`x-mock-tool-call`, tool scenarios).
    pub(crate) tool_call: bool,
    /// Agent mode: how the tool loop goes; takes precedence over `tool_call`.
    pub(crate) agent: Option<AgentPlan>,
    /// Argument fragments per tool call; `None` for 8-byte pieces.
    pub(crate) tool_fragments: Option<u32>,
    pub(crate) early_end: Option<EarlyEnd>,
    pub(crate) event_bytes: Option<usize>,
    pub(crate) status: Option<u16>,
    pub(crate) seed: u64,
    /// Extra response headers (`x-mock-response-header: Name: value`, repeatable).
    pub(crate) response_headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

/// What the request body itself asks for (e.g. Anthropic `thinking`), independent of mock headers.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RequestWishes {
    pub(crate) reasoning: bool,
}

/// A malformed `x-mock-*` header: answered with 400 so a typo never silently changes a test.
#[derive(Debug, thiserror::Error)]
#[error("invalid header {name}: {value:?}")]
pub(crate) struct InvalidMockHeader {
    pub(crate) name: &'static str,
    pub(crate) value: String,
}

impl ResponsePlan {
    pub(crate) fn resolve(
        config: &MockConfig,
        headers: &HeaderMap,
        wishes: RequestWishes,
    ) -> Result<ResponsePlan, InvalidMockHeader> {
        let scenario = match header_str(headers, "x-mock-scenario") {
            Some(name) => Scenario::from_name(name)
                .ok_or_else(|| InvalidMockHeader { name: "x-mock-scenario", value: name.to_owned() })?,
            None => config.scenario,
        };

        let mut ttft_ms = config.ttft_ms;
        let mut itl_ms = config.itl_ms;
        let mut jitter_ms = config.jitter_ms;
        let mut answer_tokens = config.tokens;
        let mut tokens_per_chunk = config.tokens_per_chunk;
        let mut reasoning_tokens = config.reasoning_tokens;
        let mut headers_delay_ms = config.headers_delay_ms;
        let mut seed = config.seed;
        let mut reasoning_field = config.reasoning_field;
        let mut stall_at = config.stall_at;
        let mut stall_ms = config.stall_ms;
        let mut heartbeat_ms = config.heartbeat_ms;
        let mut error_at = config.error_at;
        let mut reset_at = config.reset_at;
        let mut event_bytes = config.event_bytes;
        let mut tool_call = false;
        let mut agent = config.agent;
        let mut agent_steps = config.agent_steps;
        let mut agent_parallel = config.agent_parallel;
        let mut tool_fragments = config.tool_fragments;

        // The preset: only fills in what it is about, so flags keep shaping the rest.
        let middle = (config.tokens / config.tokens_per_chunk.max(1)) / 2;
        let wants_reasoning =
            matches!(scenario, Scenario::Reasoning | Scenario::ReasoningTool | Scenario::ReasoningAgent)
                || wishes.reasoning;
        if wants_reasoning && reasoning_tokens == 0 {
            reasoning_tokens = DEFAULT_REASONING_TOKENS;
        }
        match scenario {
            Scenario::Text | Scenario::Reasoning => {}
            Scenario::ToolCall | Scenario::ReasoningTool => tool_call = true,
            Scenario::Agent | Scenario::ReasoningAgent => agent = true,
            Scenario::Stall | Scenario::StallHeartbeat => {
                stall_at = stall_at.or(Some(middle));
                stall_ms = stall_ms.or(Some(1500));
                if scenario == Scenario::StallHeartbeat {
                    heartbeat_ms = heartbeat_ms.or(Some(250));
                }
            }
            Scenario::ErrorMidstream => error_at = error_at.or(Some(middle)),
            Scenario::Reset => reset_at = reset_at.or(Some(middle)),
            Scenario::SlowHeaders => {
                if headers_delay_ms == 0 {
                    headers_delay_ms = 1000;
                }
            }
            Scenario::HugeEvent => event_bytes = event_bytes.or(Some(64 * 1024)),
        }

        // Explicit headers win over everything.
        override_num(headers, "x-mock-ttft-ms", &mut ttft_ms)?;
        override_num(headers, "x-mock-itl-ms", &mut itl_ms)?;
        override_num(headers, "x-mock-jitter-ms", &mut jitter_ms)?;
        override_num(headers, "x-mock-tokens", &mut answer_tokens)?;
        override_num(headers, "x-mock-tokens-per-chunk", &mut tokens_per_chunk)?;
        override_num(headers, "x-mock-reasoning-tokens", &mut reasoning_tokens)?;
        override_num(headers, "x-mock-headers-delay-ms", &mut headers_delay_ms)?;
        override_num(headers, "x-mock-seed", &mut seed)?;
        override_opt(headers, "x-mock-stall-at", &mut stall_at)?;
        override_opt(headers, "x-mock-stall-ms", &mut stall_ms)?;
        override_opt(headers, "x-mock-heartbeat-ms", &mut heartbeat_ms)?;
        override_opt(headers, "x-mock-error-at", &mut error_at)?;
        override_opt(headers, "x-mock-reset-at", &mut reset_at)?;
        override_opt(headers, "x-mock-event-bytes", &mut event_bytes)?;
        let mut status: Option<u16> = None;
        override_opt(headers, "x-mock-status", &mut status)?;
        if let Some(value) = header_str(headers, "x-mock-reasoning-field") {
            reasoning_field = <ReasoningField as clap::ValueEnum>::from_str(value.trim(), true)
                .map_err(|_| InvalidMockHeader { name: "x-mock-reasoning-field", value: value.to_owned() })?;
        }
        if let Some(value) = header_str(headers, "x-mock-tool-call") {
            tool_call = matches!(value.trim(), "1" | "true" | "yes");
        }
        if let Some(value) = header_str(headers, "x-mock-agent") {
            agent = match value.trim() {
                "1" | "true" | "yes" | "on" => true,
                "0" | "false" | "no" | "off" => false,
                _ => return Err(InvalidMockHeader { name: "x-mock-agent", value: value.to_owned() }),
            };
        }
        override_num(headers, "x-mock-agent-steps", &mut agent_steps)?;
        override_num(headers, "x-mock-agent-parallel", &mut agent_parallel)?;
        override_opt(headers, "x-mock-tool-fragments", &mut tool_fragments)?;
        let mut response_headers = Vec::new();
        for value in headers.get_all("x-mock-response-header") {
            let invalid = || InvalidMockHeader {
                name: "x-mock-response-header",
                value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
            };
            let (name, value) = value.to_str().ok().and_then(|v| v.split_once(':')).ok_or_else(invalid)?;
            let name = http::HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| invalid())?;
            let value = http::HeaderValue::from_str(value.trim()).map_err(|_| invalid())?;
            response_headers.push((name, value));
        }

        let stall = match (stall_at, stall_ms) {
            (Some(at), Some(ms)) if ms > 0 => Some(Stall {
                at,
                duration: Duration::from_millis(ms),
                heartbeat: heartbeat_ms.filter(|ms| *ms > 0).map(Duration::from_millis),
            }),
            (Some(at), None) => Some(Stall {
                at,
                duration: Duration::from_millis(1500),
                heartbeat: heartbeat_ms.filter(|ms| *ms > 0).map(Duration::from_millis),
            }),
            _ => None,
        };
        // A reset is the harsher of the two when both are asked for at the same point.
        let early_end = match (error_at, reset_at) {
            (_, Some(after)) if error_at.is_none_or(|e| after <= e) => Some(EarlyEnd::Reset { after }),
            (Some(after), _) => Some(EarlyEnd::ErrorEvent { after }),
            _ => None,
        };

        Ok(ResponsePlan {
            timing: Timing {
                headers_delay: Duration::from_millis(headers_delay_ms),
                ttft: Duration::from_millis(ttft_ms),
                itl: Duration::from_millis(itl_ms),
                jitter: Duration::from_millis(jitter_ms),
                stall,
                seed,
            },
            answer_tokens,
            tokens_per_chunk: tokens_per_chunk.max(1),
            reasoning_tokens,
            reasoning_field,
            tool_call,
            agent: agent.then_some(AgentPlan { steps: agent_steps, parallel: agent_parallel.max(1) }),
            tool_fragments: tool_fragments.map(|n| n.max(1)),
            early_end,
            event_bytes: event_bytes.filter(|n| *n > 0),
            status: status.filter(|s| *s >= 400),
            seed,
            response_headers,
        })
    }
}

pub(crate) fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The `x-mock-*` header `name` parsed as a `T`; absent is `None`, unparseable an error.
pub(crate) fn parse_header<T: std::str::FromStr>(
    headers: &HeaderMap,
    name: &'static str,
) -> Result<Option<T>, InvalidMockHeader> {
    match header_str(headers, name) {
        None => Ok(None),
        Some(value) => value.trim().parse().map(Some).map_err(|_| InvalidMockHeader { name, value: value.to_owned() }),
    }
}

fn override_num<T: std::str::FromStr>(
    headers: &HeaderMap,
    name: &'static str,
    slot: &mut T,
) -> Result<(), InvalidMockHeader> {
    if let Some(value) = parse_header(headers, name)? {
        *slot = value;
    }
    Ok(())
}

fn override_opt<T: std::str::FromStr>(
    headers: &HeaderMap,
    name: &'static str,
    slot: &mut Option<T>,
) -> Result<(), InvalidMockHeader> {
    if let Some(value) = parse_header(headers, name)? {
        *slot = Some(value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(pairs: &[(&'static str, &str)]) -> ResponsePlan {
        let mut headers = HeaderMap::new();
        for (k, v) in pairs {
            headers.insert(*k, v.parse().unwrap());
        }
        ResponsePlan::resolve(&MockConfig::default(), &headers, RequestWishes::default()).unwrap()
    }

    #[test]
    fn response_headers_are_parsed_and_typos_rejected() {
        let p = plan(&[("x-mock-response-header", "X-Accel-Buffering: no")]);
        assert_eq!(p.response_headers.len(), 1);
        assert_eq!(p.response_headers[0].0, "x-accel-buffering");
        assert_eq!(p.response_headers[0].1, "no");
        let mut headers = HeaderMap::new();
        headers.insert("x-mock-response-header", "no-colon".parse().unwrap());
        assert!(ResponsePlan::resolve(&MockConfig::default(), &headers, RequestWishes::default()).is_err());
    }

    #[test]
    fn headers_override_scenario_which_overrides_flags() {
        let p = plan(&[("x-mock-scenario", "stall"), ("x-mock-stall-ms", "300"), ("x-mock-ttft-ms", "5")]);
        assert_eq!(p.timing.ttft, Duration::from_millis(5));
        let stall = p.timing.stall.unwrap();
        assert_eq!((stall.at, stall.duration), (20, Duration::from_millis(300)));
        assert!(stall.heartbeat.is_none());
    }

    #[test]
    fn scenarios_set_their_knobs() {
        assert_eq!(plan(&[("x-mock-scenario", "reasoning")]).reasoning_tokens, DEFAULT_REASONING_TOKENS);
        assert!(plan(&[("x-mock-scenario", "reasoning_tool")]).tool_call);
        assert_eq!(plan(&[("x-mock-scenario", "reset")]).early_end, Some(EarlyEnd::Reset { after: 20 }));
        assert_eq!(plan(&[("x-mock-scenario", "error_midstream")]).early_end, Some(EarlyEnd::ErrorEvent { after: 20 }));
        assert_eq!(plan(&[("x-mock-scenario", "huge_event")]).event_bytes, Some(65536));
        assert_eq!(plan(&[("x-mock-scenario", "slow_headers")]).timing.headers_delay, Duration::from_secs(1));
        assert!(plan(&[("x-mock-scenario", "stall_heartbeat")]).timing.stall.unwrap().heartbeat.is_some());
        assert_eq!(plan(&[("x-mock-scenario", "agent")]).agent, Some(AgentPlan { steps: 1, parallel: 1 }));
        let reasoning_agent = plan(&[("x-mock-scenario", "reasoning_agent")]);
        assert!(reasoning_agent.agent.is_some());
        assert_eq!(reasoning_agent.reasoning_tokens, DEFAULT_REASONING_TOKENS);
    }

    #[test]
    fn agent_headers() {
        assert_eq!(plan(&[]).agent, None);
        let p = plan(&[
            ("x-mock-agent", "1"),
            ("x-mock-agent-steps", "3"),
            ("x-mock-agent-parallel", "0"),
            ("x-mock-tool-fragments", "5"),
        ]);
        assert_eq!(p.agent, Some(AgentPlan { steps: 3, parallel: 1 }));
        assert_eq!(p.tool_fragments, Some(5));
        assert_eq!(plan(&[("x-mock-scenario", "agent"), ("x-mock-agent", "off")]).agent, None);
        let config = MockConfig { agent: true, agent_parallel: 2, ..MockConfig::default() };
        let from_flags = ResponsePlan::resolve(&config, &HeaderMap::new(), RequestWishes::default()).unwrap();
        assert_eq!(from_flags.agent, Some(AgentPlan { steps: 1, parallel: 2 }));
        for (name, value) in [("x-mock-agent", "maybe"), ("x-mock-agent-steps", "x"), ("x-mock-tool-fragments", "-1")] {
            let mut headers = HeaderMap::new();
            headers.insert(name, value.parse().unwrap());
            assert!(
                ResponsePlan::resolve(&MockConfig::default(), &headers, RequestWishes::default()).is_err(),
                "{name}"
            );
        }
    }

    #[test]
    fn bad_header_is_an_error() {
        let mut headers = HeaderMap::new();
        headers.insert("x-mock-ttft-ms", "soon".parse().unwrap());
        assert!(ResponsePlan::resolve(&MockConfig::default(), &headers, RequestWishes::default()).is_err());
    }
}
