//! A real nginx (the Debian package, installed by `scripts/setup.sh test`) in front of tokentap,
//! on a free port, with its own prefix folder and config. It runs in the foreground as one
//! process (`daemon off; master_process off;`), so dropping [`Nginx`] ends it.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::process::Proc;

/// The nginx executable: `$TOKENTAP_NGINX`, else `nginx` on the PATH, else Debian's /usr/sbin/nginx.
pub fn nginx_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("TOKENTAP_NGINX") {
        return PathBuf::from(path);
    }
    let on_path = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|dir| dir.join("nginx")).find(|p| p.exists()));
    on_path.unwrap_or_else(|| PathBuf::from("/usr/sbin/nginx"))
}

/// A running nginx that proxies every path to one upstream.
pub struct Nginx {
    pub proc: Proc,
    pub addr: SocketAddr,
    pub prefix: tempfile::TempDir,
}

impl Nginx {
    /// Starts nginx with `location / { proxy_pass http://upstream; … location_directives }`,
    /// otherwise nginx's defaults (HTTP/1.0 to the upstream, `proxy_buffering on`, 4 KiB
    /// buffers). The Host header is passed through (`$http_host`), so tokentap sees the origin
    /// the page was loaded from, as with a same-origin deployment.
    pub fn start(upstream: SocketAddr, location_directives: &str) -> Nginx {
        Self::start_with(|prefix, port| config_text(prefix, port, upstream, location_directives))
    }

    /// Starts nginx from a whole config template (`@PREFIX@`, `@PORT@` and `@SERVERS@` filled in:
    /// one `server ADDR;` line per upstream), as the examples ship them.
    pub fn start_from_template(template: &Path, upstreams: &[SocketAddr]) -> Nginx {
        let text = std::fs::read_to_string(template).unwrap_or_else(|e| panic!("{}: {e}", template.display()));
        let servers: String = upstreams.iter().map(|a| format!("server {a}; ")).collect();
        Self::start_with(|prefix, port| {
            text.replace("@PREFIX@", &prefix.display().to_string())
                .replace("@PORT@", &port.to_string())
                .replace("@SERVERS@", &servers)
        })
    }

    /// Starts nginx with the config `render` writes for a prefix folder and a free port.
    fn start_with(render: impl Fn(&Path, u16) -> String) -> Nginx {
        let bin = nginx_bin();
        assert!(bin.exists(), "{} not found: run scripts/setup.sh test (it installs nginx)", bin.display());
        // Another process can take the port between the probe bind and nginx's; try again then.
        for _ in 0..5 {
            let prefix = tempfile::tempdir().expect("tempdir");
            let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
            let config = prefix.path().join("nginx.conf");
            std::fs::write(&config, render(prefix.path(), port)).expect("write nginx.conf");
            let mut cmd = Command::new(&bin);
            cmd.arg("-p").arg(prefix.path()).arg("-c").arg(&config).arg("-e").arg("stderr");
            let mut proc = Proc::spawn(cmd);
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            if let Err(error) = wait_for_start(&mut proc, addr) {
                if error.contains("Address already in use") {
                    continue;
                }
                panic!("nginx did not start: {error}");
            }
            return Nginx { proc, addr, prefix };
        }
        panic!("nginx could not bind a free port in five tries");
    }

    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Accepting connections, or the reason nginx exited.
fn wait_for_start(proc: &mut Proc, addr: SocketAddr) -> Result<(), String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        if let Some(status) = proc.try_wait() {
            return Err(format!("exit {status}: {}", proc.stderr()));
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("not accepting after 30 s: {}", proc.stderr()));
        }
        // Polling readiness: nginx prints nothing when it is up.
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn config_text(prefix: &Path, port: u16, upstream: SocketAddr, location_directives: &str) -> String {
    let p = prefix.display();
    format!(
        r#"daemon off;
master_process off;
worker_processes 1;
pid {p}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {p}/client_body;
    proxy_temp_path {p}/proxy;
    fastcgi_temp_path {p}/fastcgi;
    uwsgi_temp_path {p}/uwsgi;
    scgi_temp_path {p}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://{upstream};
            proxy_set_header Host $http_host;
            {location_directives}
        }}
    }}
}}
"#
    )
}
