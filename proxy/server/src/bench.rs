//! `tokentap bench`'s embedded tokentap: a tokentap on a free loopback port in front of the
//! bench's target, so that every request of the run also gets its full record. The load driver,
//! the statistics and the report are in `tokentap-bench`; this module only starts the proxy.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{self, ConfigError, FileConfig, Overrides};
use crate::server::{self, RunOptions, ServeError};

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("cannot start the embedded tokentap's thread: {0}")]
    Thread(std::io::Error),
    #[error("the embedded tokentap did not come up within 60 s")]
    NotListening,
}

/// A running embedded tokentap. It lives until the process exits.
#[derive(Debug, Clone)]
pub struct Embedded {
    pub listen: std::net::SocketAddr,
    pub data_dir: PathBuf,
    /// Lines the record store held before the run (an earlier run's records).
    lines_before: usize,
}

/// Starts tokentap on 127.0.0.1 (a free port, no admin API) in front of `upstream` (an origin:
/// `scheme://host:port`, the request paths are forwarded whole), with `provider` as the route's
/// hint and its records in `data_dir`. Returns once it accepts connections.
pub fn start(upstream: &str, provider: &str, data_dir: &Path) -> Result<Embedded, EmbeddedError> {
    let overrides = Overrides {
        listen: Some("127.0.0.1:0".into()),
        admin_listen: Some("off".into()),
        upstream: Some(upstream.to_string()),
        provider: Some(provider.parse().map_err(|e: tokentap_analysis::names::UnknownName| ConfigError::Invalid {
            key: "provider".into(),
            reason: e.to_string(),
        })?),
        data_dir: Some(data_dir.to_path_buf()),
        ..Overrides::default()
    };
    let config = config::validate(FileConfig::default(), &overrides)?;
    let lines_before = record_lines(data_dir);
    let prepared = server::prepare(config, RunOptions::default())?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("tokentap-embedded".into())
        .spawn(move || {
            server::run(prepared, move |bound| {
                let _ = tx.send(bound.listen);
            })
        })
        .map_err(EmbeddedError::Thread)?;
    let listen = rx.recv_timeout(Duration::from_secs(60)).map_err(|_| EmbeddedError::NotListening)?;
    Ok(Embedded { listen, data_dir: data_dir.to_path_buf(), lines_before })
}

impl Embedded {
    /// Waits (up to `timeout`) until the record store holds `records` new lines, so that the
    /// process can exit without losing the last requests' records. Returns how many it holds.
    pub fn wait_for_records(&self, records: usize, timeout: Duration) -> usize {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let lines = record_lines(&self.data_dir).saturating_sub(self.lines_before);
            if lines >= records || std::time::Instant::now() >= deadline {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn record_lines(data_dir: &Path) -> usize {
    let path = data_dir.join(tokentap_record::RECORDS_FILE);
    std::fs::read(path).map(|b| b.iter().filter(|&&c| c == b'\n').count()).unwrap_or(0)
}
