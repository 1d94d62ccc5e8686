//! The journal (`records.jsonl`) when it is not what tokentap wrote: a line that is not UTF-8
//! loses only itself (at restore and in `tokentap report`), and a link or a FIFO put in its place
//! is refused, not followed or waited on, while health says recording is degraded. Traffic is
//! served throughout.

use tokentap_e2e::{http1, Mock, Tokentap};

fn chat(tokentap: &Tokentap) {
    let resp = http1::post(
        tokentap.addr,
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_eq!(resp.status, 200);
    assert!(resp.complete, "the client's stream is whole");
}

fn health(tokentap: &Tokentap) -> serde_json::Value {
    let (status, health) = tokentap.admin_get("/_tokentap/api/health");
    assert_eq!(status, 200);
    health
}

/// Sends requests (each one recorded before the next) until health says recording is degraded:
/// the journal notices a replaced file at its next check (once a second), at a write.
fn chat_until_degraded(tokentap: &Tokentap, feed: &mut tokentap_e2e::RecordFeed) -> serde_json::Value {
    for _ in 0..10_000 {
        chat(tokentap);
        feed.next_record();
        let h = health(tokentap);
        if h["status"] == "degraded" {
            return h;
        }
    }
    panic!("health never said degraded: {}", health(tokentap));
}

/// Polls health (each poll a round trip to the admin API) until `done` holds.
fn wait_health(tokentap: &Tokentap, what: &str, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    for _ in 0..5_000 {
        let h = health(tokentap);
        if done(&h) {
            return h;
        }
    }
    panic!("health never showed {what}: {}", health(tokentap));
}

#[test]
fn a_line_that_is_not_utf8_loses_only_itself_at_restore_and_in_the_report() {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let first = Tokentap::start(&mock.url, &[]);
    let mut feed = first.feed();
    for _ in 0..10 {
        chat(&first);
        feed.next_record();
    }
    wait_health(&first, "10 records written", |h| h["records"]["written"] == 10);
    let Tokentap { proc, data_dir, .. } = first;
    drop(proc);

    // One byte of the fourth line replaced by one that is never UTF-8.
    let path = data_dir.path().join("records.jsonl");
    let mut bytes = std::fs::read(&path).unwrap();
    let fourth = bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(2).unwrap().0 + 1;
    let at = fourth + bytes[fourth..].windows(7).position(|w| w == b"\"path\":").unwrap() + 9;
    bytes[at] = 0xff;
    std::fs::write(&path, bytes).unwrap();

    let dir = data_dir.path().to_str().unwrap().to_string();
    let (status, out, err) = tokentap_e2e::process::run_tokentap(&["report", "--json", "--data-dir", &dir]);
    assert!(status.success(), "report failed: {err}");
    assert!(err.contains("1 unreadable lines skipped"), "stderr: {err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["records_total"], 9, "{report}");

    let second = Tokentap::start_in(data_dir, &["--upstream", &mock.url], &[]);
    let (status, list) = second.admin_get("/_tokentap/api/requests?limit=100");
    assert_eq!(status, 200);
    let listed = list["records"].as_array().expect("a list of records");
    assert_eq!(listed.len(), 9, "{list}");
    let h = health(&second);
    assert_eq!(h["records"]["restore_skipped_lines"], 1, "{h}");
    assert_eq!(h["status"], "ok", "{h}");
}

#[test]
fn a_link_in_the_journals_place_is_not_followed() {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    chat(&tokentap);
    feed.next_record();
    let elsewhere = tempfile::NamedTempFile::new().unwrap();
    let path = tokentap.records_file();
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), &path).unwrap();

    // Served, recorded in memory (the feed), refused on disk, and health says so.
    let h = chat_until_degraded(&tokentap, &mut feed);
    assert!(h["problem"].as_str().unwrap().contains("symbolic link"), "{h}");
    assert!(h["records"]["store_errors"].as_u64().unwrap() >= 1, "{h}");
    assert_eq!(std::fs::read(elsewhere.path()).unwrap(), b"", "the link was followed");

    // A regular file again: the next record is written there and health is ok.
    std::fs::remove_file(&path).unwrap();
    chat(&tokentap);
    feed.next_record();
    wait_health(&tokentap, "ok again", |h| h["status"] == "ok");
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
}

#[test]
fn a_fifo_in_the_journals_place_does_not_stop_recording() {
    let mock = Mock::start(&["--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    let mut feed = tokentap.feed();
    chat(&tokentap);
    feed.next_record();
    let path = tokentap.records_file();
    std::fs::remove_file(&path).unwrap();
    let status = std::process::Command::new("mkfifo").arg(&path).status().expect("run mkfifo");
    assert!(status.success());

    // Without O_NONBLOCK the worker would block in open(), waiting for a reader: no further
    // record would reach the feed, and health would go on saying ok.
    let h = chat_until_degraded(&tokentap, &mut feed);
    assert!(h["problem"].as_str().unwrap().contains("FIFO"), "{h}");
    let written = h["records"]["written"].as_u64().unwrap();
    // Still degraded at the next record: every write tries the path again and fails.
    chat(&tokentap);
    feed.next_record();
    assert_eq!(health(&tokentap)["status"], "degraded");

    std::fs::remove_file(&path).unwrap();
    chat(&tokentap);
    feed.next_record();
    let h = wait_health(&tokentap, "ok again", |h| h["status"] == "ok");
    assert_eq!(h["records"]["written"].as_u64().unwrap(), written + 1, "{h}");
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
}
