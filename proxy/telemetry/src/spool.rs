//! The on-disk spool: encoded OTLP requests that could not be delivered, kept in order under the
//! data directory until the collector is back, and capped in size.
//!
//! One file per request, named `{sequence:016}-{signal}-{items}.pb`, written to a temporary name and
//! renamed, so a crash never leaves half a request behind. Files left by an earlier run are picked
//! up at start and replayed. Delivery is at least once: a request is removed only after the
//! collector accepted it, so a crash between the two sends it again.

use std::collections::VecDeque;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Which OTLP export a spooled request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Traces,
    Metrics,
}

impl Signal {
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Metrics => "metrics",
        }
    }

    fn parse(text: &str) -> Option<Signal> {
        match text {
            "traces" => Some(Signal::Traces),
            "metrics" => Some(Signal::Metrics),
            _ => None,
        }
    }
}

/// One spooled request.
#[derive(Debug, Clone)]
pub struct SpoolEntry {
    pub path: PathBuf,
    pub signal: Signal,
    /// Spans (traces) or data points (metrics) in the request, for the counters.
    pub items: u64,
    pub bytes: u64,
}

/// The spool directory and its index, oldest first.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    entries: VecDeque<SpoolEntry>,
    total_bytes: u64,
    next_sequence: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("spool directory {path}: {source}")]
    Dir { path: PathBuf, source: std::io::Error },
    #[error("cannot write spool file {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// What a push did to make room.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Evicted {
    /// Older entries removed to respect the size cap: (signal, items).
    pub entries: Vec<(Signal, u64)>,
    /// The new request was larger than the whole cap and was not written.
    pub rejected: bool,
}

fn parse_name(name: &str) -> Option<(u64, Signal, u64)> {
    let stem = name.strip_suffix(".pb")?;
    let mut parts = stem.splitn(3, '-');
    let sequence = parts.next()?.parse().ok()?;
    let signal = Signal::parse(parts.next()?)?;
    let items = parts.next()?.parse().ok()?;
    Some((sequence, signal, items))
}

impl Spool {
    /// Opens (creating) the directory and indexes the files an earlier run left.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Spool, SpoolError> {
        fs::create_dir_all(dir).map_err(|source| SpoolError::Dir { path: dir.to_path_buf(), source })?;
        let mut found = Vec::new();
        let listing = fs::read_dir(dir).map_err(|source| SpoolError::Dir { path: dir.to_path_buf(), source })?;
        for entry in listing.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tmp") {
                let _ = fs::remove_file(entry.path());
                continue;
            }
            if let Some((sequence, signal, items)) = parse_name(&name) {
                let bytes = entry.metadata().map(|m| m.len()).unwrap_or(0);
                found.push((sequence, SpoolEntry { path: entry.path(), signal, items, bytes }));
            }
        }
        found.sort_by_key(|(sequence, _)| *sequence);
        let next_sequence = found.last().map_or(0, |(s, _)| s + 1);
        let total_bytes = found.iter().map(|(_, e)| e.bytes).sum();
        Ok(Spool {
            dir: dir.to_path_buf(),
            max_bytes,
            entries: found.into_iter().map(|(_, e)| e).collect(),
            total_bytes,
            next_sequence,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Spooled items per signal: (spans, metric data points).
    pub fn items(&self) -> (u64, u64) {
        self.entries.iter().fold((0, 0), |(t, m), e| match e.signal {
            Signal::Traces => (t + e.items, m),
            Signal::Metrics => (t, m + e.items),
        })
    }

    /// Writes a request at the end of the spool, evicting the oldest entries past the size cap.
    pub fn push(&mut self, signal: Signal, items: u64, body: &[u8]) -> Result<Evicted, SpoolError> {
        let mut evicted = Evicted::default();
        let bytes = body.len() as u64;
        if bytes > self.max_bytes {
            evicted.rejected = true;
            return Ok(evicted);
        }
        while self.total_bytes + bytes > self.max_bytes {
            match self.pop_oldest() {
                Some(old) => evicted.entries.push((old.signal, old.items)),
                None => break,
            }
        }
        let name = format!("{:016}-{}-{}.pb", self.next_sequence, signal.as_str(), items);
        let path = self.dir.join(&name);
        let tmp = self.dir.join(format!("{name}.tmp"));
        let write = || -> std::io::Result<()> {
            let mut file = fs::File::create(&tmp)?;
            file.write_all(body)?;
            file.sync_data()?;
            fs::rename(&tmp, &path)
        };
        if let Err(source) = write() {
            let _ = fs::remove_file(&tmp);
            return Err(SpoolError::Write { path, source });
        }
        self.next_sequence += 1;
        self.total_bytes += bytes;
        self.entries.push_back(SpoolEntry { path, signal, items, bytes });
        Ok(evicted)
    }

    /// The oldest entry and its bytes, without removing it. An unreadable file is dropped and
    /// reported as `Err` with its entry so the caller can count it.
    pub fn peek(&mut self) -> Option<Result<(SpoolEntry, Vec<u8>), SpoolEntry>> {
        let entry = self.entries.front()?.clone();
        match fs::read(&entry.path) {
            Ok(bytes) => Some(Ok((entry, bytes))),
            Err(_) => {
                self.pop_oldest();
                Some(Err(entry))
            }
        }
    }

    /// Removes the oldest entry (after it was delivered, or given up on).
    pub fn pop_oldest(&mut self) -> Option<SpoolEntry> {
        let entry = self.entries.pop_front()?;
        self.total_bytes = self.total_bytes.saturating_sub(entry.bytes);
        let _ = fs::remove_file(&entry.path);
        Some(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_across_reopen_and_respects_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::open(dir.path(), 250).unwrap();
        assert!(spool.push(Signal::Traces, 3, &[1u8; 100]).unwrap().entries.is_empty());
        assert!(spool.push(Signal::Metrics, 7, &[2u8; 100]).unwrap().entries.is_empty());
        // A third entry does not fit: the oldest goes.
        let evicted = spool.push(Signal::Traces, 5, &[3u8; 100]).unwrap();
        assert_eq!(evicted.entries, vec![(Signal::Traces, 3)]);
        assert_eq!(spool.items(), (5, 7));
        assert!(spool.push(Signal::Traces, 1, &[0u8; 300]).unwrap().rejected);
        drop(spool);

        let mut spool = Spool::open(dir.path(), 250).unwrap();
        assert_eq!(spool.len(), 2);
        assert_eq!(spool.total_bytes(), 200);
        let (entry, bytes) = spool.peek().unwrap().unwrap();
        assert_eq!((entry.signal, entry.items, bytes[0]), (Signal::Metrics, 7, 2));
        spool.pop_oldest();
        spool.push(Signal::Metrics, 2, &[4u8; 10]).unwrap();
        let (entry, bytes) = spool.peek().unwrap().unwrap();
        assert_eq!((entry.signal, entry.items, bytes[0]), (Signal::Traces, 5, 3));
        spool.pop_oldest();
        let (entry, _) = spool.peek().unwrap().unwrap();
        assert_eq!(entry.items, 2);
        spool.pop_oldest();
        assert!(spool.is_empty());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
