//! What a new user does first: `tokentap demo`, a chat, Ctrl-C, then `tokentap report` and
//! `tokentap explain ID` in the same folder. They find the demo's records without being told
//! where they are; in a folder with no records the error says how to point them at some.

use std::process::Command;
use std::time::Duration;

use tokentap_e2e::http1;
use tokentap_e2e::process::{bin, Proc};

/// Runs `tokentap ARGS` in `cwd` to completion: exit status, stdout, stderr.
fn tokentap_in(cwd: &std::path::Path, args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let mut cmd = Command::new(bin("tokentap"));
    cmd.current_dir(cwd).args(args).env_remove("TOKENTAP_DATA_DIR").env_remove("TOKENTAP_CONFIG");
    let mut proc = Proc::spawn(cmd);
    let status = proc.wait_exit();
    (status, proc.stdout(), proc.stderr())
}

#[test]
fn report_and_explain_after_the_demo_read_the_demos_records() {
    let cwd = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin("tokentap"));
    cmd.current_dir(cwd.path()).env("TOKENTAP_LOG", "info").env_remove("TOKENTAP_DATA_DIR");
    cmd.args(["demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]);
    let mut demo = Proc::spawn(cmd);
    let line = demo.wait_line("  chat page ", Duration::from_secs(30));
    let page = line.split_whitespace().nth(2).expect("chat page URL").to_string();
    let addr: std::net::SocketAddr =
        page.trim_start_matches("http://").split('/').next().unwrap().parse().expect("demo address");
    let resp = http1::post(
        addr,
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        br#"{"model":"mock-gpt","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_eq!(resp.status, 200);
    let id = resp.header("x-tokentap-request-id").expect("request id header").to_string();
    demo.wait_line("[tokentap] 200 POST /v1/chat/completions", Duration::from_secs(30));
    // Ctrl-C: the demo drains and exits cleanly.
    let status = Command::new("kill").arg("-INT").arg(demo.pid().to_string()).status().unwrap();
    assert!(status.success());
    let status = demo.wait_exit();
    assert!(status.success(), "the demo exited with {status}: {}", demo.stderr());
    assert!(cwd.path().join("tokentap-demo-data/records.jsonl").exists());

    let (status, stdout, stderr) = tokentap_in(cwd.path(), &["report"]);
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("reading the demo's records in ./tokentap-demo-data"), "{stderr}");
    assert!(stdout.contains("records: 0 used of 1") || stdout.contains("records: 1 used of 1"), "{stdout}");

    let (status, stdout, stderr) = tokentap_in(cwd.path(), &["explain", &id]);
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("reading the demo's records"), "{stderr}");
    assert!(stdout.contains(&id), "{stdout}");

    // A store of its own wins over the demo's.
    std::fs::create_dir(cwd.path().join("tokentap-data")).unwrap();
    let (status, _, stderr) = tokentap_in(cwd.path(), &["explain", &id]);
    assert!(!status.success());
    assert!(!stderr.contains("reading the demo's records"), "{stderr}");
}

#[test]
fn with_no_records_here_the_error_says_how_to_find_them() {
    let cwd = tempfile::tempdir().unwrap();
    let (status, _, stderr) = tokentap_in(cwd.path(), &["explain", "0123456789abcdef01234567"]);
    assert!(!status.success());
    assert!(stderr.contains("no record store at tokentap-data"), "{stderr}");
    assert!(stderr.contains("--data-dir DIR") && stderr.contains("--admin URL"), "{stderr}");
    let (status, _, stderr) = tokentap_in(cwd.path(), &["report"]);
    assert!(!status.success());
    assert!(stderr.contains("--data-dir DIR") && stderr.contains("--records"), "{stderr}");
}

/// Traffic of every kind through one tokentap: a streamed chat, a non-streaming one, an agent
/// turn (openai SDK, a tool call), a voice turn (speech to text, chat, text to speech) and a
/// realtime WebSocket session. `report --html` carries every section of the markdown report as
/// HTML (no markdown left raw), and `explain` says what to look at for each kind of record.
#[test]
fn every_kind_of_traffic_reads_right_in_the_report_and_explain() {
    let mock = tokentap_e2e::Mock::start(&["--ttft-ms", "30", "--itl-ms", "5", "--tokens", "12"]);
    let tokentap = tokentap_e2e::Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    let sent = tokentap_e2e::traffic::every_kind(&tokentap, &mut feed);
    let (voice, voice_turn) = (&sent.voice, &sent.voice_turn);

    // explain: every kind says what to look at; none says "nothing to diagnose".
    let admin = format!("http://{}", tokentap.admin);
    let explain = |id: &str| {
        let (status, text, err) = tokentap_e2e::process::run_tokentap(&["explain", id, "--admin", &admin]);
        assert!(status.success(), "explain {id}: {err}");
        assert!(!text.contains("nothing to diagnose"), "{text}");
        text
    };
    let text = explain(&sent.realtime_id);
    for needle in ["realtime session (WebSocket)", "response.created", "first audio delta", "look at: "] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    assert!(!text.contains("paint"), "a realtime session has no first paint: {text}");
    let text = explain(voice_turn["turn_id"].as_str().unwrap());
    assert!(text.contains("\nvoice to first audible sample ") || text.contains("\nvoice to voice "), "{text}");
    assert!(!text.contains("end to end"), "a voice turn's headline is the voice chain: {text}");
    let speech_id = voice["request_ids"]["speech_0"].as_str().unwrap();
    let text = explain(speech_id);
    assert!(text.contains("speech (text to speech)") && text.contains("look at: "), "{text}");
    let text = explain(voice["request_ids"]["transcription"].as_str().unwrap());
    assert!(text.contains("transcription (speech to text)"), "{text}");

    // report --html: every markdown heading has its HTML heading; no markdown table is left raw.
    let data_dir = tokentap.data_dir.path().to_str().unwrap().to_string();
    let html_path = tokentap.data_dir.path().join("report.html");
    let (status, markdown, err) = tokentap_e2e::process::run_tokentap(&[
        "report",
        "--data-dir",
        &data_dir,
        "--include-warmup",
        "--group-by",
        "model",
        "--html",
        html_path.to_str().unwrap(),
    ]);
    assert!(status.success(), "{err}");
    let html = std::fs::read_to_string(&html_path).unwrap();
    let headings: Vec<&str> = markdown.lines().filter(|l| l.starts_with('#')).collect();
    for wanted in ["# tokentap report", "## Latency and throughput", "## Conditions (reproducibility)", "## Turns"] {
        assert!(headings.contains(&wanted), "{wanted}: {markdown}");
    }
    assert!(markdown.contains("voice turns: "), "{markdown}");
    for heading in &headings {
        let level = heading.chars().take_while(|&c| c == '#').count();
        let title = heading[level..].trim();
        let tag = format!("<h{level}>{title}</h{level}>");
        assert!(html.contains(&tag), "{tag} missing from the HTML report");
    }
    let page = html.split("<details>").next().unwrap();
    assert!(!page.contains("|---") && !page.contains("| ") && !page.contains("<pre>"), "raw markdown: {page}");
    let tables_md = markdown.lines().filter(|l| l.starts_with("|---")).count();
    assert_eq!(page.matches("<table>").count(), tables_md, "one HTML table per markdown table");
    assert!(page.contains("<svg"), "the distributions are drawn");

    // And it fits a 1,280 px window with nothing printed as null, undefined or NaN.
    use tokentap_e2e::browser::{run_page, PageRun, Reports};
    let out = run_page(&PageRun {
        origin: format!("http://{}", tokentap.addr),
        path: "/_test/report.html".into(),
        page_file: Some(html_path.display().to_string()),
        probe_fallback: false,
        reports: 0,
        report_mode: Reports::Observe,
        timeout_ms: 60_000,
        result_expr: Some(
            "({ width: innerWidth, overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth, text: document.body.innerText })"
                .into(),
        ),
        chromium_args: Vec::new(),
    });
    assert!(out["error"].is_null(), "{out:#}");
    let result = &out["result"];
    assert_eq!(result["width"], 1280, "{result}");
    assert!(result["overflow"].as_f64().unwrap() <= 0.0, "the HTML report scrolls sideways at 1,280 px: {result}");
    let text = result["text"].as_str().unwrap();
    let visible = text.split("report as JSON").next().unwrap();
    for word in ["null", "undefined", "NaN"] {
        assert!(!visible.contains(word), "the HTML report shows {word:?}:\n{visible}");
    }
}
