//! Hostile clients: kept-alive connections that go silent or trickle their next head, and
//! browser-style WebSocket sessions with the key in a subprotocol.

use super::*;

/// Slow-header connections of the keep-alive fault.
pub(super) const ATTACKERS: usize = 1000;
/// `keepalive_idle_s` and `head_timeout_s` of the keep-alive fault.
pub(super) const SLOWLORIS_TIMEOUT_S: u64 = 2;
pub(super) const ATTACK_PATH: &str = "/v1/attack/chat/completions";

/// One slow client: a non-streaming request on a kept-alive connection, its whole answer read,
/// then silence (`trickle` false) or the next head a byte a second. Returns how long after its
/// answer tokentap closed the connection (`None`: still open after `limit`).
pub(super) async fn slow_client(addr: SocketAddr, trickle: bool, limit: Duration) -> Option<Duration> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let body = r#"{"model":"bench-model","stream":false,"messages":[]}"#;
    let request = format!(
        "POST {ATTACK_PATH} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.ok()?;
    // The answer has a content-length: read the head, then that many bytes.
    let mut raw = Vec::new();
    let mut tmp = vec![0u8; 16384];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let length: usize =
                head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok())?;
            if raw.len() >= end + 4 + length {
                break;
            }
        }
        match tokio::time::timeout(Duration::from_secs(30), stream.read(&mut tmp)).await {
            Ok(Ok(n)) if n > 0 => raw.extend_from_slice(&tmp[..n]),
            _ => return None,
        }
    }
    let answered = Instant::now();
    let next = b"POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n";
    let mut sent = 0;
    while answered.elapsed() < limit {
        let wait = if trickle && sent < next.len() { Duration::from_secs(1) } else { limit };
        match tokio::time::timeout(wait, stream.read(&mut tmp)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(answered.elapsed()),
            Ok(Ok(_)) => {}
            Err(_) => {
                if trickle && sent < next.len() {
                    if stream.write_all(&next[sent..sent + 1]).await.is_err() {
                        return Some(answered.elapsed());
                    }
                    sent += 1;
                }
            }
        }
    }
    None
}

/// A slow client's task: whether it trickled, and when it was closed.
type SlowClient = tokio::task::JoinHandle<(bool, Option<Duration>)>;

/// How the slow clients of a fault ended: the longest each kind stayed open, how many were still
/// open at the end, and how many could not even connect.
struct SlowClients {
    idle_max: Duration,
    trickle_max: Duration,
    open: u64,
    failed: u64,
}

impl SlowClients {
    async fn wait(handles: Vec<SlowClient>) -> Self {
        let mut out = SlowClients { idle_max: Duration::ZERO, trickle_max: Duration::ZERO, open: 0, failed: 0 };
        for handle in handles {
            match handle.await {
                Ok((trickle, Some(took))) => {
                    let max = if trickle { &mut out.trickle_max } else { &mut out.idle_max };
                    *max = (*max).max(took);
                }
                Ok((_, None)) => out.open += 1,
                Err(_) => out.failed += 1,
            }
        }
        out
    }
}

pub(super) async fn keepalive_slowloris(bin: &Path, upstream: SocketAddr, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let extra =
        format!("[connections]\nkeepalive_idle_s = {SLOWLORIS_TIMEOUT_S}\nhead_timeout_s = {SLOWLORIS_TIMEOUT_S}\n");
    let target = start(bin, dir.path(), &data, upstream, &extra, &[]);
    let addr = target.addr;
    let limit = plan.during + plan.after;
    let attackers: std::sync::Mutex<Vec<SlowClient>> = Default::default();
    let tally = phases(
        &target,
        plan,
        async {
            let mut handles = attackers.lock().expect("attackers");
            for k in 0..ATTACKERS {
                let trickle = k % 2 == 1;
                handles.push(tokio::spawn(async move { (trickle, slow_client(addr, trickle, limit).await) }));
            }
        },
        async {},
    )
    .await;
    let handles = std::mem::take(&mut *attackers.lock().expect("attackers"));
    let SlowClients { idle_max, trickle_max, open, failed } = SlowClients::wait(handles).await;
    let h = health(target.admin).await;
    let (records, unreadable) = journal_records(&data, LOAD_PATH);
    let mut out = row(Fault::KeepaliveSlowloris, &plan, tally);
    out.expected = proxied(tally);
    out.lost = out.expected.saturating_sub(records);
    out.counted = format!(
        "idle_closed {}, head_timeouts {}",
        count(&h, &["connections", "idle_closed"]),
        count(&h, &["connections", "head_timeouts"])
    );
    out.recovery = format!(
        "silent ones closed ≤ {:.2} s after their answer, trickling ones ≤ {:.2} s",
        idle_max.as_secs_f64(),
        trickle_max.as_secs_f64()
    );
    out.note = format!(
        "slow connections still open after {} s: {open} (not served: {failed}); connections open at the end: {}; unreadable lines: {unreadable}",
        limit.as_secs(),
        count(&h, &["connections", "open"])
    );
    out
}

/// `admin_head_timeout_s` of the admin fault (the cap stays at its default).
pub(super) const ADMIN_HEAD_TIMEOUT_S: u64 = 2;

/// One slow client of the admin listener: nothing at all (`trickle` false), or a head a byte a
/// second. Returns how long tokentap took to close it (`None`: still open after `limit`).
pub(super) async fn slow_admin_client(admin: SocketAddr, trickle: bool, limit: Duration) -> Option<Duration> {
    let mut stream = TcpStream::connect(admin).await.ok()?;
    let connected = Instant::now();
    let head = b"GET /_tokentap/api/health HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ";
    let mut sent = 0;
    let mut tmp = [0u8; 4096];
    while connected.elapsed() < limit {
        let wait = if trickle { Duration::from_secs(1) } else { limit };
        match tokio::time::timeout(wait, stream.read(&mut tmp)).await {
            // Closed, or refused with an answer and then closed.
            Ok(Ok(0)) | Ok(Err(_)) => return Some(connected.elapsed()),
            Ok(Ok(_)) => {}
            Err(_) => {
                if trickle {
                    if stream.write_all(&head[sent % head.len()..sent % head.len() + 1]).await.is_err() {
                        return Some(connected.elapsed());
                    }
                    sent += 1;
                }
            }
        }
    }
    None
}

pub(super) async fn admin_slowloris(bin: &Path, upstream: SocketAddr, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let top = format!("admin_head_timeout_s = {ADMIN_HEAD_TIMEOUT_S}\n");
    let target = start_with_top(bin, dir.path(), &data, upstream, &top, "", &[]);
    let admin = target.admin;
    let limit = plan.during + plan.after;
    let attackers: std::sync::Mutex<Vec<SlowClient>> = Default::default();
    let answered_again: std::sync::Mutex<Option<Duration>> = Default::default();
    let server_side: std::sync::Mutex<usize> = Default::default();
    let overflows_before = tcp_ext("ListenOverflows");
    let tally = phases(
        &target,
        plan,
        async {
            let spawned: Vec<SlowClient> = (0..ATTACKERS)
                .map(|k| {
                    let trickle = k % 2 == 1;
                    tokio::spawn(async move { (trickle, slow_admin_client(admin, trickle, limit).await) })
                })
                .collect();
            attackers.lock().expect("attackers").extend(spawned);
            // How long until the admin API answers a real client again.
            let injected = Instant::now();
            let answered = wait_health(admin, limit, |h| h.get("status").is_some()).await;
            *answered_again.lock().expect("answered") = answered.map(|_| injected.elapsed());
        },
        // Past the head deadline and while every slow client still holds its end: what tokentap's
        // side holds.
        async { *server_side.lock().expect("server side") = established_on_port(admin.port()) },
    )
    .await;
    let handles = std::mem::take(&mut *attackers.lock().expect("attackers"));
    let server_side = *server_side.lock().expect("server side");
    let overflows = tcp_ext("ListenOverflows").saturating_sub(overflows_before);
    let SlowClients { idle_max, trickle_max, open, failed } = SlowClients::wait(handles).await;
    let h = health(admin).await;
    let (records, unreadable) = journal_records(&data, LOAD_PATH);
    let mut out = row(Fault::AdminSlowloris, &plan, tally);
    out.expected = proxied(tally);
    out.lost = out.expected.saturating_sub(records);
    out.counted = format!(
        "admin refused_over_cap {}, admin open at the end {} (cap {})",
        count(&h, &["admin_connections", "refused_over_cap"]),
        count(&h, &["admin_connections", "open"]),
        count(&h, &["admin_connections", "max_open"])
    );
    let answered = *answered_again.lock().expect("answered");
    out.recovery = format!(
        "the admin API answered again {} after the attack began; silent ones closed ≤ {:.2} s, trickling ones ≤ {:.2} s",
        show(answered, limit),
        idle_max.as_secs_f64(),
        trickle_max.as_secs_f64()
    );
    out.note = format!(
        "slow admin connections the client still saw open after {} s: {open} (not connected: {failed}), \
established on tokentap's side {} s after the attack began: {server_side} (this host's listen-queue overflows during the run, \
`TcpExtListenOverflows`: {overflows}: connections the kernel never queued for accept, which tokentap never held); \
unreadable lines: {unreadable}",
        limit.as_secs(),
        plan.during.as_secs()
    );
    out
}

/// WebSocket sessions of the subprotocol fault, and the key they carry.
pub(super) const WS_SESSIONS: usize = 100;
pub(super) const SUBPROTOCOL_SECRET: &str = "sk-proj-BENCH-SUBPROTOCOL-SECRET-5f1e";

/// One browser-style WebSocket session through tokentap, the key among its subprotocols, read
/// until the upstream's end closes it. True when it was switched (a 101).
pub(super) async fn keyed_websocket(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr).await else { return false };
    let request = format!(
        "GET /v1/realtime?model=gpt-realtime HTTP/1.1\r\nhost: bench\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\
sec-websocket-protocol: realtime, openai-insecure-api-key.{SUBPROTOCOL_SECRET}, openai-beta.realtime-v1\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut raw = Vec::new();
    let mut tmp = vec![0u8; 16384];
    let _ = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match stream.read(&mut tmp).await {
                Ok(0) | Err(_) => break,
                Ok(n) => raw.extend_from_slice(&tmp[..n]),
            }
        }
    })
    .await;
    raw.starts_with(b"HTTP/1.1 101")
}

pub(super) async fn subprotocol_key(bin: &Path, upstream: SocketAddr, plan: Plan) -> FaultRow {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let target = start(bin, dir.path(), &data, upstream, "", &[("TOKENTAP_LOG", "trace")]);
    let addr = target.addr;
    let sessions: std::sync::Mutex<Vec<tokio::task::JoinHandle<bool>>> = Default::default();
    let tally = phases(
        &target,
        plan,
        async {
            let mut handles = sessions.lock().expect("sessions");
            for _ in 0..WS_SESSIONS {
                handles.push(tokio::spawn(keyed_websocket(addr)));
            }
        },
        async {},
    )
    .await;
    let mut switched = 0;
    let handles = std::mem::take(&mut *sessions.lock().expect("sessions"));
    for handle in handles {
        switched += u64::from(handle.await.unwrap_or(false));
    }
    settle(target.admin).await;
    let listing = tokio::task::spawn_blocking({
        let admin = target.admin;
        move || {
            String::from_utf8_lossy(&http1::get(admin, "/_tokentap/api/requests?limit=10000", &[]).body).into_owned()
        }
    })
    .await
    .unwrap_or_default();
    let mut on_disk = 0;
    for entry in std::fs::read_dir(&data).into_iter().flatten().flatten() {
        let text = std::fs::read(entry.path()).unwrap_or_default();
        on_disk += text.windows(SUBPROTOCOL_SECRET.len()).filter(|w| *w == SUBPROTOCOL_SECRET.as_bytes()).count();
    }
    let logs = format!("{}{}", target.proc.stdout(), target.proc.stderr());
    let (sessions_recorded, unreadable) = journal_records(&data, "/v1/realtime?model=gpt-realtime");
    let (records, _) = journal_records(&data, LOAD_PATH);
    let mut out = row(Fault::SubprotocolKey, &plan, tally);
    out.expected = proxied(tally) + switched;
    out.lost = out.expected.saturating_sub(records + sessions_recorded);
    out.counted = format!(
        "key found: data dir {on_disk}, admin API {} (of {} bytes), logs {} (of {} bytes at trace)",
        listing.matches(SUBPROTOCOL_SECRET).count(),
        listing.len(),
        logs.matches(SUBPROTOCOL_SECRET).count(),
        logs.len()
    );
    out.recovery = "n/a".into();
    out.note = format!(
        "sessions switched (101): {switched} of {WS_SESSIONS}, recorded: {sessions_recorded}; recorded as `openai-insecure-api-key.[redacted]`: {}; unreadable lines: {unreadable}",
        listing.contains("openai-insecure-api-key.[redacted]")
    );
    out
}

/// TCP connections in state ESTABLISHED whose local port is `port` (this host's IPv4 and IPv6
/// sockets, from `/proc/net/tcp*`): what the listening side holds, whatever its clients believe.
fn established_on_port(port: u16) -> usize {
    const ESTABLISHED: &str = "01";
    let is_ours = |line: &&str| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let local_port = fields.get(1).and_then(|a| a.rsplit(':').next()).and_then(|p| u16::from_str_radix(p, 16).ok());
        local_port == Some(port) && fields.get(3) == Some(&ESTABLISHED)
    };
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .map(|text| text.lines().skip(1).filter(is_ours).count())
        .sum()
}

/// A `TcpExt` counter of this host (`/proc/net/netstat`), 0 when unreadable.
fn tcp_ext(name: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/net/netstat").unwrap_or_default();
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else { return 0 };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}
