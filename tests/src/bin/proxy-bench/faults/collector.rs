//! The collector faults: refusing connections for a while, or accepting and never answering.

use super::*;

pub(super) async fn collector(bin: &Path, upstream: SocketAddr, fault: Fault, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let reserved = ReservedReceiver::reserve();
    // A listener nobody accepts on: the kernel completes the handshakes, nothing answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = match fault {
        Fault::CollectorDown => reserved.http_endpoint(),
        _ => format!("http://{}", silent.local_addr().expect("address")),
    };
    let otel = format!(
        "[otel]\nendpoint = \"{endpoint}\"\nprotocol = \"http/protobuf\"\nbatch_delay_ms = 200\nmetrics_interval_ms = 1000\n\
timeout_ms = 2000\nretry_initial_ms = 100\nretry_max_ms = 1000\n"
    );
    let target = start(bin, dir.path(), &dir.path().join("data"), upstream, &otel, &[]);
    let rss_before = crate::machine::status_kib(target.proc.pid(), "VmRSS:");
    let receiver: std::sync::Mutex<Option<tokentap_e2e::OtlpReceiver>> = std::sync::Mutex::new(None);
    let started_at: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);
    let mut reserved = Some(reserved);
    let tally = phases(&target, plan, async {}, async {
        if fault == Fault::CollectorDown {
            if let Some(reserved) = reserved.take() {
                *receiver.lock().expect("receiver") = Some(reserved.start());
                *started_at.lock().expect("start time") = Some(Instant::now());
            }
        }
    })
    .await;
    let rss_after = crate::machine::status_kib(target.proc.pid(), "VmRSS:");
    let mut out = row(fault, &plan, tally);
    let (records, _) = journal_records(&target.data, LOAD_PATH);
    let receiver = receiver.into_inner().expect("receiver");
    match (fault, receiver) {
        (Fault::CollectorDown, Some(receiver)) => {
            // Every recorded request's trace at the collector (the spool replayed).
            let traces = |r: &tokentap_e2e::otlp_receiver::Received| {
                let mut ids: Vec<Vec<u8>> = r.spans().iter().map(|s| s.trace_id.clone()).collect();
                ids.sort();
                ids.dedup();
                ids.len() as u64
            };
            let begin = started_at.into_inner().expect("start time").unwrap_or_else(Instant::now);
            let deadline = Instant::now() + Duration::from_secs(60);
            while traces(&receiver.received()) < records && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let arrived = traces(&receiver.received());
            let h = health(target.admin).await;
            out.expected = records;
            out.lost = records.saturating_sub(arrived);
            out.counted = format!(
                "spans dropped: {} (queue full), {} (spool full), {} (rejected)",
                count(&h, &["telemetry", "otlp", "spans", "dropped", "queue_full"]),
                count(&h, &["telemetry", "otlp", "spans", "dropped", "spool_full"]),
                count(&h, &["telemetry", "otlp", "spans", "dropped", "rejected"]),
            );
            out.recovery = if arrived >= records {
                format!("{:.2} s (collector up → every request's trace delivered)", begin.elapsed().as_secs_f64())
            } else {
                "not within 60 s".into()
            };
            out.note = format!("records on disk: {records} of {}", proxied(tally));
        }
        _ => {
            let h = health(target.admin).await;
            let spooled = count(&h, &["telemetry", "otlp", "spans", "spooled"]);
            let exported = count(&h, &["telemetry", "otlp", "spans", "exported"]);
            out.expected = records;
            out.lost = 0;
            out.counted = format!(
                "spans spooled {spooled}, exported {exported}, dropped {} (queue full) / {} (spool full)",
                count(&h, &["telemetry", "otlp", "spans", "dropped", "queue_full"]),
                count(&h, &["telemetry", "otlp", "spans", "dropped", "spool_full"]),
            );
            out.recovery = "n/a (never answers)".into();
            out.note = format!(
                "records on disk: {records} of {}; RSS {:.1} → {:.1} MiB over the run",
                proxied(tally),
                rss_before as f64 / 1024.0,
                rss_after as f64 / 1024.0
            );
        }
    }
    drop(silent);
    out
}
