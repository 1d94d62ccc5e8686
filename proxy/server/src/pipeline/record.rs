//! A finished request's record: the stream, voice and realtime analyses of its kept bytes, and
//! the record built from its stamps.

use tokentap_analysis::audio::{
    SpeechAnalysis, SpeechAnalyzer, SpeechContext, TranscriptionAnalysis, TranscriptionAnalyzer,
};
use tokentap_analysis::mcp::{self, McpAnalyzer, McpContext, McpExchange, McpLimits};
use tokentap_analysis::{
    analyze_request, percentile, AnalysisLimits, RequestInfo, RequestTiming, ServerTiming, StreamAnalyzer,
    StreamContext, SPEECH_TO_TEXT, TEXT_TO_SPEECH,
};

use crate::config::ValidConfig;
use crate::request_data::RequestData;
use crate::timeline::HandoffStamp;
use tokentap_record::server_time;
use tokentap_record::trace::TraceContext;
use tokentap_record::{CapturedContent, ChunkStamp, Conditions, Outcome, Record, SelfOverhead, TimelineRecord};

use super::queue::CompletedRequest;

/// Speech-to-text and text-to-speech responses, analysed from the kept body pieces.
pub(super) fn voice_analysis(
    d: &RequestData,
    request: &RequestInfo,
) -> (Option<SpeechAnalysis>, Option<TranscriptionAnalysis>) {
    let ok = d.status.is_some_and(|s| (200..300).contains(&s));
    match request.operation.as_deref() {
        Some(TEXT_TO_SPEECH) if ok => {
            let mut analyzer = SpeechAnalyzer::new(SpeechContext {
                response_content_type: d.response_content_type.clone(),
                response_format: request.speech.as_ref().and_then(|s| s.response_format.clone()),
            });
            for (t, piece) in &d.chunks.body.pieces {
                analyzer.push_chunk(piece, *t);
            }
            (Some(analyzer.finish()), None)
        }
        Some(SPEECH_TO_TEXT) if d.status.is_some() => {
            let mut analyzer = TranscriptionAnalyzer::new(d.response_content_type.as_deref());
            for (t, piece) in &d.chunks.body.pieces {
                analyzer.push_chunk(piece, *t);
            }
            (None, Some(analyzer.finish(d.status)))
        }
        _ => (None, None),
    }
}

/// An exchange with an MCP server: on a route with `provider = "mcp"`, or one that looks like MCP
/// (its headers, or a JSON-RPC body on a `/mcp` path). Reads the kept request body and response
/// pieces (`tokentap_analysis::mcp`).
pub(super) fn mcp_exchange(d: &RequestData, request_body: &[u8]) -> Option<McpExchange> {
    let headers = || d.request_headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    let on_mcp_route = d.route.as_ref().is_some_and(|r| r.provider_hint == Some(tokentap_record::Provider::Mcp));
    if !on_mcp_route && !mcp::looks_like_mcp(&d.path, headers(), request_body) {
        return None;
    }
    let ctx = McpContext {
        http_method: d.method.clone(),
        status: d.status,
        response_content_type: d.response_content_type.clone(),
        response_session_id: d.mcp_session_id.clone(),
        path: d.path.clone(),
        ..McpContext::default()
    }
    .with_request_headers(headers());
    let mut analyzer = McpAnalyzer::new(ctx, McpLimits::default());
    analyzer.request_body(request_body, d.request_body.truncated);
    for (t, piece) in &d.chunks.body.pieces {
        analyzer.push_response(piece, *t);
    }
    Some(analyzer.finish(d.chunks.body.truncated))
}

/// `gen_ai.operation.name` of a realtime WebSocket session's request span.
pub(crate) const REALTIME_OPERATION: &str = "realtime";

/// A WebSocket session: both directions' kept pieces, merged in the order they were stamped,
/// through the realtime analysis (frames, permessage-deflate as the 101 negotiated, events).
pub(super) fn realtime_analysis(d: &RequestData) -> tokentap_analysis::realtime::RealtimeSession {
    use tokentap_analysis::realtime::{DeflateParams, Direction, RealtimeAnalyzer, RealtimeContext};
    let deflate = d.websocket_extensions.as_deref().and_then(DeflateParams::from_extensions_header);
    let mut analyzer = RealtimeAnalyzer::new(RealtimeContext { deflate, limits: Default::default() });
    let mut from_client = d.request_body.pieces.iter().peekable();
    let mut from_server = d.chunks.body.pieces.iter().peekable();
    loop {
        let client_first = match (from_client.peek(), from_server.peek()) {
            (None, None) => break,
            (Some(c), Some(s)) => c.0 <= s.0,
            (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        let (direction, (t, piece)) = if client_first {
            (Direction::ClientToServer, from_client.next().expect("peeked"))
        } else {
            (Direction::ServerToClient, from_server.next().expect("peeked"))
        };
        analyzer.push(direction, *t, piece);
    }
    let end =
        [d.t_end_ns, d.chunks.last_chunk_ns, d.request_body.pieces.last().map(|p| p.0)].into_iter().flatten().max();
    let mut session = analyzer.finish(end.unwrap_or(0));
    session.client.bytes_not_kept = d.request_body.truncated;
    session.server.bytes_not_kept = d.chunks.body.truncated;
    session
}

/// Turns a completed request into its record: runs the request and stream analysis.
pub(crate) fn build_record(c: CompletedRequest, config: &ValidConfig) -> Record {
    let CompletedRequest { data: mut d, outcome, error, shed } = c;
    if shed {
        d.chunks.body.shed();
        d.request_body.shed();
    }
    let t_upstream_sent_ns = d.t_upstream_sent_ns();
    if let Some(connection) = d.connection.as_mut() {
        connection.protocol = d.response_protocol;
    }
    let mut chunks: Vec<ChunkStamp> =
        std::mem::take(&mut d.chunks.chunks).iter().map(HandoffStamp::chunk_stamp).collect();
    let client_delivery = (!chunks.is_empty() || d.ack.unavailable.is_some())
        .then(|| tokentap_record::ack::apply(&d.ack, &mut chunks, d.chunks.chunks_truncated));
    // A WebSocket session (the upgrade answered 101): its "bodies" are frames in both directions,
    // read by the realtime analysis instead of the request and stream analyses.
    let websocket = d.status == Some(101);
    let request_body = if websocket { Vec::new() } else { d.request_body.concat() };
    let mut request =
        analyze_request(&d.path, d.request_content_type.as_deref(), &request_body, d.request_body.truncated);
    let realtime = (websocket && !shed).then(|| realtime_analysis(&d));
    if let Some(session) = &realtime {
        request.operation = Some(REALTIME_OPERATION.to_string());
        request.model = request.model.take().or_else(|| session.model.clone());
    }

    let mut analysis = d.status.filter(|_| !shed && !websocket).map(|status| {
        let limits = AnalysisLimits {
            stall_threshold_ns: config.analysis.stall_threshold_ms * 1_000_000,
            ..AnalysisLimits::default()
        };
        let mut analyzer = StreamAnalyzer::new(
            StreamContext {
                request_path: d.path.clone(),
                provider_hint: d.route.as_ref().and_then(|r| r.provider_hint).map(|p| p.as_str().to_string()),
                response_content_type: d.response_content_type.clone(),
                response_status: Some(status),
            },
            limits,
        );
        analyzer.upstream_held(&d.chunks.upstream_held);
        analyzer.expect_pieces(usize::try_from(d.chunks.chunk_count).unwrap_or(usize::MAX));
        for (t_up_ns, piece) in &d.chunks.body.pieces {
            analyzer.push_chunk(piece, *t_up_ns);
        }
        let body_complete =
            d.upstream_eos && matches!(outcome, Outcome::Ok | Outcome::HttpError) && !d.chunks.body.truncated;
        analyzer.finish(RequestTiming {
            t_upstream_headers_ns: d.t_upstream_headers_ns,
            t_end_ns: d.t_end_ns.or(d.chunks.last_chunk_ns),
            body_complete,
        })
    });

    let mcp = (!shed && !websocket).then(|| mcp_exchange(&d, &request_body)).flatten();

    // A client that closes as soon as it reads the stream's end marker (the openai SDK closes its
    // response on `[DONE]`, before the chunked terminator arrives; an MCP client once the response
    // to its request arrived) got the whole answer: `ok`.
    let answered = mcp.as_ref().is_some_and(McpExchange::closed_normally);
    let (outcome, error) = match (outcome, analysis.as_mut()) {
        (Outcome::ClientCancelled, Some(a)) if a.event_counts.done > 0 || answered => {
            a.flags.client_closed_after_end = true;
            a.flags.body_incomplete = !d.upstream_eos || d.chunks.body.truncated;
            (Outcome::Ok, None)
        }
        (outcome, _) => (outcome, error),
    };

    let (speech, transcription) = if shed { (None, None) } else { voice_analysis(&d, &request) };

    let mut lags_us: Vec<f64> =
        chunks.iter().filter_map(|ch| ch.t_handoff_ns.map(|h| h.saturating_sub(ch.t_up_ns) as f64 / 1e3)).collect();
    lags_us.sort_by(f64::total_cmp);
    let self_overhead = SelfOverhead {
        hook_time_us: d.hook_ns as f64 / 1e3,
        handoff_lag_p50_us: (!lags_us.is_empty()).then(|| percentile(&lags_us, 50.0)),
        handoff_lag_p99_us: (!lags_us.is_empty()).then(|| percentile(&lags_us, 99.0)),
        handoff_lag_max_us: lags_us.last().copied(),
    };

    let content = config.privacy.capture_content.then(|| {
        let cap = config.privacy.capture_max_bytes;
        let response = d.chunks.body.concat();
        CapturedContent {
            request_body: String::from_utf8_lossy(&request_body[..request_body.len().min(cap)]).into_owned(),
            request_body_truncated: d.request_body.truncated || request_body.len() > cap,
            response_body: String::from_utf8_lossy(&response[..response.len().min(cap)]).into_owned(),
            response_body_truncated: d.chunks.body.truncated || response.len() > cap,
        }
    });

    if let (Some(analysis), Some(encoding)) = (analysis.as_mut(), d.response_content_encoding.as_deref()) {
        if !encoding.trim().eq_ignore_ascii_case("identity") {
            analysis.flags.encoded_body = Some(encoding.chars().take(64).collect());
        }
    }
    let warm_up = d.route.is_some() && d.route_request_index < config.analysis.warmup_requests;
    // The server's own timings: the body's report, else the timing headers'.
    let server = analysis
        .as_mut()
        .and_then(|a| a.server_timing.take())
        .or_else(|| ServerTiming::from_headers(d.timing_headers.iter().map(|(n, v)| (*n, v.as_str()))));
    let server_split = server.as_ref().zip(analysis.as_ref()).and_then(|(s, a)| server_time::split(s, a));
    let usage = analysis.as_ref().and_then(|a| a.usage.as_ref());
    let cached_prompt_tokens =
        usage.and_then(|u| u.cached_tokens).or_else(|| server.as_ref().and_then(|s| s.cached_prompt_tokens));
    let (cached_prompt_ratio, prompt_cache) = server_time::prompt_cache(
        cached_prompt_tokens,
        usage.and_then(|u| u.input_tokens).or_else(|| server.as_ref().and_then(|s| s.prompt_tokens)),
    );
    let trace = d.trace.unwrap_or_else(|| TraceContext::from_incoming(None));
    let mut record = Record {
        record_version: tokentap_record::RECORD_VERSION,
        request_id: d.request_id,
        trace_id: trace.trace_id,
        span_id: trace.span_id,
        parent_span_id: trace.parent_span_id,
        started_at: humantime::format_rfc3339_micros(d.anchor.wall).to_string(),
        route: d.route.as_ref().map(|r| r.name.clone()).unwrap_or_default(),
        route_role: d.route.as_ref().and_then(|r| r.role),
        upstream: d.route.as_ref().map(|r| r.upstream.url().to_owned()).unwrap_or_default(),
        provider: d.route.as_ref().and_then(|r| r.provider_hint),
        method: d.method,
        path: d.path,
        status: d.status,
        outcome,
        error,
        request_headers: d.request_headers,
        response_content_type: d.response_content_type,
        response_content_encoding: d.response_content_encoding,
        conditions: Conditions {
            model: request.model.clone(),
            stream: request.stream,
            request_bytes: d.request_body.total_bytes,
            prompt_tokens: request.prompt_tokens,
            cached_prompt_tokens,
            cached_prompt_ratio,
            prompt_cache,
            concurrency_at_t0: d.concurrency_at_t0,
            upstream_connection_reused: d.connection.as_ref().map(|x| x.reused),
            warm_up,
            tokentap_version: env!("CARGO_PKG_VERSION").to_string(),
        },
        request,
        timeline: TimelineRecord {
            t0_unix_ns: d.anchor.wall_ns() as u64,
            t_upstream_sent_ns,
            t_upstream_headers_ns: d.t_upstream_headers_ns,
            t_end_ns: d.t_end_ns,
            connection: d.connection,
            chunk_count: d.chunks.chunk_count,
            body_bytes: d.chunks.body.total_bytes,
            chunks_truncated: d.chunks.chunks_truncated,
            analysis_bytes_truncated: d.chunks.body.truncated,
            client_delivery,
            upstream_held: d
                .chunks
                .upstream_held
                .iter()
                .map(|&(start_ns, end_ns)| tokentap_record::schema::HeldSpan { start_ns, end_ns })
                .collect(),
            chunks,
        },
        analysis,
        analysis_shed: shed,
        self_overhead,
        content,
        browser: None,
        diagnosis: None,
        chain: None,
        turn: None,
        speech,
        transcription,
        server,
        server_split,
        realtime,
        mcp,
    };
    record.diagnosis = tokentap_record::diagnosis::diagnose(&record);
    record
}
