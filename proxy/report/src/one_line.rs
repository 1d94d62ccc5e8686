//! The one-line terminal summary of a record (printed by `tokentap demo`).

use tokentap_record::Record;

fn ms(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.0} ms")).unwrap_or_else(|| "—".to_string())
}

/// "200 POST /v1/chat/completions model=… ttfb 3 ms · first answer 205 ms · 49.1 tok/s · stalls 0 · ok"
pub fn one_line(r: &Record) -> String {
    let status = r.status.map(|s| s.to_string()).unwrap_or_else(|| "---".into());
    let model = r.conditions.model.as_deref().unwrap_or("?");
    let mut parts = vec![format!("{status} {} {} model={model}", r.method, r.path)];
    if let Some(a) = &r.analysis {
        let m = &a.metrics;
        parts.push(format!("ttfb {}", ms(m.ttfb_ms)));
        if m.ttft_reasoning_ms.is_some() {
            parts.push(format!("first reasoning {}", ms(m.ttft_reasoning_ms)));
        }
        parts.push(format!("first answer {}", ms(m.ttft_answer_ms)));
        if m.ttft_tool_ms.is_some() {
            parts.push(format!("first tool call {}", ms(m.ttft_tool_ms)));
        }
        parts.push(match m.output_tps {
            Some(tps) => format!("{tps:.1} tok/s"),
            None => "— tok/s".to_string(),
        });
        let stalls = if a.stalls.heartbeat_only > 0 {
            format!("stalls {} ({} heartbeat-only)", a.stalls.count, a.stalls.heartbeat_only)
        } else {
            format!("stalls {}", a.stalls.count)
        };
        parts.push(stalls);
        parts.push(format!("e2e {}", ms(m.e2e_ms)));
    }
    parts.push(r.outcome.as_str().to_string());
    parts.join(" · ")
}
