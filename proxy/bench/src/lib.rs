//! `tokentap bench`: a streaming load test of an LLM endpoint and the report that goes with it.
//!
//! It drives an OpenAI-compatible Chat Completions or Anthropic Messages endpoint, streaming, over
//! a sweep of cells (concurrency or arrival rate × output length × prompt length), and measures
//! every response with `tokentap-analysis`'s `StreamAnalyzer` on the chunks as the client
//! received them, so TTFT, ITL, TPOT, e2e and tokens/s are exactly those of docs/metrics.md.
//!
//! Code map, in the order of a run:
//! - [`config`]: the flags ([`BenchArgs`]) validated once into a [`BenchConfig`] (the API key is
//!   read here and never shown).
//! - [`corpus`]: prompts of an exact o200k_base length, unique (cold) or shared (warm).
//! - [`plan`]: the cells in run order, the planned request count, open-loop arrivals.
//! - [`api`]: the request bodies.
//! - `client`: HTTP/1.1 (+TLS) with kept-alive connections; one exchange measured; no retries.
//! - [`record`]: one request's JSON line and its failure kinds.
//! - [`run`]: the warm-up and the closed- and open-loop drivers; `progress` draws on stderr.
//! - [`stats`]: a cell's percentiles, throughput and goodput.
//! - [`regress`]: the regressions and the bottleneck reading.
//! - [`results`]: the `--json` document; [`output`] writes the files; [`markdown`] and [`html`]
//!   render the report; [`compare`] compares two documents.
//!
//! **Architecture invariant:** this crate does not depend on pingora. The embedded tokentap in
//! front of the target (the default) is started by the `tokentap` binary, which then hands this
//! crate the proxy's address as the place to send to.

pub mod api;
mod client;
pub mod compare;
pub mod config;
pub mod corpus;
pub mod html;
pub mod markdown;
pub mod output;
pub mod plan;
mod progress;
pub mod record;
pub mod regress;
pub mod results;
pub mod run;
pub mod stats;

pub use client::ClientError;
pub use config::{BenchArgs, BenchConfig, ConfigError, Target};
pub use results::{BenchResults, RequestPath};
pub use run::{run, RunError, RunOutput, RunTarget};

#[cfg(test)]
mod enum_names {
    use tokentap_analysis::names::{deserialized_name_mismatches, serialized_name_mismatches};

    #[test]
    fn as_str_is_the_name_serde_writes_and_reads() {
        let mut wrong = serialized_name_mismatches::<crate::config::SloMetric>();
        wrong.extend(deserialized_name_mismatches::<crate::config::SloMetric>());
        wrong.extend(serialized_name_mismatches::<crate::record::FailureKind>());
        wrong.extend(deserialized_name_mismatches::<crate::record::FailureKind>());
        assert!(wrong.is_empty(), "{wrong:?}");
    }
}
