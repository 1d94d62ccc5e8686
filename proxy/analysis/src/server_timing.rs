//! What an inference server reports about its own time (the "white box"): queueing, prompt
//! processing (prefill), token generation (decode), read from the response body's JSON and from a
//! few response headers. docs/metrics.md ("Server-reported timings") lists every source, the field
//! each value comes from and where that format is documented.
//!
//! Values are kept **as reported**, converted to milliseconds and nothing else: a source that does
//! not report a phase leaves it absent, and a source tokentap does not know yields nothing. A value
//! that is not a finite, non-negative number below [`MAX_REPORTED_MS`] (a hostile or broken
//! upstream) is dropped and counted in `rejected_values`, so no NaN or absurd number reaches a
//! record.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest duration accepted from a server (one day). Anything longer is a broken or hostile value.
pub const MAX_REPORTED_MS: f64 = 86_400_000.0;
/// Largest token count accepted from a server.
pub const MAX_REPORTED_TOKENS: u64 = 1 << 40;
/// Longest header value tokentap keeps for parsing; timing headers are short decimal numbers.
pub const MAX_TIMING_HEADER_BYTES: usize = 32;

/// The response headers that carry server timings, in lower case. The forwarding path copies only
/// these (at most [`MAX_TIMING_HEADER_BYTES`] each), never parses them.
pub const TIMING_HEADERS: [&str; 8] = [
    "openai-processing-ms",
    "x-queue-time",
    "x-inference-time",
    "x-validation-time",
    "x-total-time",
    "x-time-per-token",
    "x-prompt-tokens",
    "x-generated-tokens",
];

crate::named_enum! {
    /// Which server's own report the timings come from.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
    pub enum ServerTimingSource {
        /// llama.cpp's server: `timings` on the last stream event or the JSON body.
        LlamaCpp = "llama_cpp",
        /// Ollama `/api/chat` and `/api/generate`: the `*_duration` and `*_count` fields of the `done` line.
        Ollama = "ollama",
        /// Groq: `x_groq.usage` on the last chunk, `usage` on a whole body (seconds).
        Groq = "groq",
        /// Cerebras: `time_info` (seconds).
        Cerebras = "cerebras",
        /// Hugging Face text-generation-inference: `x-*-time` response headers (milliseconds).
        Tgi = "tgi",
        /// OpenAI: the `openai-processing-ms` response header.
        Openai = "openai",
    }
}

/// One server's report of its own time, in milliseconds. Every value is optional: absent means
/// "not reported", never zero.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerTiming {
    pub source: ServerTimingSource,
    /// Waiting in the server's queue before work started (Groq, Cerebras `queue_time`; TGI
    /// `x-queue-time`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub queue_ms: Option<f64>,
    /// Request validation and tokenization before queueing (TGI `x-validation-time`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub validation_ms: Option<f64>,
    /// Loading the model before the request could run (Ollama `load_duration`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub load_ms: Option<f64>,
    /// Prompt processing up to the first token (llama.cpp `prompt_ms`, Ollama
    /// `prompt_eval_duration`, Groq / Cerebras `prompt_time`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub prefill_ms: Option<f64>,
    /// Generating the output tokens (llama.cpp `predicted_ms`, Ollama `eval_duration`, Groq /
    /// Cerebras `completion_time`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub decode_ms: Option<f64>,
    /// Prefill and decode together, when the server does not split them (TGI `x-inference-time`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub inference_ms: Option<f64>,
    /// The server's whole time for the request (Ollama `total_duration`, Groq / Cerebras
    /// `total_time`, TGI `x-total-time`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub total_ms: Option<f64>,
    /// The server's time until it sent the response head (OpenAI `openai-processing-ms`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub processing_ms: Option<f64>,
    /// The server's mean time per output token (TGI `x-time-per-token`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_per_token_ms: Option<f64>,
    /// Prompt tokens, cached ones included (llama.cpp `prompt_n` + `cache_n`, Ollama
    /// `prompt_eval_count`, Groq / Cerebras `usage.prompt_tokens`, TGI `x-prompt-tokens`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub prompt_tokens: Option<u64>,
    /// Prompt tokens the server reused from its cache instead of processing them (llama.cpp
    /// `cache_n`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cached_prompt_tokens: Option<u64>,
    /// Output tokens (llama.cpp `predicted_n`, Ollama `eval_count`, Groq / Cerebras
    /// `usage.completion_tokens`, TGI `x-generated-tokens`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub output_tokens: Option<u64>,
    /// Reported values dropped because they were not finite, negative, too large or not numbers.
    #[serde(skip_serializing_if = "is_zero", default)]
    pub rejected_values: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Where a server's time ends on the wire, so the two can be compared (docs/metrics.md, "Black box
/// and white box").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerMark {
    /// The server's time to its first token: validation + queue + load + prefill as reported.
    FirstToken,
    /// The server's whole time, for a body sent in one piece: `total_ms`, else the sum of its parts.
    WholeResponse,
    /// The server's time until it sent the response head (`processing_ms`).
    ResponseHead,
}

impl ServerTiming {
    pub fn new(source: ServerTimingSource) -> Self {
        ServerTiming {
            source,
            queue_ms: None,
            validation_ms: None,
            load_ms: None,
            prefill_ms: None,
            decode_ms: None,
            inference_ms: None,
            total_ms: None,
            processing_ms: None,
            time_per_token_ms: None,
            prompt_tokens: None,
            cached_prompt_tokens: None,
            output_tokens: None,
            rejected_values: 0,
        }
    }

    /// True when no time at all was reported (only token counts or rejected values).
    pub fn has_no_time(&self) -> bool {
        [
            self.queue_ms,
            self.validation_ms,
            self.load_ms,
            self.prefill_ms,
            self.decode_ms,
            self.inference_ms,
            self.total_ms,
            self.processing_ms,
        ]
        .iter()
        .all(Option::is_none)
    }

    /// The server's time before its first token: the reported phases before it (validation,
    /// queue, model load, prefill). Needs prefill; the other phases count when reported.
    pub fn first_token_ms(&self) -> Option<f64> {
        let prefill = self.prefill_ms?;
        Some(prefill + self.validation_ms.unwrap_or(0.0) + self.queue_ms.unwrap_or(0.0) + self.load_ms.unwrap_or(0.0))
    }

    /// The server's whole time: `total_ms` as reported, else the sum of the reported phases.
    pub fn whole_ms(&self) -> Option<f64> {
        if let Some(total) = self.total_ms {
            return Some(total);
        }
        let work = match (self.prefill_ms, self.decode_ms, self.inference_ms) {
            (_, _, Some(inference)) => inference,
            (Some(prefill), Some(decode), None) => prefill + decode,
            _ => return None,
        };
        Some(work + self.validation_ms.unwrap_or(0.0) + self.queue_ms.unwrap_or(0.0) + self.load_ms.unwrap_or(0.0))
    }

    /// The server's time to compare with the wire, and which moment it ends at. A stream is
    /// compared at its first token, a body sent whole at its first byte, a response-head time at the
    /// response head.
    pub fn comparable_ms(&self, streamed: bool) -> Option<(ServerMark, f64)> {
        if streamed {
            if let Some(ms) = self.first_token_ms() {
                return Some((ServerMark::FirstToken, ms));
            }
        } else if let Some(ms) = self.whole_ms() {
            return Some((ServerMark::WholeResponse, ms));
        }
        self.processing_ms.map(|ms| (ServerMark::ResponseHead, ms))
    }

    /// llama.cpp's `timings` object (milliseconds): `prompt_n`, `prompt_ms`, `predicted_n`,
    /// `predicted_ms`, `cache_n`. `None` when it carries neither time.
    pub fn from_llama_cpp(timings: &Value) -> Option<Self> {
        let map = timings.as_object()?;
        let mut t = ServerTiming::new(ServerTimingSource::LlamaCpp);
        t.prefill_ms = t.duration(map.get("prompt_ms"), Unit::Milliseconds);
        t.decode_ms = t.duration(map.get("predicted_ms"), Unit::Milliseconds);
        let processed = t.tokens(map.get("prompt_n"));
        t.cached_prompt_tokens = t.tokens(map.get("cache_n"));
        t.prompt_tokens = processed.map(|p| p.saturating_add(t.cached_prompt_tokens.unwrap_or(0)));
        t.output_tokens = t.tokens(map.get("predicted_n"));
        (t.prefill_ms.is_some() || t.decode_ms.is_some()).then_some(t)
    }

    /// Ollama's final line, given its fields (durations in nanoseconds). `None` without any
    /// duration.
    pub fn from_ollama(fields: OllamaFields<'_>) -> Option<Self> {
        let mut t = ServerTiming::new(ServerTimingSource::Ollama);
        t.total_ms = t.duration(fields.total_duration, Unit::Nanoseconds);
        t.load_ms = t.duration(fields.load_duration, Unit::Nanoseconds);
        t.prefill_ms = t.duration(fields.prompt_eval_duration, Unit::Nanoseconds);
        t.decode_ms = t.duration(fields.eval_duration, Unit::Nanoseconds);
        t.prompt_tokens = t.tokens(fields.prompt_eval_count);
        t.output_tokens = t.tokens(fields.eval_count);
        (!t.has_no_time()).then_some(t)
    }

    /// Groq's usage object (`x_groq.usage` on the last chunk, `usage` on a whole body): seconds.
    /// `None` unless it carries one of the time fields (other OpenAI-compatible usage does not).
    pub fn from_groq_usage(usage: &Value) -> Option<Self> {
        Self::from_seconds(ServerTimingSource::Groq, usage, Some(usage))
    }

    /// Cerebras' `time_info` (seconds), with the chunk's `usage` for the token counts.
    pub fn from_cerebras(time_info: &Value, usage: Option<&Value>) -> Option<Self> {
        Self::from_seconds(ServerTimingSource::Cerebras, time_info, usage)
    }

    fn from_seconds(source: ServerTimingSource, times: &Value, usage: Option<&Value>) -> Option<Self> {
        let map = times.as_object()?;
        if !["queue_time", "prompt_time", "completion_time", "total_time"].iter().any(|k| map.contains_key(*k)) {
            return None;
        }
        let mut t = ServerTiming::new(source);
        t.queue_ms = t.duration(map.get("queue_time"), Unit::Seconds);
        t.prefill_ms = t.duration(map.get("prompt_time"), Unit::Seconds);
        t.decode_ms = t.duration(map.get("completion_time"), Unit::Seconds);
        t.total_ms = t.duration(map.get("total_time"), Unit::Seconds);
        if let Some(usage) = usage.and_then(Value::as_object) {
            t.prompt_tokens = t.tokens(usage.get("prompt_tokens"));
            t.output_tokens = t.tokens(usage.get("completion_tokens"));
        }
        Some(t)
    }

    /// The timing headers (name in lower case, value) the proxy copied from the response head.
    /// TGI's `x-*-time` headers (integer milliseconds) win over OpenAI's `openai-processing-ms`.
    pub fn from_headers<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<Self> {
        let mut tgi = ServerTiming::new(ServerTimingSource::Tgi);
        let mut openai = ServerTiming::new(ServerTimingSource::Openai);
        let mut saw_tgi = false;
        for (name, value) in headers {
            let value = value.trim();
            match name {
                "openai-processing-ms" => openai.processing_ms = openai.header_ms(value),
                "x-queue-time" => tgi.queue_ms = tgi.header_ms(value),
                "x-inference-time" => tgi.inference_ms = tgi.header_ms(value),
                "x-validation-time" => tgi.validation_ms = tgi.header_ms(value),
                "x-total-time" => tgi.total_ms = tgi.header_ms(value),
                "x-time-per-token" => tgi.time_per_token_ms = tgi.header_ms(value),
                "x-prompt-tokens" => tgi.prompt_tokens = tgi.header_tokens(value),
                "x-generated-tokens" => tgi.output_tokens = tgi.header_tokens(value),
                _ => continue,
            }
            saw_tgi |= name != "openai-processing-ms";
        }
        // Token counts alone (x-prompt-tokens without any time) are not a timing report.
        if saw_tgi && !tgi.has_no_time() {
            Some(tgi)
        } else if openai.processing_ms.is_some() || openai.rejected_values > 0 {
            Some(openai)
        } else if saw_tgi && tgi.rejected_values > 0 {
            Some(tgi)
        } else {
            None
        }
    }

    /// A JSON duration scaled to milliseconds; a value that is present but unusable is counted.
    fn duration(&mut self, value: Option<&Value>, unit: Unit) -> Option<f64> {
        match value? {
            Value::Null => None,
            Value::Number(n) => match n.as_f64().map(|v| unit.to_ms(v)) {
                Some(ms) if ms.is_finite() && (0.0..=MAX_REPORTED_MS).contains(&ms) => Some(ms),
                _ => self.reject(),
            },
            _ => self.reject(),
        }
    }

    fn tokens(&mut self, value: Option<&Value>) -> Option<u64> {
        match value? {
            Value::Null => None,
            Value::Number(n) => match n.as_u64() {
                Some(v) if v <= MAX_REPORTED_TOKENS => Some(v),
                _ => self.reject(),
            },
            _ => self.reject(),
        }
    }

    /// A header's decimal number of milliseconds (`123`, `12.5`): digits with at most one point,
    /// nothing else (no sign, exponent, `NaN` or `inf`).
    fn header_ms(&mut self, value: &str) -> Option<f64> {
        let mut points = 0;
        let well_formed = !value.is_empty()
            && value.len() <= MAX_TIMING_HEADER_BYTES
            && value.bytes().all(|b| {
                points += usize::from(b == b'.');
                b.is_ascii_digit() || b == b'.'
            })
            && points <= 1
            && value.bytes().any(|b| b.is_ascii_digit());
        match value.parse::<f64>() {
            Ok(ms) if well_formed && ms.is_finite() && ms <= MAX_REPORTED_MS => Some(ms),
            _ => self.reject(),
        }
    }

    fn header_tokens(&mut self, value: &str) -> Option<u64> {
        match value.parse::<u64>() {
            Ok(v) if value.bytes().all(|b| b.is_ascii_digit()) && v <= MAX_REPORTED_TOKENS => Some(v),
            _ => self.reject(),
        }
    }

    fn reject<T>(&mut self) -> Option<T> {
        self.rejected_values = self.rejected_values.saturating_add(1);
        None
    }
}

/// The unit a source reports durations in.
#[derive(Clone, Copy)]
enum Unit {
    Milliseconds,
    Seconds,
    Nanoseconds,
}

impl Unit {
    fn to_ms(self, value: f64) -> f64 {
        match self {
            Unit::Milliseconds => value,
            Unit::Seconds => value * 1e3,
            // Divided, not multiplied by 1e-6, so whole nanoseconds convert exactly as `ns / 1e6`.
            Unit::Nanoseconds => value / 1e6,
        }
    }
}

/// The fields of Ollama's final line that carry its timings, as they appeared.
#[derive(Debug, Default, Clone, Copy)]
pub struct OllamaFields<'a> {
    pub total_duration: Option<&'a Value>,
    pub load_duration: Option<&'a Value>,
    pub prompt_eval_duration: Option<&'a Value>,
    pub eval_duration: Option<&'a Value>,
    pub prompt_eval_count: Option<&'a Value>,
    pub eval_count: Option<&'a Value>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn source_names_are_serdes() {
        assert!(crate::names::serialized_name_mismatches::<ServerTimingSource>().is_empty());
        assert!(crate::names::deserialized_name_mismatches::<ServerTimingSource>().is_empty());
    }

    #[test]
    fn headers_reject_hostile_values_and_keep_the_rest() {
        for bad in ["NaN", "inf", "-5", "1e9", "1.2.3", "", " ", "99999999999", "0x10", "12ms"] {
            let t = ServerTiming::from_headers([("openai-processing-ms", bad)]).unwrap();
            assert_eq!(t.processing_ms, None, "{bad:?}");
            assert_eq!(t.rejected_values, 1, "{bad:?}");
        }
        let t = ServerTiming::from_headers([("x-queue-time", "abc"), ("x-inference-time", "40")]).unwrap();
        assert_eq!(
            (t.source, t.queue_ms, t.inference_ms, t.rejected_values),
            (ServerTimingSource::Tgi, None, Some(40.0), 1)
        );
        assert_eq!(ServerTiming::from_headers([("x-prompt-tokens", "12")]), None);
        assert_eq!(ServerTiming::from_headers([("content-type", "text/plain")]), None);
    }

    #[test]
    fn json_values_out_of_range_are_dropped_and_counted() {
        let t = ServerTiming::from_llama_cpp(&json!({
            "prompt_ms": -1.0, "predicted_ms": 1e300, "prompt_n": "12", "predicted_n": 3, "cache_n": null
        }));
        assert_eq!(t, None, "no usable time at all");
        let t = ServerTiming::from_groq_usage(&json!({"queue_time": "soon", "prompt_time": 0.25})).unwrap();
        assert_eq!((t.queue_ms, t.prefill_ms, t.rejected_values), (None, Some(250.0), 1));
        assert_eq!(ServerTiming::from_groq_usage(&json!({"prompt_tokens": 3})), None, "plain OpenAI usage");
    }

    #[test]
    fn first_token_and_whole_times_add_the_reported_phases_only() {
        let mut t = ServerTiming::new(ServerTimingSource::Groq);
        assert_eq!(t.comparable_ms(true), None);
        t.queue_ms = Some(10.0);
        t.prefill_ms = Some(30.0);
        t.decode_ms = Some(100.0);
        assert_eq!(t.comparable_ms(true), Some((ServerMark::FirstToken, 40.0)));
        assert_eq!(t.comparable_ms(false), Some((ServerMark::WholeResponse, 140.0)));
        t.total_ms = Some(150.0);
        assert_eq!(t.comparable_ms(false), Some((ServerMark::WholeResponse, 150.0)));
        let openai = ServerTiming::from_headers([("openai-processing-ms", "321")]).unwrap();
        assert_eq!(openai.comparable_ms(true), Some((ServerMark::ResponseHead, 321.0)));
    }
}
