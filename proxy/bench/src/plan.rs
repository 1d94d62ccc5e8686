//! The request plan: the cells of a sweep (load level × output length × prompt length), in the
//! order they run, and the open-loop arrival schedule.

use serde::{Deserialize, Serialize};

use crate::config::{Arrivals, BenchConfig, LoadMode};
use crate::corpus::SplitMix64;

/// The load of one cell.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Load {
    /// Closed loop: this many users, each sending its next request when its last one ended.
    Concurrency(u32),
    /// Open loop: requests per second.
    Rate(f64),
}

impl Load {
    pub fn label(&self) -> String {
        match self {
            Load::Concurrency(c) => format!("c={c}"),
            Load::Rate(r) => format!("rate={r}/s"),
        }
    }
}

/// One cell: requests under fixed conditions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// Position in the run (0-based).
    pub index: u32,
    pub load: Load,
    /// `max_tokens` asked for.
    pub output_tokens: u32,
    /// Exact o200k_base length of each prompt.
    pub prompt_tokens: u64,
}

/// The cells in run order: prompt length outermost, then output length, then load, so that one
/// sweep over the load runs back to back under the same lengths.
pub fn cells(config: &BenchConfig) -> Vec<Cell> {
    let loads: Vec<Load> = match &config.load {
        LoadMode::Closed { concurrency } => concurrency.iter().map(|&c| Load::Concurrency(c)).collect(),
        LoadMode::Open { rates, .. } => rates.iter().map(|&r| Load::Rate(r)).collect(),
    };
    let mut out = Vec::new();
    for &prompt_tokens in &config.prompt_tokens {
        for &output_tokens in &config.output_tokens {
            for &load in &loads {
                out.push(Cell { index: out.len() as u32, load, output_tokens, prompt_tokens });
            }
        }
    }
    out
}

/// Requests the target will see when nothing is cut short by `--duration`: the warm-up plus
/// `requests` per cell. Nothing is ever retried, so this is also what the server counts.
pub fn planned_requests(config: &BenchConfig) -> u64 {
    u64::from(config.warmup) + cells(config).len() as u64 * u64::from(config.requests)
}

/// Open-loop send offsets (seconds from the cell's start) of `n` requests at `rate` per second.
/// Poisson arrivals draw exponential gaps from a generator seeded with `seed`; the first request
/// goes at 0 in both processes.
pub fn arrival_offsets_s(rate: f64, n: u32, arrivals: Arrivals, seed: u64) -> Vec<f64> {
    let mut rng = SplitMix64::new(seed ^ 0x6172_7269_7661_6c73); // "arrivals"
    let mut t = 0.0;
    let mut out = Vec::with_capacity(n as usize);
    for k in 0..n {
        if k > 0 {
            t += match arrivals {
                Arrivals::Constant => 1.0 / rate,
                // Inverse transform; 1 - u is in (0, 1], so the logarithm is finite.
                Arrivals::Poisson => -(1.0 - rng.next_f64()).ln() / rate,
            };
        }
        out.push(t);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BenchArgs;
    use clap::Parser;

    fn config(args: &[&str]) -> BenchConfig {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: BenchArgs,
        }
        let mut all = vec!["x", "--target", "http://127.0.0.1:9"];
        all.extend_from_slice(args);
        Cli::parse_from(all).args.validate(|_| None).unwrap()
    }

    #[test]
    fn cells_are_the_cross_product_in_run_order() {
        let c = config(&["--concurrency", "1,4", "--output-tokens", "64,512,2048", "--prompt-tokens", "128,1024"]);
        let list = cells(&c);
        assert_eq!(list.len(), 2 * 3 * 2);
        assert_eq!(list[0], Cell { index: 0, load: Load::Concurrency(1), output_tokens: 64, prompt_tokens: 128 });
        assert_eq!(list[1].load, Load::Concurrency(4));
        assert_eq!(list[2].output_tokens, 512);
        assert_eq!(list[11], Cell { index: 11, load: Load::Concurrency(4), output_tokens: 2048, prompt_tokens: 1024 });
        assert_eq!(planned_requests(&c), 3 + 12 * 20);
        let c = config(&["--rate", "2,5", "--output-tokens", "64", "--requests", "7", "--warmup", "0"]);
        assert_eq!(planned_requests(&c), 14);
        assert_eq!(cells(&c)[1].load, Load::Rate(5.0));
    }

    #[test]
    fn repeated_levels_are_one_cell() {
        let c = config(&["--concurrency", "4,4,1", "--output-tokens", "64,64"]);
        assert_eq!(cells(&c).len(), 2);
    }

    #[test]
    fn arrivals_have_the_asked_rate() {
        let constant = arrival_offsets_s(4.0, 5, Arrivals::Constant, 1);
        assert_eq!(constant, vec![0.0, 0.25, 0.5, 0.75, 1.0]);
        let poisson = arrival_offsets_s(10.0, 20_001, Arrivals::Poisson, 1);
        assert_eq!(poisson, arrival_offsets_s(10.0, 20_001, Arrivals::Poisson, 1), "seeded");
        assert!(poisson.windows(2).all(|w| w[1] >= w[0]));
        // 20,000 exponential gaps of mean 0.1 s: the mean is within 3% (about 4 standard errors).
        let mean = poisson.last().unwrap() / 20_000.0;
        assert!((mean - 0.1).abs() < 0.003, "mean gap {mean}");
    }
}
