//! Bad configuration fails at start with a message naming the problem and a non-zero exit.

use std::io::Write;

use tokentap_e2e::process::run_tokentap;

fn config_file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

#[test]
fn unknown_key_is_named() {
    let f = config_file("listen = \"127.0.0.1:0\"\nupstrem = \"http://x\"\n");
    let (status, _, stderr) = run_tokentap(&["serve", "--config", f.path().to_str().unwrap()]);
    assert!(!status.success());
    assert!(stderr.contains("upstrem"), "{stderr}");
}

/// The TOML parser's diagram (the offending line, a caret under the spot) keeps its lines.
#[test]
fn toml_errors_keep_their_caret_diagram() {
    let f = config_file("listen = \"127.0.0.1:0\"\nupstrem = \"http://x\"\n");
    let (status, _, stderr) = run_tokentap(&["serve", "--config", f.path().to_str().unwrap()]);
    assert!(!status.success());
    let lines: Vec<&str> = stderr.lines().collect();
    let quoted = lines.iter().position(|l| l.contains("| upstrem = ")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(lines.get(quoted + 1).is_some_and(|l| l.trim_start().starts_with("| ^")), "no caret line:\n{stderr}");
}

/// `check-config` prints plain values (no `Some(…)` from the debug formatting of an option).
#[test]
fn check_config_prints_plain_values() {
    let (status, stdout, stderr) =
        run_tokentap(&["check-config", "--upstream", "http://127.0.0.1:9", "--admin-listen", "127.0.0.1:8788"]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("admin 127.0.0.1:8788,"), "{stdout}");
    let (_, stdout, _) = run_tokentap(&["check-config", "--upstream", "http://127.0.0.1:9", "--admin-listen", "off"]);
    assert!(stdout.contains("admin off,") && !stdout.contains("Some(") && !stdout.contains("None"), "{stdout}");
}

#[test]
fn bad_upstream_url_is_named() {
    let (status, _, stderr) = run_tokentap(&["serve", "--upstream", "api.openai.com", "--listen", "127.0.0.1:0"]);
    assert!(!status.success());
    assert!(stderr.contains("upstream") && stderr.contains("http://"), "{stderr}");
    let f = config_file("[[route]]\nprefix = \"/\"\nupstream = \"ftp://x\"\n");
    let (status, _, stderr) = run_tokentap(&["serve", "--config", f.path().to_str().unwrap()]);
    assert!(!status.success());
    assert!(stderr.contains("route[0].upstream"), "{stderr}");
}

#[test]
fn bad_value_is_named() {
    let f = config_file("[[route]]\nprefix = \"/\"\nupstream = \"http://x\"\n[timeouts]\nread_s = 0\n");
    let (status, _, stderr) = run_tokentap(&["serve", "--config", f.path().to_str().unwrap()]);
    assert!(!status.success());
    assert!(stderr.contains("timeouts.read_s"), "{stderr}");
}

#[test]
fn port_in_use_is_named() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let (status, _, stderr) = run_tokentap(&[
        "serve",
        "--upstream",
        "http://127.0.0.1:9",
        "--listen",
        &addr,
        "--admin-listen",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!status.success());
    assert!(stderr.contains(&addr) && stderr.to_lowercase().contains("in use"), "{stderr}");
    let (status, _, stderr) = run_tokentap(&[
        "serve",
        "--upstream",
        "http://127.0.0.1:9",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        &addr,
        "--data-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!status.success());
    assert!(stderr.contains("admin_listen"), "{stderr}");
}

/// A second tokentap on the address a running one listens on is refused: with SO_REUSEPORT alone
/// both would listen and the kernel would split the connections between them.
#[test]
fn a_second_tokentap_on_a_held_port_is_refused() {
    let first = tokentap_e2e::Tokentap::start("http://127.0.0.1:9", &[]);
    let addr = first.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(tokentap_e2e::process::bin("tokentap"));
    cmd.args(["serve", "--upstream", "http://127.0.0.1:9", "--listen", &addr, "--admin-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.path());
    let mut second = tokentap_e2e::process::Proc::spawn(cmd);
    // Either it exits (refused) or it announces that it listens (the port is shared).
    let listening = second.wait_line_or_exit("tokentap listening on", std::time::Duration::from_secs(30));
    assert!(listening.is_none(), "the second tokentap listens on {addr} too: {listening:?}");
    let status = second.wait_exit();
    let stderr = second.stderr();
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains(&addr) && stderr.contains("already in use by another tokentap"), "{stderr}");
}

#[test]
fn missing_upstream_is_named() {
    let (status, _, stderr) = run_tokentap(&["serve", "--listen", "127.0.0.1:0"]);
    assert!(!status.success());
    assert!(stderr.contains("--upstream"), "{stderr}");
}

#[test]
fn a_log_filter_that_does_not_parse_is_an_error() {
    let mut cmd = std::process::Command::new(tokentap_e2e::process::bin("tokentap"));
    cmd.args(["check-config", "--upstream", "http://127.0.0.1:9"]).env("TOKENTAP_LOG", "tokentap=loud");
    let out = cmd.output().expect("run tokentap");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("TOKENTAP_LOG"), "{stderr}");
}

#[test]
fn shutdown_grace_period_is_bounded() {
    let f = config_file("[[route]]\nprefix = \"/\"\nupstream = \"http://x\"\n[shutdown]\ngrace_period_s = 100000\n");
    let (status, _, stderr) = run_tokentap(&["serve", "--config", f.path().to_str().unwrap()]);
    assert!(!status.success());
    assert!(stderr.contains("shutdown.grace_period_s"), "{stderr}");
}

/// Each value would pass a naive check, then panic, abort on a huge allocation, take gigabytes
/// at start or make every request fail: `check-config` refuses it, naming the key.
#[test]
fn out_of_range_values_are_refused_by_check_config() {
    let route = "[[route]]\nprefix = \"/\"\nupstream = \"http://127.0.0.1:9\"\n";
    let cases: &[(&str, &str)] = &[
        ("[analysis]\nqueue_capacity = 4000000000\n", "analysis.queue_capacity"),
        ("[store]\nring_size = 1000000000\n", "store.ring_size"),
        ("[store]\nmax_files = 4000000000\n", "store.max_files"),
        ("[timeline]\nmax_chunks = 1000000000000\n", "timeline.max_chunks"),
        ("[timeline]\nmax_analysis_bytes = 100000000000\n", "timeline.max_analysis_bytes"),
        ("[timeline]\nmax_request_bytes = 100000000000\n", "timeline.max_request_bytes"),
        ("[timeline]\nack_drain_ms = 100000000000\n", "timeline.ack_drain_ms"),
        ("[timeouts]\nread_s = 100000000000\n", "timeouts.read_s"),
        ("[timeouts]\nconnect_ms = 100000000000\n", "timeouts.connect_ms"),
        ("[privacy]\ncapture_max_bytes = 100000000000\n", "privacy.capture_max_bytes"),
        ("[probe]\nmax_recent_traces = 100000000000\n", "probe.max_recent_traces"),
        ("[probe]\nburst = 4000000000\n", "probe.burst"),
        ("[probe]\nreports_per_second = 1e300\n", "probe.reports_per_second"),
        ("[probe]\ntrace_ttl_s = 100000000000\n", "probe.trace_ttl_s"),
        ("[otel]\nqueue_capacity = 100000000000\n", "otel.queue_capacity"),
        ("[otel]\nspool_max_bytes = 100000000000000\n", "otel.spool_max_bytes"),
        ("[metrics]\nmax_series_per_metric = 100000000000\n", "metrics.max_series_per_metric"),
        ("admin_max_feed_subscribers = 100000000\n", "admin_max_feed_subscribers"),
        ("admin_max_connections = 0\n", "admin_max_connections"),
        ("admin_head_timeout_s = 0\n", "admin_head_timeout_s"),
    ];
    for (text, key) in cases {
        let f = config_file(&format!("{text}{route}"));
        let (status, _, stderr) = run_tokentap(&["check-config", "--config", f.path().to_str().unwrap()]);
        assert!(!status.success(), "{key} should be refused");
        assert!(stderr.contains(&format!("`{key}`")), "{key}: {stderr}");
        assert!(!stderr.contains("panicked"), "{key}: {stderr}");
    }
}

#[test]
fn an_upstream_or_prefix_with_spaces_or_line_breaks_is_refused() {
    let cases = [
        ("prefix = \"/\"\nupstream = \"http://127.0.0.1:9/v1\\r\\nX-Evil: 1\"", "route[0].upstream"),
        ("prefix = \"/\"\nupstream = \"http://127.0.0.1:9/a b\"", "route[0].upstream"),
        ("prefix = \"/\"\nupstream = \"http://127.0.0.1:9/a\\tb\"", "route[0].upstream"),
        ("prefix = \"/a b\"\nupstream = \"http://127.0.0.1:9\"", "route[0].prefix"),
        ("prefix = \"/\"\nupstream = \"http://127.0.0.1:9\"\nname = \"a\\nb\"", "route[0].name"),
    ];
    for (route, key) in cases {
        let f = config_file(&format!("[[route]]\n{route}\n"));
        let (status, _, stderr) = run_tokentap(&["check-config", "--config", f.path().to_str().unwrap()]);
        assert!(!status.success(), "{key} should be refused");
        assert!(stderr.contains(&format!("`{key}`")), "{key}: {stderr}");
    }
}

#[test]
fn a_config_file_that_never_ends_is_refused() {
    let (status, _, stderr) =
        run_tokentap(&["check-config", "--upstream", "http://127.0.0.1:9", "--config", "/dev/zero"]);
    assert!(!status.success());
    assert!(stderr.contains("/dev/zero") && stderr.contains("larger than 1048576 bytes"), "{stderr}");
}
