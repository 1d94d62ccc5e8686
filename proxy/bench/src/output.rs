//! Writing a run's files: `--json` (the results), `--jsonl` (one line per request), `--report`
//! (HTML when the name ends in `.html`, else markdown).

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::config::BenchConfig;
use crate::run::RunOutput;

#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}", path.display())]
pub struct OutputError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    std::fs::write(path, bytes).map_err(|source| OutputError { path: path.to_path_buf(), source })
}

/// Writes every file the flags asked for.
pub fn write_outputs(config: &BenchConfig, run: &RunOutput) -> Result<(), OutputError> {
    if let Some(path) = &config.json {
        let mut text = serde_json::to_vec_pretty(&run.results).unwrap_or_default();
        text.push(b'\n');
        write_file(path, &text)?;
    }
    if let Some(path) = &config.jsonl {
        let mut text = Vec::new();
        for record in &run.records {
            if serde_json::to_writer(&mut text, record).is_ok() {
                let _ = text.write_all(b"\n");
            }
        }
        write_file(path, &text)?;
    }
    if let Some(path) = &config.report {
        let text = if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("html")) {
            crate::html::render(&run.results, &run.records)
        } else {
            crate::markdown::render(&run.results)
        };
        write_file(path, text.as_bytes())?;
    }
    Ok(())
}
