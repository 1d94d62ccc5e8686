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
