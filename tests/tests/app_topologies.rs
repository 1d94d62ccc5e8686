//! Real app topologies in headless Chromium: the page on the app's own origin, an example app
//! server (examples/app-fastapi, examples/app-express) between the page and tokentap, tokentap in
//! front of tokentap-mock.
//!
//! The page loads the probe from tokentap across origins and reports there; tokentap lists the
//! app's origin in `[probe] allowed_origins`. The probe puts a `traceparent` on the page's request
//! to the app, the app carries it to its model call, and tokentap joins the report to that call's
//! record by trace id. The app re-encodes the stream, so browser arrivals are aligned by answer
//! characters. Checks are orderings, equalities and verdicts within one run, never speeds.
//!
//! Without tokentap in front of the app there is no separate stamp at the app: the app server's
//! hop is everything between tokentap's handoff to the app and the browser's arrival.

use serde_json::Value;
use tokentap_e2e::app_server::{AppKind, AppServer, Compression};
use tokentap_e2e::browser::{run_page, PageRun, Reports};
use tokentap_e2e::nginx::Nginx;
use tokentap_e2e::{Mock, RecordFeed, Tokentap};

fn f64_at(v: &Value, what: &str) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

/// One turn: what the page saw, the probe's report, and the joined record.
struct Turn {
    out: Value,
    report: Value,
    record: Value,
}

/// Starts the mock, tokentap (allowing the app's origin) and the app server, sends one message
/// from the app's page and returns the turn once the record has the browser report joined.
fn one_turn(kind: AppKind, compression: Compression, app_env: &[(&str, &str)]) -> Turn {
    one_turn_behind(kind, compression, app_env, None)
}

/// [`one_turn`], with nginx between the app and the browser when `nginx` gives its location
/// directives (the page then loads from nginx's origin).
fn one_turn_behind(kind: AppKind, compression: Compression, app_env: &[(&str, &str)], nginx: Option<&str>) -> Turn {
    one_turn_by(kind, compression, app_env, nginx, Transport::Fetch)
}

/// How the page asks for its answer (the FastAPI page's `sendMessage(message, transport)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    /// fetch, SSE events (`POST /api/chat`).
    Fetch,
    /// An `EventSource` with named events (`GET /api/chat/events`).
    EventSource,
    /// A WebSocket to the app server, one message per delta (`/api/chat/ws`).
    WebSocket,
    /// fetch, JSON lines of the app's own shape (`POST /api/chat/lines`).
    Lines,
}

impl Transport {
    fn page_name(self) -> &'static str {
        match self {
            Transport::Fetch => "fetch",
            Transport::EventSource => "events",
            Transport::WebSocket => "ws",
            Transport::Lines => "lines",
        }
    }

    /// The page's request path, the format the probe reads and the transport the report names.
    fn expected(self) -> (&'static str, &'static str, Value) {
        match self {
            Transport::Fetch => ("/api/chat", "sse", Value::Null),
            Transport::EventSource => ("/api/chat/events", "sse", "event_source".into()),
            Transport::WebSocket => ("/api/chat/ws", "messages", "websocket".into()),
            Transport::Lines => ("/api/chat/lines", "ndjson", Value::Null),
        }
    }
}

/// [`one_turn_behind`], the page asking by `transport`.
fn one_turn_by(
    kind: AppKind,
    compression: Compression,
    app_env: &[(&str, &str)],
    nginx: Option<&str>,
    transport: Transport,
) -> Turn {
    // 40 deltas 30 ms apart: a clean app shows them one by one.
    let mock = Mock::start(&["--tokens", "40", "--itl-ms", "30", "--ttft-ms", "100"]);
    let config = tempfile::NamedTempFile::new().unwrap();
    let (app, (tokentap, front)) = AppServer::start_on_free_port(kind, compression, app_env, |app_origin| {
        let front = nginx.map(|directives| {
            let app_addr: std::net::SocketAddr = app_origin.trim_start_matches("http://").parse().unwrap();
            Nginx::start(app_addr, directives)
        });
        let origins = match &front {
            Some(n) => format!("\"{app_origin}\", \"{}\"", n.origin()),
            None => format!("\"{app_origin}\""),
        };
        std::fs::write(config.path(), format!("[probe]\nallowed_origins = [{origins}]\n")).unwrap();
        let tokentap = Tokentap::start(&mock.url, &["--config", config.path().to_str().unwrap()]);
        let url = format!("http://{}", tokentap.addr);
        ((tokentap, front), url)
    });
    let mut feed = tokentap.feed();

    let out = run_page(&PageRun {
        origin: front.as_ref().map_or_else(|| app.origin.clone(), Nginx::origin),
        path: "/".into(),
        page_file: None,
        probe_fallback: false,
        reports: 1,
        report_mode: Reports::Observe,
        timeout_ms: 60_000,
        result_expr: Some(format!("window.sendMessage('Hello', '{}')", transport.page_name())),
        chromium_args: Vec::new(),
    });
    assert!(out["error"].is_null(), "browser run failed: {out:#}\napp stderr:\n{}", app.proc.stderr());
    assert_eq!(out["page_errors"], serde_json::json!([]), "{out:#}");
    let status = if transport == Transport::WebSocket { 101 } else { 200 };
    assert_eq!(out["result"]["status"], status, "{out:#}");
    let reports = out["reports"].as_array().expect("reports");
    assert_eq!(reports.len(), 1, "one turn, one report: {out:#}");
    let report = reports[0].clone();
    let answer = &out["report_answers"][0];
    assert!(
        (200..300).contains(&answer["status"].as_u64().unwrap_or(0)),
        "tokentap refused the report from the app's origin: {answer}\nreport: {report:#}"
    );
    let record = joined_record(&mut feed, report["span_id"].as_str().expect("span_id"));
    Turn { out, report, record }
}

/// Waits on the live feed for the record the report of the page's span `probe_span_id` joined.
fn joined_record(feed: &mut RecordFeed, probe_span_id: &str) -> Value {
    loop {
        let record = feed.next_record();
        if record["browser"]["probe_span_id"] == probe_span_id {
            return record;
        }
    }
}

/// One trace from `user_send` to first paint, joined by trace id through the app server, every
/// answer chunk stamped upstream → handoff → browser arrival → paint, in order.
fn check_turn(turn: &Turn, kind: AppKind) {
    check_turn_aligned(turn, kind, "trace", "answer_chars");
}

fn check_turn_joined_by(turn: &Turn, kind: AppKind, joined_by: &str) {
    check_turn_aligned(turn, kind, joined_by, "answer_chars");
}

/// `alignment`: `answer_chars` (a shape the probe reads) or `inferred` (one it has no reader for).
fn check_turn_aligned(turn: &Turn, kind: AppKind, joined_by: &str, alignment: &str) {
    check_turn_by(turn, kind, joined_by, alignment, Transport::Fetch);
}

fn check_turn_by(turn: &Turn, kind: AppKind, joined_by: &str, alignment: &str, transport: Transport) {
    let Turn { out, report, record } = turn;
    let result = &out["result"];
    let (path, text_format, transport_name) = transport.expected();
    assert_eq!(report["page_path"], "/");
    assert_eq!(report["request"]["path"], path);
    assert_eq!(report["fetch"]["transport"], transport_name, "{report:#}");
    let clock = &report["clock"];
    assert_eq!(clock["samples"], 5, "the clock sync ran across origins: {clock}");
    let uncertainty = f64_at(&clock["uncertainty_ms"], "clock.uncertainty_ms");
    assert!(uncertainty >= 0.0, "{clock}");
    eprintln!(
        "clock across origins: offset {} ms ± {uncertainty} ms over {} round trips",
        clock["offset_ms"], clock["samples"]
    );

    // The model call's record carries the page's trace: the app propagated the probe's traceparent
    // (or, joined by header, named it in x-tokentap-page-trace).
    if joined_by == "trace" {
        assert_eq!(record["trace_id"], report["trace_id"]);
        assert_ne!(record["parent_span_id"], report["span_id"], "the parent is the app's client span, not the page's");
    }
    assert!(!record.to_string().contains("sk-example"), "the app's API key reached the record");
    let browser = &record["browser"];
    // Every cross-clock value in the record carries the report's stated uncertainty.
    assert_eq!(browser["clock"]["uncertainty_ms"].as_f64(), Some(uncertainty), "{browser:#}");
    assert_eq!(browser["joined_by"], joined_by, "{browser:#}");
    assert_eq!(browser["app_server"], true, "{browser:#}");
    assert_eq!(browser["alignment"], alignment, "{browser:#}");
    assert_eq!(report["fetch"]["text_inferred"].as_bool().unwrap_or(false), alignment == "inferred", "{report:#}");
    // The page's body reads, whatever the format: one summary, every byte counted.
    let bytes = &browser["byte_arrival"];
    assert_eq!(bytes["bytes"], browser["browser_bytes"], "{browser:#}");
    assert!(bytes["reads"].as_u64().unwrap_or(0) >= 1, "{browser:#}");
    assert_eq!(browser["text_format"], text_format, "{browser:#}");
    assert_eq!(browser["transport"], transport_name, "{browser:#}");
    assert_eq!(browser["time_to_first_paint_from"], "user_send", "{browser:#}");
    let chars = result["chars"].as_u64().expect("chars");
    assert!(chars > 0);
    assert_eq!(browser["browser_chars"], chars, "the probe counted what the app showed: {browser:#}");
    assert_eq!(browser["alignment_quality"].as_f64(), Some(1.0), "{browser:#}");
    assert_eq!(browser["painted_chars"], chars, "{browser:#}");
    assert_eq!(browser["answer_chars"], chars, "the app passed on exactly the model's answer: {browser:#}");
    if kind == AppKind::FastApi {
        assert_eq!(browser["bytes_match"], false, "the app re-encodes: {browser:#}");
    }

    // user_send ≤ the page's fetch ≤ first paint (record times are relative to tokentap's start).
    let send = browser["marks"].as_array().unwrap().iter().find(|m| m["name"] == "user_send").expect("user_send");
    let send = f64_at(&send["t_ms"], "user_send");
    let fetch_start = f64_at(&browser["fetch_start_ms"], "fetch_start_ms");
    let first_paint = f64_at(&browser["first_paint_ms"], "first_paint_ms");
    assert!(send <= fetch_start && fetch_start <= first_paint, "{browser:#}");

    // Every chunk that completed answer text: upstream ≤ handoff ≤ browser arrival ≤ paint, and
    // arrivals and paints go forward chunk by chunk.
    let events = record["diagnosis"]["events"].as_u64().expect("diagnosis.events");
    let slack = uncertainty + 1.0;
    let proxy_chunks = record["timeline"]["chunks"].as_array().expect("timeline.chunks");
    let page_chunks = browser["chunks"].as_array().expect("browser.chunks");
    assert_eq!(proxy_chunks.len(), page_chunks.len(), "browser.chunks is parallel to timeline.chunks");
    let (mut stamped, mut last_arrival, mut last_paint) = (0, f64::MIN, f64::MIN);
    for (proxy, page) in proxy_chunks.iter().zip(page_chunks) {
        let Some(arrival) = page["t_browser_ms"].as_f64() else { continue };
        let up = f64_at(&proxy["t_up_ns"], "t_up_ns") / 1e6;
        let handoff = f64_at(&proxy["t_handoff_ns"], "t_handoff_ns") / 1e6;
        let paint = f64_at(&page["t_paint_ms"], "t_paint_ms (every arrived answer chunk was painted)");
        assert!(up <= handoff, "{proxy}");
        assert!(handoff <= arrival + slack, "arrival {arrival} before handoff {handoff} (± {slack}): {proxy} {page}");
        assert!(arrival <= paint, "painted before it arrived: {page}");
        assert!(
            arrival >= last_arrival && paint >= last_paint,
            "out of order: {page} after {last_arrival}/{last_paint}"
        );
        (last_arrival, last_paint) = (arrival, paint);
        stamped += 1;
    }
    assert_eq!(stamped, events, "every answer chunk reached the page and was painted: {browser:#}");
    assert!(events >= 40, "{events} answer events");
}

/// The hop the verdict is about, for the margins printed by each run.
fn hop<'a>(record: &'a Value, name: &str) -> &'a Value {
    record["diagnosis"]["hops"].as_array().unwrap().iter().find(|h| h["hop"] == name).unwrap_or(&Value::Null)
}

fn print_margins(label: &str, record: &Value) {
    let h = hop(record, "browser_arrival");
    eprintln!(
        "margins {label}: verdict {} | browser_arrival held_fraction {} held_p50_ms {} hold_max_ms {} hold_threshold_ms {} bursts {} pattern {}",
        record["diagnosis"]["kind"],
        h["held_fraction"],
        h["held_p50_ms"],
        h["hold_max_ms"],
        h["hold_threshold_ms"],
        h["bursts"],
        h["pattern"]
    );
}

fn clean_app_is_not_blamed(kind: AppKind) {
    let turn = one_turn(kind, Compression::Off, &[]);
    check_turn(&turn, kind);
    print_margins(&format!("{kind:?} clean"), &turn.record);
    let diagnosis = &turn.record["diagnosis"];
    assert_eq!(diagnosis["kind"], "no_rebuffering", "{diagnosis:#}");
    assert!(turn.out["result"]["content_encoding"].is_null(), "{:#}", turn.out);
}

fn compressing_app_server_is_named(kind: AppKind) {
    let turn = one_turn(kind, Compression::On, &[]);
    check_turn(&turn, kind);
    print_margins(&format!("{kind:?} compression"), &turn.record);
    // Starlette's GZipMiddleware gzips; Express's compression() prefers brotli when the browser
    // accepts it.
    let encoding = turn.out["result"]["content_encoding"].as_str().unwrap_or_else(|| panic!("{:#}", turn.out));
    assert!(encoding == "gzip" || encoding == "br", "{encoding}");
    let diagnosis = &turn.record["diagnosis"];
    assert_eq!(diagnosis["kind"], "app_server_compression", "{diagnosis:#}");
    assert_eq!(diagnosis["hop"], "browser_arrival", "{diagnosis:#}");
    assert_eq!(diagnosis["evidence"]["app_server"], true, "{diagnosis:#}");
    assert_eq!(diagnosis["evidence"]["content_encoding"], encoding, "{diagnosis:#}");
    let verdict = diagnosis["verdict"].as_str().unwrap();
    assert!(verdict.contains("app server"), "{verdict}");
    // Where the text waited: in the app server, for most of the answer.
    let waits = &diagnosis["waits"];
    assert_eq!(waits["after_handoff"], "app_server", "{waits:#}");
    let waited = waits["waited"].as_array().unwrap();
    let top = waited.iter().max_by_key(|w| w["chars"].as_u64().unwrap_or(0)).expect("text waited somewhere");
    assert_eq!(top["segment"], "app_server", "{waits:#}");
}

#[test]
fn fastapi_clean_app_is_not_blamed() {
    clean_app_is_not_blamed(AppKind::FastApi);
}

#[test]
fn fastapi_gzip_middleware_is_named() {
    compressing_app_server_is_named(AppKind::FastApi);
}

#[test]
fn express_ai_sdk_clean_app_is_not_blamed() {
    clean_app_is_not_blamed(AppKind::Express);
}

#[test]
fn express_compression_is_named() {
    compressing_app_server_is_named(AppKind::Express);
}

/// compression() on, but the AI SDK's own Express helper flushes it after every event: the text is
/// not held, and tokentap does not blame the compressed response.
#[test]
fn express_compression_flushed_per_event_is_not_blamed() {
    let turn = one_turn(AppKind::Express, Compression::On, &[("APP_STREAM", "pipe")]);
    check_turn(&turn, AppKind::Express);
    print_margins("Express compression flushed", &turn.record);
    assert!(turn.out["result"]["content_encoding"].is_string(), "{:#}", turn.out);
    let diagnosis = &turn.record["diagnosis"];
    assert_eq!(diagnosis["kind"], "no_rebuffering", "{diagnosis:#}");
}

/// An app without OpenTelemetry names the page's trace in `x-tokentap-page-trace`: the report is
/// let in and joined by that header, never silently by anything else.
#[test]
fn fastapi_without_trace_propagation_is_joined_by_the_page_trace_header() {
    let turn = one_turn(AppKind::FastApi, Compression::Off, &[("APP_PROPAGATION", "header")]);
    check_turn_joined_by(&turn, AppKind::FastApi, "header");
    assert_ne!(turn.record["trace_id"], turn.report["trace_id"], "the model call has a trace of its own");
    assert_eq!(turn.record["diagnosis"]["kind"], "no_rebuffering", "{:#}", turn.record["diagnosis"]);
}

/// A field name the probe has never seen, new every run (the app's own event shape).
fn random_field() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let letters: String = (0..6).map(|i| char::from(b'a' + ((nanos >> (i * 4)) % 26) as u8)).collect();
    format!("{letters}{}", nanos % 10)
}

/// The app relays each delta under a field of its own choosing (and the model's chunk id on every
/// event): the probe has no reader for that shape, infers the text field, and every answer chunk
/// still gets its browser arrival and paint.
#[test]
fn fastapi_own_field_name_is_aligned_by_inference() {
    let field = random_field();
    eprintln!("field name this run: {field}");
    let turn = one_turn(AppKind::FastApi, Compression::Off, &[("APP_FIELD", &field)]);
    check_turn_aligned(&turn, AppKind::FastApi, "trace", "inferred");
    assert_eq!(turn.record["diagnosis"]["kind"], "no_rebuffering", "{:#}", turn.record["diagnosis"]);
}

/// The case that once blamed the browser ("paint delayed"): Starlette's GZipMiddleware holds the
/// whole answer and the events use a field name of the app's own. The verdict names the app
/// server's compression, with the page's Content-Encoding and its byte arrival as evidence.
#[test]
fn fastapi_gzip_with_own_field_name_names_compression_not_the_browser() {
    let field = random_field();
    eprintln!("field name this run: {field}");
    let turn = one_turn(AppKind::FastApi, Compression::On, &[("APP_FIELD", &field)]);
    check_turn_aligned(&turn, AppKind::FastApi, "trace", "inferred");
    print_margins("FastAPI gzip, own field", &turn.record);
    let diagnosis = &turn.record["diagnosis"];
    assert_eq!(diagnosis["kind"], "app_server_compression", "{diagnosis:#}");
    assert_eq!(diagnosis["hop"], "browser_arrival", "{diagnosis:#}");
    assert_eq!(diagnosis["evidence"]["content_encoding"], "gzip", "{diagnosis:#}");
    // The bytes themselves: the whole response arrived in one burst at the end.
    let bytes = &turn.record["browser"]["byte_arrival"];
    let fraction = f64_at(&bytes["last_burst_bytes"], "last_burst_bytes") / f64_at(&bytes["bytes"], "bytes");
    assert!(fraction >= 0.8, "{bytes:#}");
}

/// nginx between the app and the browser with its default `proxy_buffering on` (HTTP/1.0 to the
/// app, which then ends its body by closing: nginx holds it until a buffer page fills or the
/// end): the verdict names the reverse proxy, known by the `Server` nginx puts on the response.
#[test]
fn nginx_buffering_in_front_of_the_app_is_named() {
    let turn = one_turn_behind(AppKind::FastApi, Compression::Off, &[], Some(""));
    check_turn(&turn, AppKind::FastApi);
    print_margins("nginx proxy_buffering on in front of FastAPI", &turn.record);
    let diagnosis = &turn.record["diagnosis"];
    assert_eq!(diagnosis["kind"], "reverse_proxy_buffering", "{diagnosis:#}");
    assert_eq!(diagnosis["hop"], "browser_arrival", "{diagnosis:#}");
    let server = diagnosis["evidence"]["server"].as_str().unwrap_or_else(|| panic!("{diagnosis:#}"));
    assert!(server.starts_with("nginx"), "{server}");
    assert!(diagnosis["evidence"]["via"].is_null(), "{diagnosis:#}");
}

/// The same nginx with `proxy_buffering off`: nothing is held, and nginx is not named.
#[test]
fn nginx_without_buffering_in_front_of_the_app_is_not_blamed() {
    let turn = one_turn_behind(AppKind::FastApi, Compression::Off, &[], Some("proxy_buffering off;"));
    check_turn(&turn, AppKind::FastApi);
    print_margins("nginx proxy_buffering off in front of FastAPI", &turn.record);
    assert!(turn.record["browser"]["server"].as_str().is_some_and(|s| s.starts_with("nginx")), "{:#}", turn.record);
    let diagnosis = &turn.record["diagnosis"];
    assert_eq!(diagnosis["kind"], "no_rebuffering", "{diagnosis:#}");
}

/// Runs one clean turn by `transport` (the app's field `field`, when given) and checks every
/// answer chunk from upstream to paint, the alignment and a verdict of none.
fn clean_turn_by(transport: Transport, field: Option<&str>, alignment: &str) -> Turn {
    let env: Vec<(&str, &str)> = field.map(|f| ("APP_FIELD", f)).into_iter().collect();
    let turn = one_turn_by(AppKind::FastApi, Compression::Off, &env, None, transport);
    check_turn_by(&turn, AppKind::FastApi, "trace", alignment, transport);
    print_margins(&format!("FastAPI {transport:?} clean"), &turn.record);
    let diagnosis = &turn.record["diagnosis"];
    assert_eq!(diagnosis["kind"], "no_rebuffering", "{diagnosis:#}");
    turn
}

/// An `EventSource` with named events (`event: delta`): the probe hears the type the page listens
/// to, takes the trace context to the app in the URL, and aligns every event.
#[test]
fn event_source_page_is_aligned_and_clean() {
    clean_turn_by(Transport::EventSource, None, "answer_chars");
}

/// The same `EventSource`, its events in a field of the app's own (random) name: inferred.
#[test]
fn event_source_with_own_field_name_is_aligned_by_inference() {
    let field = random_field();
    eprintln!("field name this run: {field}");
    clean_turn_by(Transport::EventSource, Some(&field), "inferred");
}

/// A WebSocket the page opens to its app server, one message per delta: aligned like a fetch
/// stream, message by message.
#[test]
fn websocket_text_relay_is_aligned_and_clean() {
    clean_turn_by(Transport::WebSocket, None, "answer_chars");
}

/// The same socket relaying a field of the app's own (random) name: inferred.
#[test]
fn websocket_with_own_field_name_is_aligned_by_inference() {
    let field = random_field();
    eprintln!("field name this run: {field}");
    clean_turn_by(Transport::WebSocket, Some(&field), "inferred");
}

/// A plain page reading JSON lines of the app's own shape (`{"seq":N,"piece":"..."}`) with fetch:
/// the probe has no reader for the field, infers it, and aligns every line.
#[test]
fn json_lines_page_is_aligned_by_inference() {
    clean_turn_by(Transport::Lines, None, "inferred");
}

/// Starlette's GZipMiddleware on the `EventSource` stream: the whole answer is held. The page
/// cannot see the response's headers through an EventSource, so the verdict places the hold
/// between tokentap's handoff and the browser and says compression or a proxy is unobserved;
/// it never blames the browser.
#[test]
fn event_source_held_by_gzip_is_placed_before_the_browser_with_headers_unobserved() {
    let turn = one_turn_by(AppKind::FastApi, Compression::On, &[], None, Transport::EventSource);
    check_turn_by(&turn, AppKind::FastApi, "trace", "answer_chars", Transport::EventSource);
    print_margins("FastAPI EventSource gzip", &turn.record);
    let diagnosis = &turn.record["diagnosis"];
    assert_eq!(diagnosis["kind"], "app_server_buffering", "{diagnosis:#}");
    assert_eq!(diagnosis["hop"], "browser_arrival", "{diagnosis:#}");
    assert!(diagnosis["evidence"]["content_encoding"].is_null(), "{diagnosis:#}");
    let verdict = diagnosis["verdict"].as_str().unwrap();
    assert!(verdict.contains("EventSource") && verdict.contains("unobserved"), "{verdict}");
}

/// A React page built by Vite, using the AI SDK's `useChat` against the Express example's AI SDK
/// route, with the probe installed from its npm package folder and initialised in one line: every
/// answer chunk reaches the page and is painted, in order, aligned by the UI message stream's
/// characters, and nothing is blamed.
#[test]
fn react_use_chat_page_is_aligned_and_clean() {
    let turn = one_turn(AppKind::ExpressReact, Compression::Off, &[]);
    check_turn(&turn, AppKind::ExpressReact);
    print_margins("React useChat clean", &turn.record);
    let diagnosis = &turn.record["diagnosis"];
    assert_eq!(diagnosis["kind"], "no_rebuffering", "{diagnosis:#}");
}
