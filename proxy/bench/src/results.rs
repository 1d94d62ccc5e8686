//! The results document (`--json`): environment, conditions, the warm-up, every cell's
//! statistics, the regressions and the reading derived from them, and how to reproduce the run.

use serde::{Deserialize, Serialize};

use crate::config::{Api, BenchConfig, LoadMode, PrefixMode, Slo};
use crate::plan::Cell;
use crate::regress::{Bottleneck, Regression};
use crate::stats::CellStats;

/// Version of this document's shape.
pub const RESULTS_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchResults {
    pub results_version: u32,
    pub environment: Environment,
    pub conditions: Conditions,
    pub warmup: CellStats,
    pub cells: Vec<CellResult>,
    pub regressions: Vec<Regression>,
    pub bottleneck: Vec<Bottleneck>,
    pub reproduce: Reproduce,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellResult {
    pub cell: Cell,
    pub stats: CellStats,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// The target (base URL; no credentials).
    pub target: String,
    /// `direct`, or `embedded_tokentap` (requests went through a tokentap in this process).
    pub path: RequestPath,
    /// The `server` response header of the first successful response.
    pub server_header: Option<String>,
    /// The model the responses named.
    pub response_model: Option<String>,
    pub tokentap_version: String,
    pub os: String,
    pub arch: String,
    pub cpus: usize,
    pub cpu_model: Option<String>,
    pub memory_bytes: Option<u64>,
    /// When the run started (RFC 3339, UTC).
    pub started_at: String,
    /// Where the embedded tokentap wrote its records.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records_dir: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestPath {
    Direct,
    EmbeddedTokentap,
}

/// What must be equal for two runs to compare (`bench compare` checks these).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conditions {
    pub api: Api,
    pub model: String,
    pub load: LoadMode,
    pub output_tokens: Vec<u32>,
    pub prompt_tokens: Vec<u64>,
    pub requests_per_cell: u32,
    pub warmup: u32,
    pub duration_s: Option<f64>,
    pub prefix: PrefixMode,
    pub ignore_eos: bool,
    pub slo: Slo,
    pub timeout_s: f64,
    /// A new connection per request (`--fresh-connections`).
    #[serde(default)]
    pub fresh_connections: bool,
    pub seed: u64,
    /// Names of the extra request headers (values are not recorded).
    pub extra_headers: Vec<String>,
}

impl Conditions {
    pub fn of(config: &BenchConfig) -> Conditions {
        Conditions {
            api: config.api,
            model: config.model.clone(),
            load: config.load.clone(),
            output_tokens: config.output_tokens.clone(),
            prompt_tokens: config.prompt_tokens.clone(),
            requests_per_cell: config.requests,
            warmup: config.warmup,
            duration_s: config.duration.map(|d| d.as_secs_f64()),
            prefix: config.prefix,
            ignore_eos: config.ignore_eos,
            slo: config.slo.clone(),
            timeout_s: config.timeout.as_secs_f64(),
            fresh_connections: config.fresh_connections,
            seed: config.seed,
            extra_headers: config.headers.iter().map(|(n, _)| n.to_string()).collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reproduce {
    /// The command line, with the seed made explicit (header values of credentials elided).
    pub command: String,
    /// The body of the first cell's first request (its prompt cut to 200 characters).
    pub request_example: serde_json::Value,
    /// The path requests were sent to.
    pub request_path: String,
}

/// The command line to rerun, from the process arguments: `--seed` added when it was not given,
/// and the values of `--header`s that look like credentials replaced.
pub fn reproduce_command(args: &[String], seed: u64) -> String {
    let mut out: Vec<String> = Vec::with_capacity(args.len() + 2);
    let mut iter = args.iter().peekable();
    let mut has_seed = false;
    while let Some(arg) = iter.next() {
        if arg == "--seed" || arg.starts_with("--seed=") {
            has_seed = true;
        }
        if arg == "--header" {
            out.push(arg.clone());
            if let Some(value) = iter.next() {
                out.push(redact_header(value));
            }
            continue;
        }
        if let Some(value) = arg.strip_prefix("--header=") {
            out.push(format!("--header={}", redact_header(value)));
            continue;
        }
        out.push(arg.clone());
    }
    if !has_seed {
        out.push("--seed".into());
        out.push(seed.to_string());
    }
    out.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ")
}

fn redact_header(text: &str) -> String {
    let name = text.split(':').next().unwrap_or("").trim().to_ascii_lowercase();
    if ["auth", "key", "token", "secret", "cookie"].iter().any(|w| name.contains(w)) {
        format!("{}: <redacted>", text.split(':').next().unwrap_or("").trim())
    } else {
        text.to_string()
    }
}

fn shell_quote(arg: &str) -> String {
    if !arg.is_empty() && arg.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./:=,@%+".contains(&b)) {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_gets_its_seed_and_loses_credentials() {
        let args: Vec<String> = [
            "tokentap",
            "bench",
            "--target",
            "http://h:1",
            "--header",
            "Authorization: Bearer sk-1",
            "--header",
            "x-mock-ttft-ms: 5",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let command = reproduce_command(&args, 99);
        assert!(!command.contains("sk-1"), "{command}");
        assert!(command.contains("'x-mock-ttft-ms: 5'"));
        assert!(command.ends_with("--seed 99"));
        let with_seed: Vec<String> = ["tokentap", "bench", "--seed", "5"].iter().map(|s| s.to_string()).collect();
        assert_eq!(reproduce_command(&with_seed, 99), "tokentap bench --seed 5");
    }
}
