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
