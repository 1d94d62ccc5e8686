//! One append-only JSON-lines journal in the data directory (`records.jsonl`, `turns.jsonl`),
//! rotated by size, recreated when it vanishes, with its write counters.

use std::fs::{File, OpenOptions};
use std::io::{IoSlice, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::StoreError;

struct OpenFile {
    file: File,
    size: u64,
    /// (device, inode) of the open file, to notice when the path no longer names it.
    identity: (u64, u64),
    checked_at: std::time::Instant,
    /// Lines written since the path was last seen to name this file.
    lines_since_check: u64,
    /// The path no longer names this file and could not be opened again (something that is not a
    /// regular file took its place): every write tries again, none goes to this file.
    lost: bool,
}

/// How often a write checks that the journal's path still names the file tokentap has open (one
/// `stat` on the worker thread, never on the forwarding path). Lines written to a removed file
/// between two checks are counted in `gap`.
const CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

pub(crate) struct Journal {
    dir: PathBuf,
    /// `records` for `records.jsonl`; rotated files are `records.1.jsonl` … `records.N.jsonl`.
    stem: &'static str,
    max_file_bytes: u64,
    max_files: u32,
    open: Mutex<OpenFile>,
    pub(super) written: AtomicU64,
    pub(super) write_errors: AtomicU64,
    recreated: AtomicU64,
    gap: AtomicU64,
    pub(super) check_every: std::time::Duration,
    /// Why the last write failed, while it is the last one (disk full, read-only…).
    failing: Mutex<Option<String>>,
}

impl Journal {
    pub(crate) fn open(
        dir: &Path,
        stem: &'static str,
        max_file_bytes: u64,
        max_files: u32,
    ) -> Result<Journal, StoreError> {
        let path = dir.join(format!("{stem}.jsonl"));
        // A device, a pipe or a link in the journal's place is refused (see `open_file`).
        Ok(Journal {
            open: Mutex::new(open_file(&path)?),
            dir: dir.to_path_buf(),
            stem,
            max_file_bytes,
            max_files,
            written: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            recreated: AtomicU64::new(0),
            gap: AtomicU64::new(0),
            check_every: CHECK_EVERY,
            failing: Mutex::new(None),
        })
    }

    pub(crate) fn path(&self) -> PathBuf {
        self.dir.join(format!("{}.jsonl", self.stem))
    }

    /// Lines appended since start.
    pub(crate) fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Writes that failed.
    pub(crate) fn write_errors(&self) -> u64 {
        self.write_errors.load(Ordering::Relaxed)
    }

    /// Times the file was found removed or replaced and was recreated.
    pub(crate) fn recreated(&self) -> u64 {
        self.recreated.load(Ordering::Relaxed)
    }

    /// Lines that went to a removed or replaced file before tokentap noticed.
    pub(crate) fn gap(&self) -> u64 {
        self.gap.load(Ordering::Relaxed)
    }

    /// Why writes are failing now (`None` once one succeeds again).
    pub(crate) fn failing(&self) -> Option<String> {
        self.failing.lock().clone()
    }

    /// Appends one line and counts it (written or failed).
    pub(crate) fn append(&self, json: &str) -> Result<(), StoreError> {
        let result = self.write_line(json);
        match &result {
            Ok(()) => self.written.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.write_errors.fetch_add(1, Ordering::Relaxed),
        };
        result
    }

    /// Appends one line without counting it as a new entry (a newer version of one); failures
    /// are counted.
    pub(crate) fn rewrite(&self, json: &str) -> Result<(), StoreError> {
        let result = self.write_line(json);
        if result.is_err() {
            self.write_errors.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn write_line(&self, json: &str) -> Result<(), StoreError> {
        let result = self.try_write_line(json);
        *self.failing.lock() = result.as_ref().err().map(|e| e.to_string());
        result
    }

    fn try_write_line(&self, json: &str) -> Result<(), StoreError> {
        let mut open = self.open.lock();
        // A journal removed or replaced under tokentap (the data dir deleted, a log tool moving
        // the file) would swallow every later line: notice it, recreate it, count it.
        // Once lost (something else took the path), every write tries to open it again: no line
        // goes to the old file, and each one that cannot be written is counted as a failure.
        if open.lost || open.checked_at.elapsed() >= self.check_every {
            open.checked_at = std::time::Instant::now();
            if !open.lost && still_the_file(&self.path(), &open) {
                open.lines_since_check = 0;
            } else {
                if !open.lost {
                    self.gap.fetch_add(open.lines_since_check, Ordering::Relaxed);
                    open.lines_since_check = 0;
                }
                let reopened = std::fs::create_dir_all(&self.dir)
                    .map_err(|source| StoreError::Open { path: self.dir.clone(), source })
                    .and_then(|()| open_file(&self.path()));
                match reopened {
                    Ok(file) => {
                        *open = file;
                        self.recreated.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(path = %self.path().display(), "journal vanished or was replaced; recreated it");
                    }
                    Err(e) => {
                        if !open.lost {
                            tracing::warn!(error = %e, "journal replaced by something it cannot write to; records are kept in memory only");
                        }
                        open.lost = true;
                        return Err(e);
                    }
                }
            }
        }
        let line_len = json.len() as u64 + 1;
        if open.size > 0 && open.size + line_len > self.max_file_bytes {
            self.rotate()?;
            *open = open_file(&self.path())?;
        }
        if let Err(source) = write_line_to(&mut open.file, json.as_bytes()) {
            // A disk that filled up mid-line leaves half a line, which would corrupt the next
            // line written once space frees: cut the file back to its last whole line.
            let _ = open.file.set_len(open.size);
            return Err(StoreError::Write { path: self.path(), source });
        }
        open.size += line_len;
        open.lines_since_check += 1;
        Ok(())
    }

    /// stem.jsonl → stem.1.jsonl → … → stem.N.jsonl (the oldest is deleted).
    fn rotate(&self) -> Result<(), StoreError> {
        let name = |i: u32| self.dir.join(format!("{}.{i}.jsonl", self.stem));
        let _ = std::fs::remove_file(name(self.max_files));
        for i in (1..self.max_files).rev() {
            let _ = std::fs::rename(name(i), name(i + 1));
        }
        if self.max_files == 0 {
            return std::fs::remove_file(self.path()).map_err(|source| StoreError::Write { path: self.path(), source });
        }
        std::fs::rename(self.path(), name(1)).map_err(|source| StoreError::Write { path: name(1), source })
    }
}

/// The line and its newline in one `writev` (no copy of the line into a buffer of its own); a
/// short write (a disk filling up, a signal) goes on from where it stopped.
fn write_line_to(file: &mut impl Write, json: &[u8]) -> std::io::Result<()> {
    let mut parts = [IoSlice::new(json), IoSlice::new(b"\n")];
    let mut left: &mut [IoSlice<'_>] = &mut parts;
    while !left.is_empty() {
        match file.write_vectored(left) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut left, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Opens (or creates) the journal for appending. Only a regular file is accepted: a symbolic link
/// in its place is not followed (`O_NOFOLLOW`: records would go wherever it points), and a FIFO
/// does not block the record worker (`O_NONBLOCK`: without a reader, `open` would wait for one;
/// with the flag it returns at once and the file's type is checked). The flag is cleared again on
/// the regular file, whose writes then block as usual.
fn open_file(path: &Path) -> Result<OpenFile, StoreError> {
    let failed = |source| StoreError::Open { path: path.to_path_buf(), source };
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| failed(not_a_regular_file(path).unwrap_or(e)))?;
    let meta = file.metadata().map_err(failed)?;
    if !meta.file_type().is_file() {
        return Err(failed(not_a_regular_file(path).unwrap_or_else(|| refused("not a regular file"))));
    }
    let flags = rustix::fs::fcntl_getfl(&file).map_err(|e| failed(e.into()))?;
    rustix::fs::fcntl_setfl(&file, flags - rustix::fs::OFlags::NONBLOCK).map_err(|e| failed(e.into()))?;
    Ok(OpenFile {
        file,
        size: meta.len(),
        identity: (meta.dev(), meta.ino()),
        checked_at: std::time::Instant::now(),
        lines_since_check: 0,
        lost: false,
    })
}

fn refused(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string())
}

/// What is at `path` when it is something other than a regular file, as an error to report.
fn not_a_regular_file(path: &Path) -> Option<std::io::Error> {
    let kind = std::fs::symlink_metadata(path).ok()?.file_type();
    let what = if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        return None;
    };
    Some(refused(&format!("not a regular file ({what}); tokentap writes only to a regular file")))
}

/// Whether `path` still names the open file (false when it was removed or replaced, also by a
/// link to it).
fn still_the_file(path: &Path, open: &OpenFile) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && (m.dev(), m.ino()) == open.identity)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file that takes at most `max` bytes a call and is interrupted on its first call.
    struct Trickle {
        out: Vec<u8>,
        max: usize,
        interrupted: bool,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if !self.interrupted {
                self.interrupted = true;
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            let n = buf.len().min(self.max);
            self.out.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_line_is_written_whole_with_its_newline_through_short_and_interrupted_writes() {
        let json = br#"{"request_id":"r1","path":"/v1/chat/completions"}"#;
        for max in [1, 2, 7, json.len(), json.len() + 1, 4096] {
            let mut file = Trickle { out: Vec::new(), max, interrupted: false };
            write_line_to(&mut file, json).unwrap();
            let mut expected = json.to_vec();
            expected.push(b'\n');
            assert_eq!(file.out, expected, "at most {max} bytes a write");
        }
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Ok(0)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        assert_eq!(write_line_to(&mut Full, json).unwrap_err().kind(), std::io::ErrorKind::WriteZero);
    }
}
