//! Reading records from `records.jsonl` files.

use std::collections::HashMap;
use std::io::BufRead;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use tokentap_record::Record;

/// Records read from files: the last version of each request, oldest first by t0.
#[derive(Debug, Default)]
pub struct LoadedRecords {
    pub records: Vec<Record>,
    /// Lines read, including superseded versions of a record.
    pub lines: u64,
    /// Lines that were not a record of this version, or not UTF-8 at all (reported, never fatal).
    pub skipped_lines: u64,
    pub files: Vec<PathBuf>,
    /// For each record, the index in `files` of the file its last version came from (the
    /// instance that wrote it, when several instances' journals are read together).
    pub origins: Vec<usize>,
}

/// The store's files in `data_dir`, oldest first: `records.N.jsonl` … `records.1.jsonl`, `records.jsonl`.
pub fn records_files(data_dir: &Path) -> Vec<PathBuf> {
    journal_files(data_dir, "records")
}

/// A journal's files in `data_dir`, oldest first: `{stem}.N.jsonl` … `{stem}.1.jsonl`, `{stem}.jsonl`.
pub fn journal_files(data_dir: &Path, stem: &str) -> Vec<PathBuf> {
    let prefix = format!("{stem}.");
    let mut rotated: Vec<(u32, PathBuf)> = std::fs::read_dir(data_dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let n = name.strip_prefix(prefix.as_str())?.strip_suffix(".jsonl")?.parse::<u32>().ok()?;
            Some((n, entry.path()))
        })
        .collect();
    rotated.sort_by_key(|r| std::cmp::Reverse(r.0));
    let mut files: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
    let current = data_dir.join(format!("{stem}.jsonl"));
    if current.exists() {
        files.push(current);
    }
    files
}

/// Loads every record of the store in `data_dir`.
pub fn load_data_dir(data_dir: &Path) -> std::io::Result<LoadedRecords> {
    let files = records_files(data_dir);
    if files.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no records.jsonl in {}", data_dir.display()),
        ));
    }
    load_files(&files)
}

/// Loads records from files given oldest first. For a request id seen more than once, the last
/// line wins; the result is sorted by t0 (ties by request id, so the order is deterministic).
pub fn load_files(files: &[PathBuf]) -> std::io::Result<LoadedRecords> {
    let mut out = LoadedRecords { files: files.to_vec(), ..LoadedRecords::default() };
    let last = last_versions::<Record>(files, |r| &r.request_id)?;
    let mut entries: Vec<(Record, usize)> = last.entries.into_iter().zip(last.origins).collect();
    entries.sort_by(|(a, _), (b, _)| {
        a.timeline.t0_unix_ns.cmp(&b.timeline.t0_unix_ns).then_with(|| a.request_id.cmp(&b.request_id))
    });
    (out.records, out.origins) = entries.into_iter().unzip();
    (out.lines, out.skipped_lines) = (last.lines, last.skipped_lines);
    Ok(out)
}

/// The entries of JSON-lines files read oldest first, the last line per key winning, in the order
/// each key first appeared; lines that do not parse as `T` are counted.
pub(crate) struct LastVersions<T> {
    pub(crate) entries: Vec<T>,
    /// The file index each entry's winning line came from.
    pub(crate) origins: Vec<usize>,
    pub(crate) lines: u64,
    pub(crate) skipped_lines: u64,
}

pub(crate) fn last_versions<T: serde::de::DeserializeOwned>(
    files: &[PathBuf],
    key: impl Fn(&T) -> &str,
) -> std::io::Result<LastVersions<T>> {
    let mut out = LastVersions { entries: Vec::new(), origins: Vec::new(), lines: 0, skipped_lines: 0 };
    let mut index: HashMap<String, usize> = HashMap::new();
    for (origin, path) in files.iter().enumerate() {
        for_each_line(path, |line| {
            out.lines += 1;
            match serde_json::from_slice::<T>(line) {
                Ok(entry) => match index.get(key(&entry)) {
                    Some(&i) => {
                        out.entries[i] = entry;
                        out.origins[i] = origin;
                    }
                    None => {
                        index.insert(key(&entry).to_owned(), out.entries.len());
                        out.entries.push(entry);
                        out.origins.push(origin);
                    }
                },
                Err(_) => out.skipped_lines += 1,
            }
        })?;
    }
    Ok(out)
}

/// Calls `each` with every non-blank line of a JSON-lines file, without its line end. Lines are
/// split on bytes: a line that is not valid UTF-8 (a torn write, a damaged disk block) is handed
/// over like any other, for the parser to reject, and never ends the reading of the file. Only a
/// regular file is read: a FIFO or a device in a journal's place is an error, not a read that
/// never ends (the file is opened with `O_NONBLOCK`, so even the open cannot block).
pub fn for_each_line(path: &Path, mut each: impl FnMut(&[u8])) -> std::io::Result<()> {
    let failed = |e: std::io::Error| std::io::Error::new(e.kind(), format!("cannot read {}: {e}", path.display()));
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(failed)?;
    if !file.metadata().map_err(failed)?.is_file() {
        return Err(failed(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file")));
    }
    let mut reader = std::io::BufReader::new(file);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(failed)? == 0 {
            return Ok(());
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if !text.iter().all(u8::is_ascii_whitespace) {
            each(text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_that_is_not_utf8_is_skipped_and_counted_and_the_rest_is_read() {
        let dir = std::env::temp_dir().join(format!("tokentap-load-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lines.jsonl");
        let mut bytes = Vec::new();
        for i in 0..10 {
            if i == 3 {
                bytes.extend_from_slice(b"{\"id\":\"bad\xff\"}\n");
            }
            bytes.extend_from_slice(format!("{{\"id\":\"r{i}\"}}\n").as_bytes());
        }
        bytes.extend_from_slice(b"\n  \n\xc3\x28 not json either\n{\"id\":\"last\"}");
        std::fs::write(&path, &bytes).unwrap();
        #[derive(serde::Deserialize)]
        struct Line {
            id: String,
        }
        let read = last_versions::<Line>(std::slice::from_ref(&path), |l| &l.id).unwrap();
        let ids: Vec<&str> = read.entries.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(ids, ["r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "last"]);
        assert_eq!((read.lines, read.skipped_lines), (13, 2));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
