//! Reading records from `records.jsonl` files.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use tokentap_record::Record;

/// Records read from files: the last version of each request, oldest first by t0.
#[derive(Debug, Default)]
pub struct LoadedRecords {
    pub records: Vec<Record>,
    /// Lines read, including superseded versions of a record.
    pub lines: u64,
    /// Lines that were not a record of this version (reported, never fatal).
    pub skipped_lines: u64,
    pub files: Vec<PathBuf>,
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
    (out.records, out.lines, out.skipped_lines) = (last.entries, last.lines, last.skipped_lines);
    out.records.sort_by(|a, b| {
        a.timeline.t0_unix_ns.cmp(&b.timeline.t0_unix_ns).then_with(|| a.request_id.cmp(&b.request_id))
    });
    Ok(out)
}

/// The entries of JSON-lines files read oldest first, the last line per key winning, in the order
/// each key first appeared; lines that do not parse as `T` are counted.
pub(crate) struct LastVersions<T> {
    pub(crate) entries: Vec<T>,
    pub(crate) lines: u64,
    pub(crate) skipped_lines: u64,
}

pub(crate) fn last_versions<T: serde::de::DeserializeOwned>(
    files: &[PathBuf],
    key: impl Fn(&T) -> &str,
) -> std::io::Result<LastVersions<T>> {
    let mut out = LastVersions { entries: Vec::new(), lines: 0, skipped_lines: 0 };
    let mut index: HashMap<String, usize> = HashMap::new();
    for path in files {
        let file = std::fs::File::open(path)
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display())))?;
        for line in std::io::BufReader::new(file).lines() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            out.lines += 1;
            match serde_json::from_str::<T>(&line) {
                Ok(entry) => match index.get(key(&entry)) {
                    Some(&i) => out.entries[i] = entry,
                    None => {
                        index.insert(key(&entry).to_owned(), out.entries.len());
                        out.entries.push(entry);
                    }
                },
                Err(_) => out.skipped_lines += 1,
            }
        }
    }
    Ok(out)
}
