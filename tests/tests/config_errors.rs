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
