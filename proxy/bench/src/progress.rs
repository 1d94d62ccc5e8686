//! Progress on stderr: one line per cell, redrawn in place, with the cell's live TTFT p50/p99.
//! Silent when stderr is not a terminal or with `--quiet`.

use std::io::{IsTerminal, Write};

use parking_lot::Mutex;

use tokentap_analysis::percentile;

use crate::plan::Cell;
use crate::record::RequestRecord;

pub(crate) struct Progress {
    enabled: bool,
    cells: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    label: String,
    total: u32,
    done: u32,
    failed: u32,
    ttft: Vec<f64>,
}

impl Progress {
    pub(crate) fn new(quiet: bool, cells: usize) -> Progress {
        Progress { enabled: !quiet && std::io::stderr().is_terminal(), cells, state: Mutex::new(State::default()) }
    }

    pub(crate) fn start_warmup(&self, requests: u32) {
        self.start("warm-up".to_string(), requests);
    }

    pub(crate) fn start_cell(&self, cell: &Cell, requests: u32) {
        let label = format!(
            "cell {}/{} {} output {} prompt {}",
            cell.index + 1,
            self.cells,
            cell.load.label(),
            cell.output_tokens,
            cell.prompt_tokens
        );
        self.start(label, requests);
    }

    fn start(&self, label: String, total: u32) {
        {
            let mut s = self.state.lock();
            *s = State { label, total, ..State::default() };
            self.draw(&s);
        }
    }

    pub(crate) fn request_done(&self, record: &RequestRecord) {
        {
            let mut s = self.state.lock();
            s.done += 1;
            if !record.ok {
                s.failed += 1;
            }
            if let Some(t) = record.ttft_answer_ms {
                let at = s.ttft.partition_point(|&x| x < t);
                s.ttft.insert(at, t);
            }
            self.draw(&s);
        }
    }

    pub(crate) fn end_cell(&self) {
        if self.enabled {
            let _ = writeln!(std::io::stderr());
        }
    }

    fn draw(&self, s: &State) {
        if !self.enabled {
            return;
        }
        let width = 24usize;
        let filled = if s.total == 0 { width } else { (s.done as usize * width / s.total as usize).min(width) };
        let ttft = if s.ttft.is_empty() {
            String::new()
        } else {
            format!("  TTFT p50 {:.0} ms p99 {:.0} ms", percentile(&s.ttft, 50.0), percentile(&s.ttft, 99.0))
        };
        let _ = write!(
            std::io::stderr(),
            "\r\x1b[2K{} [{}{}] {}/{} failed {}{ttft}",
            s.label,
            "#".repeat(filled),
            "-".repeat(width - filled),
            s.done,
            s.total,
            s.failed
        );
    }
}
