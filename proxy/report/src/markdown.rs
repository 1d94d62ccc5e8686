//! The report as markdown tables (what `tokentap report` prints).

use std::fmt::Write;

use tokentap_analysis::Distribution;

use crate::summary::REPORT_METRICS;
use crate::summary::{GroupSummary, Report, ServerSummary};
use tokentap_record::SloConfig;

/// Formats a value for a table: three significant decimals at most, trailing zeros dropped.
pub fn number(v: f64) -> String {
    let text = if v.abs() >= 100.0 { format!("{v:.1}") } else { format!("{v:.3}") };
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.').to_string() } else { text };
    if text == "-0" {
        "0".into()
    } else {
        text
    }
}

/// Client-chosen text (route and model names, group labels, paths) made safe for a table cell or a
/// list item: `|` cannot end the cell, a line break cannot start a row or a heading, and markdown
/// punctuation (links, emphasis, code, HTML) is shown as written.
pub fn text(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        match c {
            '\\' | '|' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '#' | '!' | '~' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn percent(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{:.1}%", v * 100.0))
}

/// "ttft_answer ≤ 500 ms, e2e ≤ 30000 ms", or "none configured".
pub fn slo_text(slo: &SloConfig) -> String {
    let parts: Vec<String> = [
        ("ttft_answer", slo.ttft_answer_ms),
        ("tpot", slo.tpot_ms),
        ("e2e", slo.e2e_ms),
        ("first_paint", slo.first_paint_ms),
    ]
    .iter()
    .filter_map(|(name, v)| v.map(|v| format!("{name} ≤ {} ms", number(v))))
    .collect();
    if parts.is_empty() {
        "none configured (every successful request is good)".into()
    } else {
        parts.join(", ")
    }
}

pub(crate) fn distribution_cells(d: Option<&Distribution>) -> String {
    match d {
        Some(d) => format!(
            "{} | {} | {} | {} | {} | {}",
            d.count,
            number(d.p50),
            number(d.p90),
            number(d.p95),
            number(d.p99),
            number(d.max)
        ),
        None => "0 | – | – | – | – | –".into(),
    }
}

fn table_groups(report: &Report) -> Vec<&GroupSummary> {
    if report.groups.is_empty() {
        vec![&report.overall]
    } else {
        report.groups.iter().collect()
    }
}

/// Renders the whole report.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "# tokentap report\n");
    let _ = writeln!(w, "- source: {}", text(&report.source));
    let _ = writeln!(
        w,
        "- window: {} → {}",
        text(report.since.as_deref().unwrap_or("first record")),
        text(report.until.as_deref().unwrap_or("last record"))
    );
    if report.window_before_oldest_record {
        let _ = writeln!(w, "- note: {}", window_note(report));
    }
    let _ = writeln!(
        w,
        "- records: {} used of {} in the window ({} read); warm-up {}",
        report.records_used,
        report.records_in_window,
        report.records_total,
        if report.include_warmup {
            "included".to_string()
        } else {
            format!("excluded ({} left out)", report.warm_up_excluded)
        }
    );
    if !report.include_warmup && report.warm_up_excluded > 0 && report.records_used == 0 {
        let _ = writeln!(
            w,
            "- **every request in the window is warm-up** (the first `analysis.warmup_requests` of each route after start): `--include-warmup` counts them"
        );
    }
    let by: Vec<&str> = report.group_by.iter().map(|k| k.name()).collect();
    let _ = writeln!(w, "- grouped by: {}", if by.is_empty() { "nothing".to_string() } else { by.join(", ") });
    let _ = writeln!(w, "- SLOs: {}", slo_text(&report.slo));
    let _ = writeln!(
        w,
        "- percentiles: linear interpolation between closest ranks (numpy default) over successful requests; n = samples\n"
    );

    let _ = writeln!(w, "## Latency and throughput\n");
    let _ = writeln!(w, "| group | metric | n | p50 | p90 | p95 | p99 | max |");
    let _ = writeln!(w, "|---|---|---:|---:|---:|---:|---:|---:|");
    for g in table_groups(report) {
        // Only the metrics the group has samples of: speech, transcription and realtime requests
        // have no answer tokens, so rows of nothing would only hide the rows that matter.
        let mut any = false;
        for metric in REPORT_METRICS {
            if let Some(d) = g.metrics.get(metric) {
                let _ = writeln!(w, "| {} | {} | {} |", text(&g.label), metric, distribution_cells(Some(d)));
                any = true;
            }
        }
        if !any {
            let _ = writeln!(
                w,
                "| {} | none of these (no successful text answer: audio, realtime, failures) | 0 | – | – | – | – | – |",
                text(&g.label)
            );
        }
    }

    let split: Vec<&GroupSummary> =
        table_groups(report).into_iter().filter(|g| !g.ttft_answer_by_prompt_cache.is_empty()).collect();
    if !split.is_empty() {
        let _ = writeln!(w, "\n### Time to first answer token by prompt cache\n");
        let _ = writeln!(
            w,
            "Cold and warm prompts differ by up to an order of magnitude: the rows above mix them; these do not.\n"
        );
        let _ = writeln!(w, "| group | prompt cache | n | p50 | p90 | p95 | p99 | max |");
        let _ = writeln!(w, "|---|---|---:|---:|---:|---:|---:|---:|");
        for g in split {
            for (state, d) in &g.ttft_answer_by_prompt_cache {
                let _ = writeln!(w, "| {} | {} | {} |", text(&g.label), text(state), distribution_cells(Some(d)));
            }
        }
    }
    let servers: Vec<(&GroupSummary, &ServerSummary)> =
        table_groups(report).into_iter().filter_map(|g| Some((g, g.server.as_ref()?))).collect();
    if !servers.is_empty() {
        let _ = writeln!(w, "\n### Server-reported time (white box)\n");
        let _ = writeln!(w, "| group | metric | n | p50 | p90 | p95 | p99 | max |");
        let _ = writeln!(w, "|---|---|---:|---:|---:|---:|---:|---:|");
        for (g, s) in &servers {
            for (name, d) in [
                ("server.queue_ms", &s.queue_ms),
                ("server.prefill_ms", &s.prefill_ms),
                ("server.decode_ms", &s.decode_ms),
                ("network_and_proxy_ms", &s.network_and_proxy_ms),
            ] {
                if d.is_some() {
                    let _ = writeln!(w, "| {} | {name} | {} |", text(&g.label), distribution_cells(d.as_ref()));
                }
            }
        }
        for (g, s) in servers.iter().filter(|(_, s)| s.inconsistent > 0) {
            let _ = writeln!(
                w,
                "\n{}: {} of {} server reports claim more time than the wire saw (`server_exceeds_wire`); left out of network_and_proxy_ms.",
                text(&g.label),
                s.inconsistent,
                s.reported
            );
        }
    }

    let _ = writeln!(w, "\n## Goodput and stalls\n");
    let _ = writeln!(
        w,
        "| group | requests | ok | good | attainment | good tokens/s | wall s | stalled / analysed | stall rate |"
    );
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut rows = table_groups(report);
    if !report.groups.is_empty() {
        rows.push(&report.overall);
    }
    for g in rows {
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} | {} / {} | {} |",
            text(&g.label),
            g.requests,
            g.outcomes.get("ok").copied().unwrap_or(0),
            g.goodput.good,
            percent(g.goodput.attainment),
            g.goodput.good_tokens_per_s.map_or("–".into(), number),
            g.goodput.wall_s.map_or("–".into(), number),
            g.stalls.stalled,
            g.stalls.analysed,
            percent(g.stalls.rate),
        );
    }
    if !report.overall.goodput.objectives.is_empty() {
        let _ = writeln!(w, "\n| objective | met | missed | unverified | not applicable |");
        let _ = writeln!(w, "|---|---:|---:|---:|---:|");
        for (name, c) in &report.overall.goodput.objectives {
            let name = text(name);
            let _ = writeln!(w, "| {name} | {} | {} | {} | {} |", c.met, c.missed, c.unverified, c.not_applicable);
        }
    }

    let outcomes: Vec<String> = report.overall.outcomes.iter().map(|(k, v)| format!("{} {v}", text(k))).collect();
    let _ = writeln!(w, "\nOutcomes: {}", if outcomes.is_empty() { "none".into() } else { outcomes.join(", ") });

    let c = &report.conditions;
    let _ = writeln!(w, "\n## Conditions (reproducibility)\n");
    let _ = writeln!(w, "- report by tokentap {}", text(&report.tokentap_version));
    let counts = |m: &std::collections::BTreeMap<String, u64>| {
        m.iter().map(|(k, v)| format!("{} ({v})", text(k))).collect::<Vec<_>>().join(", ")
    };
    let _ = writeln!(w, "- records written by tokentap: {}", counts(&c.record_versions));
    let _ = writeln!(w, "- routes: {}", counts(&c.routes));
    let _ = writeln!(w, "- models: {}", counts(&c.models));
    let _ = writeln!(w, "- stream: {}", counts(&c.stream));
    let _ = writeln!(
        w,
        "- first request {}, last request {}",
        text(c.first_started_at.as_deref().unwrap_or("–")),
        text(c.last_started_at.as_deref().unwrap_or("–"))
    );
    let _ = writeln!(w, "- upstream connections: {} reused, {} new\n", c.connections_reused, c.connections_new);
    let _ = writeln!(w, "| distribution | n | p50 | p90 | p95 | p99 | max |");
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|");
    for (name, d) in [
        ("prompt bytes", &c.prompt_bytes),
        ("prompt tokens (o200k)", &c.prompt_tokens),
        ("cached prompt tokens", &c.cached_prompt_tokens),
        ("output tokens (o200k)", &c.output_tokens),
        ("concurrency at t0", &c.concurrency_at_t0),
    ] {
        let _ = writeln!(w, "| {name} | {} |", distribution_cells(d.as_ref()));
    }
    if let Some(realtime) = &report.realtime {
        out.push_str(&render_realtime(realtime));
    }
    if let Some(webrtc) = &report.webrtc {
        out.push_str(&render_webrtc(webrtc));
    }
    if let Some(mcp) = &report.mcp {
        out.push_str(&render_mcp(mcp));
    }
    if let Some(turns) = &report.turns {
        out.push_str(&render_turns(turns));
    }
    out
}

/// The report's "Realtime sessions" section (markdown): per response, over every session.
pub fn render_realtime(summary: &crate::realtime::RealtimeSummary) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "\n## Realtime sessions\n");
    let _ = writeln!(
        w,
        "- sessions: {} ({} ended without a close frame), responses: {} ({} interrupted), error events: {}",
        summary.sessions,
        summary.sessions_ended_abruptly,
        summary.responses,
        summary.responses_interrupted,
        summary.error_events
    );
    let _ = writeln!(
        w,
        "- per response, times at tokentap except the rows \"heard in the browser\" (the browser probe's first audible sample)\n"
    );
    let _ = writeln!(w, "| metric | n | p50 | p90 | p95 | p99 | max |");
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|");
    for (name, d) in summary.rows() {
        let _ = writeln!(w, "| {name} | {} |", distribution_cells(d));
    }
    out
}

/// The report's "WebRTC sessions" section (markdown): per answer, over every session.
pub fn render_webrtc(summary: &crate::webrtc::WebrtcSummary) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "\n## WebRTC sessions\n");
    let _ = writeln!(
        w,
        "- sessions: {} ({} with choppy audio), answers: {} ({} choppy, {} talked over)",
        summary.sessions, summary.choppy_sessions, summary.answers, summary.choppy_answers, summary.barge_ins
    );
    let _ = writeln!(w, "- per answer, as the browser probe measured it in the page\n");
    let _ = writeln!(w, "| metric | n | p50 | p90 | p95 | p99 | max |");
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|");
    for (name, d) in summary.rows() {
        let _ = writeln!(w, "| {name} | {} |", distribution_cells(d));
    }
    out
}

/// The report's "MCP operations" section (markdown).
pub fn render_mcp(summary: &crate::mcp::McpSummary) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "\n## MCP operations\n");
    let _ = writeln!(
        w,
        "- exchanges: {}, sessions: {}, messages skipped by the analysis: {}",
        summary.exchanges, summary.sessions, summary.skipped_messages
    );
    let _ = writeln!(
        w,
        "- duration: the request head reaching tokentap → the JSON-RPC response arriving from the server (ms), answered operations\n"
    );
    let _ =
        writeln!(w, "| method | tool / prompt | operations | errors | unanswered | n | p50 | p90 | p95 | p99 | max |");
    let _ = writeln!(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in &summary.rows {
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} |",
            text(&row.method),
            row.name.as_deref().map(text).unwrap_or_else(|| "–".into()),
            row.operations,
            row.errors,
            row.unanswered,
            distribution_cells(row.duration_ms.as_ref())
        );
    }
    out
}

/// The report's "Turns" section (markdown).
pub fn render_turns(summary: &crate::turns::TurnSummary) -> String {
    let mut out = String::new();
    let w = &mut out;
    let statuses: Vec<String> = summary.by_status.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let _ = writeln!(w, "\n## Turns\n");
    let _ = writeln!(
        w,
        "- turns: {} ({} with tool calls): {}",
        summary.turns,
        summary.agent_turns,
        if statuses.is_empty() { "none".to_owned() } else { statuses.join(", ") }
    );
    if let Some(r) = &summary.rebuilt {
        let _ = writeln!(
            w,
            "- rebuilt from the records of {} file(s): {} turns had steps in more than one{}",
            r.files,
            r.split_turns,
            if r.fleet_keyed { " (ids as the instances derived them from the fleet key)" } else { "" }
        );
    }
    if summary.fragments > 0 {
        let _ = writeln!(
            w,
            "- {} turn fragments left out: turns another instance began (read every instance's journal with `--records` to rebuild them)",
            summary.fragments
        );
    }
    let _ = writeln!(
        w,
        "- e2e, steps and tool calls over complete turns; shares over complete turns with tool calls; tool runs include the client's own work and network\n"
    );
    let _ = writeln!(w, "| metric | n | p50 | p90 | p95 | p99 | max |");
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|");
    let rows: [(&str, &Option<Distribution>); 7] = [
        ("turn e2e (ms)", &summary.e2e_ms),
        ("model share", &summary.model_share),
        ("tool share", &summary.tool_share),
        ("client share", &summary.client_share),
        ("steps per turn", &summary.steps),
        ("tool calls per turn", &summary.tool_calls),
        ("tool run (ms)", &summary.tool_run_ms),
    ];
    for (name, d) in rows {
        let cells = distribution_cells(d.as_ref());
        let _ = writeln!(w, "| {name} | {cells} |");
    }
    // Tool runs executed over MCP: the tool server's time and the harness's around it.
    for (name, d) in [
        ("tool run over MCP: tool server (ms)", &summary.tool_server_ms),
        ("tool run over MCP: harness (ms)", &summary.tool_harness_ms),
    ] {
        if d.is_some() {
            let _ = writeln!(w, "| {name} | {} |", distribution_cells(d.as_ref()));
        }
    }
    if summary.voice_turns > 0 {
        let _ = writeln!(
            w,
            "\n- voice turns: {}; speech requests with predicted underruns: {}, with underruns heard in the browser: {}, interrupted: {}; times from the transcription request's start as the wire shows them, except voice to voice (the browser probe's end of speech → heard)\n",
            summary.voice_turns, summary.speech_with_underruns, summary.speech_with_observed_underruns, summary.speech_interrupted
        );
        let _ = writeln!(w, "| metric | n | p50 | p90 | p95 | p99 | max |");
        let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|");
        let rows: [(&str, &Option<Distribution>); 4] = [
            ("voice to voice: end of speech → heard (ms)", &summary.voice_to_voice_ms),
            ("voice to first audible sample (ms)", &summary.voice_to_first_audible_ms),
            ("transcription (ms)", &summary.transcription_ms),
            ("speech request to first audible (ms)", &summary.speech_to_first_audible_ms),
        ];
        for (name, d) in rows {
            let cells = distribution_cells(d.as_ref());
            let _ = writeln!(w, "| {name} | {cells} |");
        }
    }
    out
}

/// What a report whose window starts before its oldest record says about it.
pub(crate) fn window_note(report: &Report) -> String {
    match &report.oldest_record {
        Some(oldest) => format!(
            "the window starts before the oldest record ({oldest}): earlier records were rotated away or not \
             recorded, so the report covers less than the window"
        ),
        None => "no records at all: the report covers nothing of the window".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::{build_report, GroupKey, ReportOptions};

    #[test]
    fn client_chosen_text_cannot_break_the_tables() {
        let cases = [
            ("gpt-4o", "gpt-4o"),
            ("a|b", "a\\|b"),
            ("line\nbreak", "line break"),
            ("cr\r\nlf", "cr  lf"),
            ("[click](http://evil.example)", "\\[click\\](http://evil.example)"),
            ("<script>x</script>", "\\<script\\>x\\</script\\>"),
            ("`code` *bold* _em_", "\\`code\\` \\*bold\\* \\_em\\_"),
            ("back\\slash", "back\\\\slash"),
            ("# heading", "\\# heading"),
        ];
        for (raw, expected) in cases {
            assert_eq!(text(raw), expected, "{raw:?}");
        }
    }

    #[test]
    fn a_report_of_warm_up_only_says_how_to_count_it() {
        let records: Vec<_> = (0..2)
            .map(|_| {
                let mut r = tokentap_record::fixtures::stream_record(3);
                r.conditions.warm_up = true;
                r
            })
            .collect();
        let markdown = render(&build_report(&records, &ReportOptions::default()));
        assert!(markdown.contains("0 used of 2") && markdown.contains("`--include-warmup` counts them"), "{markdown}");
        let options = ReportOptions { include_warmup: true, ..ReportOptions::default() };
        assert!(!render(&build_report(&records, &options)).contains("--include-warmup"));
    }

    #[test]
    fn a_window_that_starts_before_the_oldest_record_says_so() {
        let records: Vec<_> = (0..2).map(|_| tokentap_record::fixtures::stream_record(3)).collect();
        let oldest = records.iter().map(|r| r.timeline.t0_unix_ns).min().unwrap();
        let before = ReportOptions { since_unix_ns: Some(oldest - 3_600_000_000_000), ..ReportOptions::default() };
        let report = build_report(&records, &before);
        assert!(report.window_before_oldest_record && report.oldest_record.is_some());
        let markdown = render(&report);
        assert!(markdown.contains("the window starts before the oldest record"), "{markdown}");
        assert!(crate::html::render(&report).contains("the window starts before the oldest record"));
        let inside = ReportOptions { since_unix_ns: Some(oldest), ..ReportOptions::default() };
        assert!(!render(&build_report(&records, &inside)).contains("oldest record"));
        assert!(!render(&build_report(&records, &ReportOptions::default())).contains("oldest record"));
    }

    #[test]
    fn hostile_route_and_model_names_stay_in_their_cell() {
        let hostile = ["m|x", "m\n# injected heading\n| a | b |", "m\r\n- injected item"];
        let records: Vec<_> = hostile
            .iter()
            .map(|model| {
                let mut r = tokentap_record::fixtures::stream_record(3);
                r.conditions.model = Some(model.to_string());
                r.route = format!("route|{model}");
                r
            })
            .collect();
        let options = ReportOptions {
            group_by: vec![GroupKey::Route, GroupKey::Model],
            include_warmup: true,
            source: "journal|\nx".into(),
            ..ReportOptions::default()
        };
        let markdown = render(&build_report(&records, &options));
        // Every row of a table has as many unescaped `|` as its header.
        let mut header: Option<usize> = None;
        let mut rows = 0;
        for line in markdown.lines() {
            assert!(!line.starts_with("# injected") && !line.starts_with("- injected"), "{line}");
            if !line.starts_with('|') {
                header = None;
                continue;
            }
            let separators = line.replace("\\|", "").matches('|').count();
            match header {
                None => header = Some(separators),
                Some(n) => {
                    assert_eq!(separators, n, "{line}");
                    rows += 1;
                }
            }
        }
        assert!(rows > 10, "{markdown}");
        assert!(markdown.contains("m\\|x"), "{markdown}");
    }
}
