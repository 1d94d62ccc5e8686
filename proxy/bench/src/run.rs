//! The load driver: the warm-up, then each cell in turn, closed loop (C users, each sending its next
//! request when its last one ended) or open loop (sends on a schedule, whatever the answers do).
//!
//! Every prompt of a cell is built before the cell starts, so tokenization never sits inside a
//! measured interval. t0 of a request is taken just before it asks for a connection.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::api::request_body;
use crate::client::{Client, ClientError, Exchange};
use crate::config::{BenchConfig, LoadMode, PrefixMode, Target};
use crate::corpus::{PromptBuilder, PromptError, PromptKey};
use crate::plan::{arrival_offsets_s, cells, Cell, Load};
use crate::progress::Progress;
use crate::record::RequestRecord;
use crate::regress::{bottlenecks, regressions};
use crate::results::{reproduce_command, BenchResults, CellResult, Conditions, Environment, Reproduce, RequestPath};
use crate::stats::{cell_stats, CellStats};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot build a prompt: {0}")]
    Prompt(#[from] PromptError),
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Where the requests go and how the run is described.
#[derive(Debug, Clone)]
pub struct RunTarget {
    /// What requests are sent to: the target itself, or the embedded tokentap in front of it.
    pub send_to: Target,
    pub path: RequestPath,
    pub records_dir: Option<String>,
    /// The process arguments, for the reproducibility section.
    pub args: Vec<String>,
}

/// A finished run: the results document and every request's record (warm-up first).
#[derive(Debug)]
pub struct RunOutput {
    pub results: BenchResults,
    pub records: Vec<RequestRecord>,
}

struct Shared {
    client: Arc<Client>,
    run_start: Instant,
    in_flight: AtomicU32,
    records: Mutex<Vec<RequestRecord>>,
    server_header: Mutex<Option<String>>,
    response_model: Mutex<Option<String>>,
    progress: Progress,
}

/// One request: the conditions it was planned under.
#[derive(Clone)]
struct Planned {
    cell: Option<u32>,
    index: u32,
    prompt_tokens: u64,
    max_tokens: u32,
    body: Bytes,
    scheduled_ms: Option<f64>,
}

impl Shared {
    async fn one(&self, planned: Planned) {
        let t0 = Instant::now();
        let in_flight = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let exchange = self.client.exchange(planned.body.clone(), t0).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let end = Instant::now();
        let record = self.record(&planned, t0, end, in_flight, exchange);
        self.progress.request_done(&record);
        {
            let mut records = self.records.lock();
            records.push(record);
        }
    }

    fn record(&self, p: &Planned, t0: Instant, end: Instant, in_flight: u32, exchange: Exchange) -> RequestRecord {
        let ms = |t: Instant| t.duration_since(self.run_start).as_secs_f64() * 1000.0;
        let mut record = RequestRecord {
            cell: p.cell,
            index: p.index,
            warmup: p.cell.is_none(),
            start_ms: ms(t0),
            scheduled_ms: p.scheduled_ms,
            in_flight_at_start: in_flight,
            prompt_tokens: p.prompt_tokens,
            max_tokens: p.max_tokens,
            ok: exchange.failure.is_none(),
            failure: exchange.failure,
            status: exchange.status,
            tokentap_request_id: exchange.tokentap_request_id,
            ttfb_ms: None,
            time_to_first_chunk_ms: None,
            ttft_answer_ms: None,
            ttft_reasoning_ms: None,
            to_last_content_ms: None,
            e2e_ms: None,
            output_tokens: None,
            reasoning_tokens: None,
            first_content_tokens: None,
            output_tps: None,
            tpot_ms: None,
            itl_ms: Vec::new(),
            content_events: 0,
            usage_input_tokens: None,
            usage_output_tokens: None,
            usage_cached_tokens: None,
            finish_reason: None,
            end_ms: ms(end),
        };
        if let Some(analysis) = &exchange.analysis {
            record.fill_from(analysis);
            if record.ok {
                {
                    let mut model = self.response_model.lock();
                    if model.is_none() {
                        *model = analysis.response_model.clone();
                    }
                }
            }
        }
        if record.ok {
            {
                let mut server = self.server_header.lock();
                if server.is_none() {
                    *server = exchange.server_header;
                }
            }
        }
        record
    }
}

/// Runs the whole plan and computes the results.
pub async fn run(config: &BenchConfig, target: RunTarget) -> Result<RunOutput, RunError> {
    let builder = PromptBuilder::new(config.seed)?;
    let client = Client::new(config, target.send_to.clone())?;
    let started_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let plan = cells(config);
    let shared = Arc::new(Shared {
        client: client.clone(),
        run_start: Instant::now(),
        in_flight: AtomicU32::new(0),
        records: Mutex::new(Vec::new()),
        server_header: Mutex::new(None),
        response_model: Mutex::new(None),
        progress: Progress::new(config.quiet, plan.len()),
    });
    let body_of = |prompt: &str, max_tokens: u32| -> Bytes {
        let body = request_body(config.api, &config.model, prompt, max_tokens, config.ignore_eos);
        Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
    };
    let prompt_key = |cell: u32, request: u32| match config.prefix {
        PrefixMode::Shared => PromptKey::Shared,
        PrefixMode::Unique => PromptKey::Unique { cell, request },
    };

    // Warm-up: one at a time, under the first cell's lengths.
    let first = plan[0];
    shared.progress.start_warmup(config.warmup);
    for index in 0..config.warmup {
        let prompt = builder.build(first.prompt_tokens, prompt_key(u32::MAX, index))?;
        let planned = Planned {
            cell: None,
            index,
            prompt_tokens: first.prompt_tokens,
            max_tokens: first.output_tokens,
            body: body_of(&prompt, first.output_tokens),
            scheduled_ms: None,
        };
        shared.one(planned).await;
    }

    let mut request_example = serde_json::Value::Null;
    for cell in &plan {
        let mut bodies = Vec::with_capacity(config.requests as usize);
        for index in 0..config.requests {
            let prompt = builder.build(cell.prompt_tokens, prompt_key(cell.index, index))?;
            if request_example.is_null() {
                let short: String = prompt.chars().take(200).collect();
                request_example =
                    request_body(config.api, &config.model, &short, cell.output_tokens, config.ignore_eos);
            }
            bodies.push(body_of(&prompt, cell.output_tokens));
        }
        shared.progress.start_cell(cell, config.requests);
        match cell.load {
            Load::Concurrency(users) => run_closed(&shared, cell, bodies, users, config.duration).await,
            Load::Rate(rate) => {
                let arrivals = match &config.load {
                    LoadMode::Open { arrivals, .. } => *arrivals,
                    LoadMode::Closed { .. } => crate::config::Arrivals::Constant,
                };
                let offsets = arrival_offsets_s(rate, config.requests, arrivals, config.seed ^ u64::from(cell.index));
                run_open(&shared, cell, bodies, offsets, config.duration).await;
            }
        }
        shared.progress.end_cell();
    }

    let records = shared.records.lock().clone();
    let results = summarize(
        config,
        &target,
        &records,
        Meta {
            started_at,
            server_header: shared.server_header.lock().clone(),
            response_model: shared.response_model.lock().clone(),
            request_example,
            request_path: client.path().to_string(),
        },
    );
    Ok(RunOutput { results, records })
}

async fn run_closed(shared: &Arc<Shared>, cell: &Cell, bodies: Vec<Bytes>, users: u32, duration: Option<Duration>) {
    let next = Arc::new(AtomicU32::new(0));
    let bodies = Arc::new(bodies);
    let cell_start = Instant::now();
    let mut tasks = Vec::with_capacity(users as usize);
    for _ in 0..users {
        let (shared, next, bodies, cell) = (shared.clone(), next.clone(), bodies.clone(), *cell);
        tasks.push(tokio::spawn(async move {
            loop {
                if duration.is_some_and(|d| cell_start.elapsed() >= d) {
                    break;
                }
                let index = next.fetch_add(1, Ordering::SeqCst);
                let Some(body) = bodies.get(index as usize) else { break };
                let planned = Planned {
                    cell: Some(cell.index),
                    index,
                    prompt_tokens: cell.prompt_tokens,
                    max_tokens: cell.output_tokens,
                    body: body.clone(),
                    scheduled_ms: None,
                };
                shared.one(planned).await;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

async fn run_open(
    shared: &Arc<Shared>,
    cell: &Cell,
    bodies: Vec<Bytes>,
    offsets_s: Vec<f64>,
    duration: Option<Duration>,
) {
    let cell_start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(bodies.len());
    for (index, (body, offset)) in bodies.into_iter().zip(offsets_s).enumerate() {
        let offset = Duration::from_secs_f64(offset);
        if duration.is_some_and(|d| offset >= d) {
            break;
        }
        tokio::time::sleep_until(cell_start + offset).await;
        let scheduled = (cell_start + offset).into_std().duration_since(shared.run_start).as_secs_f64() * 1000.0;
        let planned = Planned {
            cell: Some(cell.index),
            index: index as u32,
            prompt_tokens: cell.prompt_tokens,
            max_tokens: cell.output_tokens,
            body,
            scheduled_ms: Some(scheduled),
        };
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move { shared.one(planned).await }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

struct Meta {
    started_at: String,
    server_header: Option<String>,
    response_model: Option<String>,
    request_example: serde_json::Value,
    request_path: String,
}

/// The results document from the records (also used to recompute a document from a JSONL file).
fn summarize(config: &BenchConfig, target: &RunTarget, records: &[RequestRecord], meta: Meta) -> BenchResults {
    let warmup: Vec<&RequestRecord> = records.iter().filter(|r| r.warmup).collect();
    let plan = cells(config);
    let cells: Vec<CellResult> = plan
        .iter()
        .map(|cell| {
            let mine: Vec<&RequestRecord> = records.iter().filter(|r| r.cell == Some(cell.index)).collect();
            CellResult { cell: *cell, stats: cell_stats(&mine, &config.slo) }
        })
        .collect();
    let pairs: Vec<(&Cell, &CellStats)> = cells.iter().map(|c| (&c.cell, &c.stats)).collect();
    BenchResults {
        results_version: crate::results::RESULTS_VERSION,
        environment: Environment {
            target: config.target.url(),
            path: target.path,
            server_header: meta.server_header,
            response_model: meta.response_model,
            tokentap_version: env!("CARGO_PKG_VERSION").to_string(),
            os: std::env::consts::OS.to_string(),
            arch: std::env::consts::ARCH.to_string(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: cpu_model(),
            memory_bytes: memory_bytes(),
            started_at: meta.started_at,
            records_dir: target.records_dir.clone(),
        },
        conditions: Conditions::of(config),
        warmup: cell_stats(&warmup, &config.slo),
        regressions: regressions(&pairs),
        bottleneck: bottlenecks(&pairs),
        cells,
        reproduce: Reproduce {
            command: reproduce_command(&target.args, config.seed),
            request_example: meta.request_example,
            request_path: meta.request_path,
        },
    }
}

fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

fn memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
