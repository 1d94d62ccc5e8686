//! The `tokentap bench` flags ([`BenchArgs`]) and their one validation into a [`BenchConfig`].
//!
//! The API key is read here, from the variable `--api-key-env` names, into an [`ApiKey`] whose
//! `Debug` hides it and which is never serialized: it goes into request headers and nowhere else.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which streaming API the target speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// OpenAI-compatible Chat Completions (`POST …/v1/chat/completions`, `stream_options.include_usage`).
    Openai,
    /// Anthropic Messages (`POST …/v1/messages`).
    Anthropic,
}

/// Prompt cache control (see `corpus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum PrefixMode {
    /// Every request's prompt differs from its first tokens: prefix caching cannot help (cold).
    Unique,
    /// One prompt per prompt length for the whole run: requests after the first are warm.
    Shared,
}

/// Open-loop arrival process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// Exponential gaps with mean 1/R (seeded).
    Poisson,
    /// One request every 1/R seconds.
    Constant,
}

/// `tokentap bench` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Base URL of the endpoint, as an SDK's base_url takes it (http://127.0.0.1:8080, or
    /// https://api.openai.com/v1); `/v1` is assumed when the URL has no path.
    #[arg(long)]
    pub target: Option<String>,
    /// The model to ask for.
    #[arg(long, default_value = "default")]
    pub model: String,
    /// The API the target speaks.
    #[arg(long, value_enum, default_value_t = Api::Openai)]
    pub api: Api,
    /// Name of the environment variable holding the API key (the key is never printed or recorded).
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// Closed loop: concurrent users, each sending its next request when the last one ended.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,16", conflicts_with = "rate")]
    pub concurrency: Vec<u32>,
    /// Open loop instead: requests per second (several for a sweep), sent on schedule whatever the
    /// answers do.
    #[arg(long, value_delimiter = ',')]
    pub rate: Vec<f64>,
    /// Open-loop arrivals.
    #[arg(long, value_enum, default_value_t = Arrivals::Poisson)]
    pub arrivals: Arrivals,
    /// Output lengths to ask for (`max_tokens`); the real length is measured.
    #[arg(long, value_delimiter = ',', default_value = "64,512,2048")]
    pub output_tokens: Vec<u32>,
    /// Prompt lengths in o200k_base tokens (exact; several for a sweep).
    #[arg(long, value_delimiter = ',', default_value = "256")]
    pub prompt_tokens: Vec<u64>,
    /// Measured requests per cell.
    #[arg(long, default_value_t = 20)]
    pub requests: u32,
    /// Warm-up requests at the start of the run, one at a time; excluded from every statistic.
    #[arg(long, default_value_t = 3)]
    pub warmup: u32,
    /// Longest time a cell keeps starting requests (e.g. 2m); in-flight requests still finish.
    #[arg(long)]
    pub duration: Option<humantime::Duration>,
    /// Prompt cache control: unique prompts (cold) or one shared prompt (warm).
    #[arg(long, value_enum, default_value_t = PrefixMode::Unique)]
    pub prefix: PrefixMode,
    /// Also send `ignore_eos: true` and `min_tokens` (llama.cpp, vLLM, SGLang) so that every answer
    /// has the asked length. OpenAI-compatible APIs only.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Service level objectives for goodput, e.g. ttft_answer=500ms,tpot=50ms,e2e=30s
    /// (metrics: ttft_answer, ttft_reasoning, tpot, e2e; a bare number is milliseconds).
    #[arg(long)]
    pub slo: Option<String>,
    /// A request that has not ended after this long fails as a timeout.
    #[arg(long, default_value = "5m")]
    pub timeout: humantime::Duration,
    /// A response body larger than this fails (and the connection is dropped).
    #[arg(long, default_value_t = 64 << 20)]
    pub max_response_bytes: u64,
    /// Seed of the prompts and arrivals [default: from the clock, so unique prompts are new each run].
    #[arg(long)]
    pub seed: Option<u64>,
    /// An extra request header, `Name: value` (repeatable).
    #[arg(long = "header")]
    pub headers: Vec<String>,
    /// Write the results (every cell's statistics, the conditions and the environment) as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write one JSON line per request (warm-up included, marked).
    #[arg(long)]
    pub jsonl: Option<PathBuf>,
    /// Write the report: HTML when the name ends in .html, else markdown.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Open a new connection for every request instead of reusing kept-alive ones (for servers that
    /// close a connection after a streamed response without saying so, such as llama.cpp's).
    #[arg(long)]
    pub fresh_connections: bool,
    /// Send straight to the target, without the embedded tokentap.
    #[arg(long)]
    pub direct: bool,
    /// Where the embedded tokentap keeps its records.
    #[arg(long, default_value = "tokentap-bench-data")]
    pub records_dir: PathBuf,
    /// No progress output.
    #[arg(long)]
    pub quiet: bool,
}

/// An API key: its `Debug` hides the value and it has no `Serialize`.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// A parsed base URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    pub https: bool,
    pub host: String,
    pub port: u16,
    /// The path the API path is appended to, without a trailing slash (`/v1`, `/openai/v1`).
    pub base_path: String,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target, ConfigError> {
        let bad = |why: &str| ConfigError::Target { url: url.to_string(), why: why.to_string() };
        let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(bad("it must start with http:// or https://"));
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if authority.is_empty() || authority.contains('@') {
            return Err(bad("it needs a host (and no user info)"));
        }
        if path.contains('?') || path.contains('#') {
            return Err(bad("a base URL has no query or fragment"));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => {
                (host.to_string(), port.parse().map_err(|_| bad("the port is not a number"))?)
            }
            _ => (authority.to_string(), if https { 443 } else { 80 }),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let path = path.trim_end_matches('/');
        let base_path = if path.is_empty() { "/v1".to_string() } else { path.to_string() };
        Ok(Target { https, host, port, base_path })
    }

    /// The path of the streaming endpoint of `api`.
    pub fn request_path(&self, api: Api) -> String {
        match api {
            Api::Openai => format!("{}/chat/completions", self.base_path),
            Api::Anthropic => format!("{}/messages", self.base_path),
        }
    }

    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        format!("{scheme}://{host}:{}{}", self.port, self.base_path)
    }
}

tokentap_analysis::named_enum! {
    /// One metric an SLO bounds.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
    pub enum SloMetric {
        TtftAnswer = "ttft_answer",
        TtftReasoning = "ttft_reasoning",
        Tpot = "tpot",
        E2e = "e2e",
    }
}

/// Objectives: each metric at most this many milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    pub objectives_ms: Vec<(SloMetric, f64)>,
}

impl Slo {
    /// Parses `ttft_answer=500ms,tpot=50ms,e2e=30s` (a bare number is milliseconds).
    pub fn parse(text: &str) -> Result<Slo, ConfigError> {
        let mut objectives_ms = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = |why: &str| ConfigError::Slo { part: part.to_string(), why: why.to_string() };
            let (name, value) = part.split_once('=').ok_or_else(|| bad("expected metric=limit"))?;
            let metric = match name.trim() {
                "ttft" => SloMetric::TtftAnswer,
                other => other.parse().map_err(|_| bad("metrics are ttft_answer, ttft_reasoning, tpot and e2e"))?,
            };
            let value = value.trim();
            let ms = match value.parse::<f64>() {
                Ok(ms) => ms,
                Err(_) => {
                    humantime::parse_duration(value)
                        .map_err(|_| bad("the limit is a duration such as 500ms or 2s"))?
                        .as_secs_f64()
                        * 1000.0
                }
            };
            if !ms.is_finite() || ms <= 0.0 {
                return Err(bad("the limit must be positive"));
            }
            if objectives_ms.iter().any(|(m, _)| *m == metric) {
                return Err(bad("each metric once"));
            }
            objectives_ms.push((metric, ms));
        }
        objectives_ms.sort_by_key(|(m, _)| *m);
        Ok(Slo { objectives_ms })
    }

    pub fn is_empty(&self) -> bool {
        self.objectives_ms.is_empty()
    }
}

/// Closed or open loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum LoadMode {
    Closed { concurrency: Vec<u32> },
    Open { rates: Vec<f64>, arrivals: Arrivals },
}

/// Everything a run needs, validated.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub target: Target,
    pub api: Api,
    pub model: String,
    pub api_key: Option<ApiKey>,
    /// The variable the key came from (recorded; the key is not).
    pub api_key_env: Option<String>,
    pub load: LoadMode,
    pub output_tokens: Vec<u32>,
    pub prompt_tokens: Vec<u64>,
    pub requests: u32,
    pub warmup: u32,
    pub duration: Option<Duration>,
    pub prefix: PrefixMode,
    pub ignore_eos: bool,
    pub slo: Slo,
    pub timeout: Duration,
    pub max_response_bytes: u64,
    pub fresh_connections: bool,
    pub seed: u64,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub json: Option<PathBuf>,
    pub jsonl: Option<PathBuf>,
    pub report: Option<PathBuf>,
    pub quiet: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--target is required")]
    NoTarget,
    #[error("--target {url}: {why}")]
    Target { url: String, why: String },
    #[error("--api-key-env {0}: the variable is not set (or not UTF-8)")]
    ApiKeyMissing(String),
    #[error("--slo {part:?}: {why}")]
    Slo { part: String, why: String },
    #[error("{flag}: {why}")]
    Invalid { flag: &'static str, why: String },
}

fn invalid(flag: &'static str, why: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { flag, why: why.into() }
}

impl BenchArgs {
    /// Validates the flags once; `env` looks up environment variables (the API key).
    pub fn validate(&self, env: impl Fn(&str) -> Option<String>) -> Result<BenchConfig, ConfigError> {
        let target = Target::parse(self.target.as_deref().ok_or(ConfigError::NoTarget)?)?;
        let api_key = match &self.api_key_env {
            Some(name) => Some(ApiKey(env(name).ok_or_else(|| ConfigError::ApiKeyMissing(name.clone()))?)),
            None => None,
        };
        let load = if self.rate.is_empty() {
            if self.concurrency.is_empty() || self.concurrency.contains(&0) {
                return Err(invalid("--concurrency", "each level is at least 1"));
            }
            LoadMode::Closed { concurrency: dedup(&self.concurrency) }
        } else {
            if self.rate.iter().any(|r| !r.is_finite() || *r <= 0.0) {
                return Err(invalid("--rate", "each rate is a positive number of requests per second"));
            }
            LoadMode::Open { rates: self.rate.clone(), arrivals: self.arrivals }
        };
        if self.output_tokens.is_empty() || self.output_tokens.contains(&0) {
            return Err(invalid("--output-tokens", "each length is at least 1"));
        }
        if self.prompt_tokens.is_empty() || self.prompt_tokens.iter().any(|&p| !(16..=1_000_000).contains(&p)) {
            return Err(invalid("--prompt-tokens", "each length is between 16 and 1,000,000 tokens"));
        }
        if self.requests == 0 {
            return Err(invalid("--requests", "at least 1 per cell"));
        }
        if self.ignore_eos && self.api == Api::Anthropic {
            return Err(invalid("--ignore-eos", "Anthropic Messages has no such parameter"));
        }
        let mut headers = Vec::new();
        for text in &self.headers {
            let (name, value) = text.split_once(':').ok_or_else(|| invalid("--header", "expected Name: value"))?;
            let name = http::HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| invalid("--header", format!("{:?} is not a header name", name.trim())))?;
            let value = http::HeaderValue::from_str(value.trim())
                .map_err(|_| invalid("--header", format!("the value of {name} is not a header value")))?;
            headers.push((name, value));
        }
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
        });
        Ok(BenchConfig {
            target,
            api: self.api,
            model: self.model.clone(),
            api_key,
            api_key_env: self.api_key_env.clone(),
            load,
            output_tokens: dedup(&self.output_tokens),
            prompt_tokens: dedup(&self.prompt_tokens),
            requests: self.requests,
            warmup: self.warmup,
            duration: self.duration.map(Into::into),
            prefix: self.prefix,
            ignore_eos: self.ignore_eos,
            slo: self.slo.as_deref().map(Slo::parse).transpose()?.unwrap_or_default(),
            timeout: self.timeout.into(),
            max_response_bytes: self.max_response_bytes,
            fresh_connections: self.fresh_connections,
            seed,
            headers,
            json: self.json.clone(),
            jsonl: self.jsonl.clone(),
            report: self.report.clone(),
            quiet: self.quiet,
        })
    }
}

/// The values in their given order, each once.
fn dedup<T: PartialEq + Copy>(values: &[T]) -> Vec<T> {
    let mut out = Vec::with_capacity(values.len());
    for v in values {
        if !out.contains(v) {
            out.push(*v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_like_sdk_base_urls() {
        let t = Target::parse("http://127.0.0.1:8080").unwrap();
        assert_eq!((t.https, t.host.as_str(), t.port, t.base_path.as_str()), (false, "127.0.0.1", 8080, "/v1"));
        assert_eq!(t.request_path(Api::Openai), "/v1/chat/completions");
        let t = Target::parse("https://api.groq.com/openai/v1/").unwrap();
        assert_eq!((t.port, t.request_path(Api::Openai).as_str()), (443, "/openai/v1/chat/completions"));
        assert_eq!(Target::parse("https://api.anthropic.com").unwrap().request_path(Api::Anthropic), "/v1/messages");
        assert!(Target::parse("ftp://x").is_err());
        assert!(Target::parse("http://h:port").is_err());
    }

    #[test]
    fn slo_parses_units_and_refuses_nonsense() {
        let slo = Slo::parse("tpot=50ms, ttft_answer=0.5s,e2e=30000").unwrap();
        assert_eq!(
            slo.objectives_ms,
            vec![(SloMetric::TtftAnswer, 500.0), (SloMetric::Tpot, 50.0), (SloMetric::E2e, 30000.0)]
        );
        assert!(Slo::parse("itl=5ms").is_err());
        assert!(Slo::parse("tpot=-1").is_err());
        assert!(Slo::parse("tpot=5ms,tpot=6ms").is_err());
    }

    #[test]
    fn the_api_key_comes_from_the_named_variable_and_is_never_shown() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: BenchArgs,
        }
        let cli = Cli::parse_from(["x", "--target", "http://h:1", "--api-key-env", "KEY"]);
        let config = cli.args.validate(|name| (name == "KEY").then(|| "sk-secret".to_string())).unwrap();
        assert_eq!(config.api_key.as_ref().unwrap().expose(), "sk-secret");
        assert!(!format!("{config:?}").contains("sk-secret"));
        assert!(matches!(cli.args.validate(|_| None), Err(ConfigError::ApiKeyMissing(_))));
    }
}
