//! Helpers for the hop-diagnosis tests: the page query for a mock schedule, and one printable line
//! per run with the numbers the verdict's thresholds are compared against.

use serde_json::Value;

pub use crate::browser::page_query;

/// The record's verdict and, per hop, the held share, the longest hold, the threshold and bursts.
pub fn summary(record: &Value) -> String {
    let d = &record["diagnosis"];
    let hops: Vec<String> = d["hops"]
        .as_array()
        .map(|hops| hops.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|h| {
            format!(
                "{}: held {:.0}%, hold max {:.1} ms (threshold {:.1}), bursts {}, in long frames {}",
                h["hop"].as_str().unwrap_or("?"),
                h["held_fraction"].as_f64().unwrap_or(f64::NAN) * 100.0,
                h["hold_max_ms"].as_f64().unwrap_or(f64::NAN),
                h["hold_threshold_ms"].as_f64().unwrap_or(f64::NAN),
                h["bursts"],
                h["held_chars_in_long_frames"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    format!("{} | {}", d["verdict"].as_str().unwrap_or("(no diagnosis)"), hops.join(" | "))
}
