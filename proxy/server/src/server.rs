//! Starting tokentap: record store, finalize worker, admin API, then pingora's proxy service.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pingora::connectors::{ConnectorOptions, TransportConnector};
use pingora::listeners::{L4BufferSettings, ListenerConfig, TcpSocketOptions};
use pingora::proxy::http_proxy;
use pingora::server::configuration::ServerConf;
use pingora::server::{ExecutionPhase, RunArgs, Server, ShutdownSignal, ShutdownSignalWatch};
use pingora::services::listening::Service;
use socket2::{Domain, Protocol, Socket, Type};

use crate::admin::{self, AdminState};
use crate::admission::{Admitted, ConnectionLimits};
use crate::config::ValidConfig;
use crate::forward::client_connection::ClientConnections;
use crate::forward::exchange::Exchanges;
use crate::forward::{PingoraHooks, TapProxy};
use crate::pages::Pages;
use crate::pipeline::{self, PipelineStats, RecordObserver};
use crate::scheduling_lag::LagProbe;
use crate::store::{RecordStore, StoreError};
use tokentap_telemetry::{ExportError, Telemetry};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot listen on {addr} (`{key}`): {source}")]
    Bind { key: &'static str, addr: SocketAddr, source: std::io::Error },
    #[error("cannot listen on {addr} (`listen`): the address is already in use by {holder}; stop it, or choose another address with --listen")]
    Held { addr: SocketAddr, holder: Holder },
    #[error("cannot start a worker thread: {0}")]
    Thread(std::io::Error),
    #[error("cannot start OpenTelemetry export: {0}")]
    Export(#[from] ExportError),
}

/// What the caller adds to a plain `serve`.
#[derive(Default)]
pub struct RunOptions {
    pub pages: Pages,
    pub observer: Option<RecordObserver>,
}

/// Addresses actually bound (a configured port 0 becomes a real port).
#[derive(Debug, Clone, Copy)]
pub struct BoundAddrs {
    pub listen: SocketAddr,
    pub admin: Option<SocketAddr>,
}

/// Binds the listeners and starts everything off the forwarding path; returns the pingora server
/// ready to run and the bound addresses. Fails early, with the address named, when a port is taken.
pub fn prepare(config: ValidConfig, mut options: RunOptions) -> Result<Prepared, ServeError> {
    let admin_listener = match config.admin_listen {
        Some(addr) => {
            Some(TcpListener::bind(addr).map_err(|source| ServeError::Bind { key: "admin_listen", addr, source })?)
        }
        None => None,
    };
    let admin_addr = admin_listener.as_ref().and_then(|l| l.local_addr().ok());
    // pingora binds the proxy listener itself when it starts. Reserve the address first: a taken
    // port is a clear error now (also when another tokentap holds it), port 0 becomes a free
    // port, and no other process can take that port before pingora binds it (the reservation is
    // bound with SO_REUSEPORT, as pingora's listener will be, and never listens, so it receives
    // no connections).
    let reservation = reserve(config.listen)?;
    let listen = reservation.local_addr().ok().and_then(|a| a.as_socket()).ok_or_else(|| ServeError::Bind {
        key: "listen",
        addr: config.listen,
        source: std::io::ErrorKind::AddrNotAvailable.into(),
    })?;

    let mut config = config;
    config.listen = listen;
    options.pages.demo_enabled |= config.demo_page;
    options.pages.probe_enabled = config.probe.enabled;
    if options.pages.demo_enabled {
        options.pages.demo_admin_url = admin_addr.map(|a| format!("http://{a}"));
    }
    let config = Arc::new(config);

    let store = Arc::new(RecordStore::open(&config.data_dir, config.store.clone())?);
    crate::admission::raise_open_file_limit();
    let (limits, lowered) = ConnectionLimits::fitted(&config.connections);
    if let Some(configured) = lowered {
        tracing::warn!(
            configured,
            max_open = limits.max_open,
            "[connections] max_open lowered to fit the open file limit (each client connection also needs an upstream one); raise `ulimit -n` for more"
        );
    }
    let stats = Arc::new(PipelineStats {
        kept: crate::timeline::KeptBudget::new(config.timeline.max_kept_bytes),
        ..PipelineStats::default()
    });
    // Metrics for /metrics, and OTLP export when configured (its own thread; never on the
    // forwarding path).
    let telemetry = Telemetry::start(
        &config.metrics,
        &config.slo,
        config.otel.clone(),
        config.privacy.capture_content,
        stats.clone(),
    )?;
    let (queue, _worker) =
        pipeline::start(config.clone(), store.clone(), stats.clone(), options.observer.take(), telemetry.clone())
            .map_err(ServeError::Thread)?;

    if let Some(listener) = admin_listener {
        let state = Arc::new(AdminState {
            store: store.clone(),
            stats: stats.clone(),
            telemetry: telemetry.clone(),
            allowed_origins: proxy_origins(listen),
            slo: config.slo.clone(),
            warmup_requests: config.analysis.warmup_requests,
            access: config.admin.clone(),
            feed_max_subscribers: config.admin_max_feed_subscribers,
            feed_subscribers: Default::default(),
            feed_events: Default::default(),
            limits: admin::AdminLimits {
                max_connections: config.admin_max_connections,
                head_timeout: std::time::Duration::from_secs(config.admin_head_timeout_s),
            },
            connections: Default::default(),
        });
        std::thread::Builder::new()
            .name("tokentap-admin".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(error = %e, "admin API runtime failed to start");
                        return;
                    }
                };
                if let Err(e) = runtime.block_on(admin::serve(listener, state)) {
                    tracing::error!(error = %e, "admin API stopped");
                }
            })
            .map_err(ServeError::Thread)?;
    }

    let server_conf = ServerConf {
        threads: config.threads,
        work_stealing: config.work_stealing,
        // SIGTERM: pingora stops accepting and waits this long before it stops its runtimes; the
        // drain thread (`run`) exits sooner once every open request is recorded.
        grace_period_seconds: Some(config.shutdown.grace_period_s),
        graceful_shutdown_timeout_seconds: Some(2),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, server_conf);
    server.bootstrap();
    let conf = server.configuration.clone();
    let finalize = queue.clone();
    let lag_probe = {
        let telemetry = telemetry.clone();
        LagProbe::new(stats.scheduling_lag.clone(), Arc::new(move |lag| telemetry.observe_scheduling_lag(lag)))
    };
    let exchanges = Exchanges::new(
        TransportConnector::new(Some(ConnectorOptions::from_server_conf(&conf))),
        conf.upstream_keepalive_pool_size,
        stats.upstream_pool.clone(),
    );
    let tap = Arc::new(TapProxy::new(config.clone(), queue, Arc::new(options.pages), lag_probe, exchanges));
    let proxy = http_proxy(&conf, PingoraHooks(tap.clone()));
    let connections = ClientConnections::new(tap, proxy, stats.connections.clone());
    let mut service =
        Service::new("tokentap proxy".to_string(), Admitted::new(connections, limits, stats.connections.clone()));
    let mut socket_options = TcpSocketOptions::default();
    socket_options.so_reuseport = Some(true);
    // The client side's read buffer is sized here (pingora's default is 64 KiB per connection);
    // the write side keeps pingora's default.
    let buffers = L4BufferSettings::default().read(config.connections.read_buffer_bytes);
    service.add_listener(ListenerConfig::tcp(listen.to_string()).tcp_socket_options(socket_options).l4_buffer(buffers));
    server.add_service(service);
    let grace_period = Duration::from_secs(config.shutdown.grace_period_s);
    Ok(Prepared {
        server,
        bound: BoundAddrs { listen, admin: admin_addr },
        reservation,
        stats,
        telemetry,
        finalize,
        grace_period,
    })
}

/// A server ready to run, with its addresses.
pub struct Prepared {
    pub server: Server,
    pub bound: BoundAddrs,
    /// Holds the proxy's port until pingora has bound it.
    reservation: Socket,
    stats: Arc<PipelineStats>,
    telemetry: Arc<Telemetry>,
    finalize: pipeline::FinalizeQueue,
    grace_period: Duration,
}

/// Who holds a proxy address that tokentap cannot take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// A running tokentap answers on it.
    Tokentap,
    /// Some other program.
    OtherProgram,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Holder::Tokentap => "another tokentap",
            Holder::OtherProgram => "another program",
        })
    }
}

/// Binds `addr` with SO_REUSEPORT without listening, after checking that nobody holds it.
///
/// SO_REUSEPORT alone would let a second tokentap of the same user bind a port the first one
/// listens on, and the kernel would then split new connections between the two. A plain bind
/// (SO_REUSEADDR only, so a restart is not refused over connections in TIME_WAIT) fails when any
/// socket is bound there; it is closed again before the reservation takes the address it got.
fn reserve(addr: SocketAddr) -> Result<Socket, ServeError> {
    let bind_error = |source| ServeError::Bind { key: "listen", addr, source };
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(bind_error)?;
    probe.set_reuse_address(true).map_err(bind_error)?;
    if let Err(source) = probe.bind(&addr.into()) {
        if source.kind() == std::io::ErrorKind::AddrInUse {
            return Err(ServeError::Held { addr, holder: holder_of(addr) });
        }
        return Err(bind_error(source));
    }
    // Port 0 became a free port: the reservation takes that one.
    let free = probe.local_addr().ok().and_then(|a| a.as_socket()).unwrap_or(addr);
    drop(probe);
    let socket = Socket::new(Domain::for_address(free), Type::STREAM, Some(Protocol::TCP)).map_err(bind_error)?;
    socket.set_reuse_port(true).map_err(bind_error)?;
    socket.bind(&free.into()).map_err(|source| {
        if source.kind() == std::io::ErrorKind::AddrInUse {
            ServeError::Held { addr, holder: holder_of(free) }
        } else {
            bind_error(source)
        }
    })?;
    Ok(socket)
}

/// Asks whatever listens on `addr` for a tokentap page: a tokentap answers with its own 404
/// (`tokentap_not_found`), which it does not record. Bounded to about a second.
fn holder_of(addr: SocketAddr) -> Holder {
    use std::io::{Read, Write};
    let target = loopback_if_unspecified(addr);
    let answer = (|| -> std::io::Result<Vec<u8>> {
        let mut stream = TcpStream::connect_timeout(&target, Duration::from_millis(500))?;
        stream.set_read_timeout(Some(Duration::from_millis(500)))?;
        stream.set_write_timeout(Some(Duration::from_millis(500)))?;
        stream
            .write_all(format!("GET /_tokentap/ HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n").as_bytes())?;
        let mut answer = Vec::new();
        let _ = stream.take(4096).read_to_end(&mut answer);
        Ok(answer)
    })();
    match answer {
        Ok(bytes) if String::from_utf8_lossy(&bytes).contains("tokentap_not_found") => Holder::Tokentap,
        _ => Holder::OtherProgram,
    }
}

/// `addr`, with an unspecified IP (0.0.0.0, ::) replaced by loopback: where to connect to it.
fn loopback_if_unspecified(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(a) if a.ip().is_unspecified() => SocketAddr::from(([127, 0, 0, 1], a.port())),
        SocketAddr::V6(a) if a.ip().is_unspecified() => SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, a.port())),
        other => other,
    }
}

/// The signal that stops tokentap. SIGTERM and SIGINT (Ctrl-C) both drain; a second one of either
/// exits at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopSignal {
    Term,
    Int,
}

impl StopSignal {
    fn name(self) -> &'static str {
        match self {
            StopSignal::Term => "SIGTERM",
            StopSignal::Int => "SIGINT",
        }
    }
}

/// pingora's signal watch, except that SIGINT drains as SIGTERM does (pingora's own makes SIGINT
/// a fast shutdown that cuts streams in flight and loses their records). SIGQUIT keeps pingora's
/// meaning (graceful upgrade). The signal received is kept for the drain's log line.
struct DrainingSignalWatch {
    received: Arc<std::sync::OnceLock<StopSignal>>,
}

#[async_trait::async_trait]
impl ShutdownSignalWatch for DrainingSignalWatch {
    async fn recv(&self) -> ShutdownSignal {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut quit), Ok(mut term), Ok(mut int)) =
            (signal(SignalKind::quit()), signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
        else {
            tracing::error!("cannot watch for signals; stopping");
            return ShutdownSignal::FastShutdown;
        };
        let stop = tokio::select! {
            _ = quit.recv() => return ShutdownSignal::GracefulUpgrade,
            _ = term.recv() => StopSignal::Term,
            _ = int.recv() => StopSignal::Int,
        };
        let _ = self.received.set(stop);
        ShutdownSignal::GracefulTerminate
    }
}

/// Runs until SIGINT/SIGTERM. `on_listening` is called once pingora accepts connections on the
/// proxy address (that is when the address may be announced).
pub fn run(prepared: Prepared, on_listening: impl FnOnce(BoundAddrs) + Send + 'static) {
    let Prepared { server, bound, reservation, stats, telemetry, finalize, grace_period } = prepared;
    let phases = server.watch_execution_phase();
    let received = Arc::new(std::sync::OnceLock::new());
    let signal = received.clone();
    let drain_stats = stats.clone();
    let drain = std::thread::Builder::new()
        .name("tokentap-drain".into())
        .spawn(move || drain_on_terminate(phases, signal, grace_period, drain_stats, telemetry, finalize));
    if let Err(e) = drain {
        tracing::error!(error = %e, "cannot start the drain thread; SIGTERM waits the whole grace period");
    }
    let spawned = std::thread::Builder::new().name("tokentap-announce".into()).spawn(move || {
        let target = loopback_if_unspecified(bound.listen);
        // The reservation never listens, so the first connection that succeeds reached pingora.
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect_timeout(&target, Duration::from_millis(200)).is_err() {
            if Instant::now() >= deadline {
                tracing::error!(addr = %bound.listen, "the proxy listener did not come up");
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(reservation);
        on_listening(bound);
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the announcement thread");
    }
    server.run(RunArgs { shutdown_signal: Box::new(DrainingSignalWatch { received }) });
    // pingora returns once its runtimes are shut down: at the end of a SIGTERM's grace period,
    // the tasks of streams still open were dropped and their records (`shutdown`) submitted. The
    // drain thread exits the process once they are written; wait for it (bounded).
    if stats.shutting_down.load(std::sync::atomic::Ordering::Acquire) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        tracing::warn!("the drain did not finish after the grace period; exiting");
    }
}

/// After SIGTERM or SIGINT (pingora has stopped accepting), waits until every open request is
/// recorded, then exits; pingora's grace period bounds the wait. A second SIGTERM or SIGINT exits
/// at once.
fn drain_on_terminate(
    mut phases: tokio::sync::broadcast::Receiver<ExecutionPhase>,
    received: Arc<std::sync::OnceLock<StopSignal>>,
    grace_period: Duration,
    stats: Arc<PipelineStats>,
    telemetry: Arc<Telemetry>,
    finalize: pipeline::FinalizeQueue,
) {
    loop {
        match phases.blocking_recv() {
            Ok(ExecutionPhase::GracefulTerminate) => break,
            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "drain runtime failed to start");
            return;
        }
    };
    stats.shutting_down.store(true, std::sync::atomic::Ordering::Release);
    let signalled = std::time::Instant::now();
    let open = || stats.open_requests.load(std::sync::atomic::Ordering::Relaxed);
    // Listening for the second signal starts before the line that invites it.
    let second = {
        use tokio::signal::unix::{signal, SignalKind};
        let _entered = runtime.enter();
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    };
    let signal = received.get().copied().unwrap_or(StopSignal::Term);
    tracing::info!(
        "{}: draining {} request(s) in flight for up to {}s (no new connections are accepted); press Ctrl-C again to exit now",
        signal.name(),
        open(),
        grace_period.as_secs()
    );
    runtime.block_on(async {
        let (Ok(mut term), Ok(mut int)) = second else {
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => exit_now(open()),
                _ = int.recv() => exit_now(open()),
                _ = tokio::time::sleep(DRAIN_POLL) => {}
            }
            // Connections whose request head was partly received at the signal are still being
            // waited for (`Admitted::cleanup`) until `released_at_shutdown`.
            let released = stats.connections.released_at_shutdown.load(std::sync::atomic::Ordering::Acquire)
                || signalled.elapsed() > crate::admission::SHUTDOWN_HEAD_WAIT + Duration::from_secs(1);
            if open() == 0 && released {
                break;
            }
        }
    });
    // Turns still open (waiting for tool results) are written as `shutdown`, before the flush
    // exports their spans.
    finalize.close_turns(Duration::from_secs(2));
    telemetry.flush(Duration::from_secs(5));
    tracing::info!("drained: every request is recorded; exiting");
    std::process::exit(0);
}

/// A second signal during the drain: exits without waiting for the requests still in flight.
fn exit_now(open: u64) -> ! {
    tracing::warn!("second signal: exiting now; {open} requests still in flight are cut and not recorded");
    std::process::exit(1)
}

/// How often the drain checks whether every open request is recorded.
const DRAIN_POLL: Duration = Duration::from_millis(10);

/// Origins under which pages served by this proxy run (for CORS on the admin API).
fn proxy_origins(listen: SocketAddr) -> Vec<String> {
    let port = listen.port();
    let mut origins = vec![format!("http://{listen}")];
    if listen.ip().is_loopback() || listen.ip().is_unspecified() {
        origins.push(format!("http://localhost:{port}"));
        origins.push(format!("http://127.0.0.1:{port}"));
    }
    origins
}
