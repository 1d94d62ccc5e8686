//! collector-config/ is checked, not just shipped: the Collector configuration is well formed (every
//! pipeline uses components defined in the file, every defined component is used), its sampling
//! policies and span-metric dimensions name attributes tokentap exports, the Prometheus
//! configuration passes `promtool check config`, and the dashboard only queries metrics tokentap
//! serves. Tail sampling waits for a whole turn, and the load-balancing tier routes spans by trace
//! id. A real Collector (built by `scripts/setup.sh test` from collector-config/distribution/)
//! validates both Collector configurations as shipped.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_yaml::Value;

fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_file(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The source of the conventions (`conventions.rs` and its folder): attribute keys and Prometheus
/// names appear there as literals.
fn conventions_source() -> String {
    let mut source = read("proxy/telemetry/src/conventions.rs");
    let dir = repo_file("proxy/telemetry/src/conventions");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs"))
        .collect();
    files.sort();
    assert!(files.iter().any(|p| p.ends_with("metrics.rs")), "the metric table is in {}", dir.display());
    for path in files {
        source.push_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
    }
    source
}

fn collector() -> Value {
    serde_yaml::from_str(&read("collector-config/otelcol.yaml")).expect("otelcol.yaml is YAML")
}

fn keys(section: &Value) -> BTreeSet<String> {
    section.as_mapping().map(|m| m.keys().filter_map(|k| k.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

fn names(list: &Value) -> Vec<String> {
    list.as_sequence().map(|s| s.iter().filter_map(|v| v.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

#[test]
fn every_pipeline_uses_defined_components() {
    let config = collector();
    let receivers = keys(&config["receivers"]);
    let processors = keys(&config["processors"]);
    let exporters = keys(&config["exporters"]);
    let connectors = keys(&config["connectors"]);
    let extensions = keys(&config["extensions"]);
    let pipelines = config["service"]["pipelines"].as_mapping().expect("service.pipelines");
    assert!(!pipelines.is_empty());

    let (mut used_receivers, mut used_processors, mut used_exporters) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let (mut connectors_in, mut connectors_out) = (BTreeSet::new(), BTreeSet::new());
    let mut signals = BTreeSet::new();
    for (name, pipeline) in pipelines {
        let name = name.as_str().unwrap();
        let signal = name.split('/').next().unwrap();
        assert!(["traces", "metrics", "logs"].contains(&signal), "pipeline {name}: unknown signal");
        signals.insert(signal.to_string());
        let pipeline_receivers = names(&pipeline["receivers"]);
        let pipeline_processors = names(&pipeline["processors"]);
        let pipeline_exporters = names(&pipeline["exporters"]);
        assert!(
            !pipeline_receivers.is_empty() && !pipeline_exporters.is_empty(),
            "pipeline {name} needs receivers and exporters"
        );
        for r in &pipeline_receivers {
            assert!(receivers.contains(r) || connectors.contains(r), "pipeline {name}: receiver {r} is not defined");
            if connectors.contains(r) {
                connectors_out.insert(r.clone());
            } else {
                used_receivers.insert(r.clone());
            }
        }
        for p in &pipeline_processors {
            assert!(processors.contains(p), "pipeline {name}: processor {p} is not defined");
            used_processors.insert(p.clone());
        }
        for e in &pipeline_exporters {
            assert!(exporters.contains(e) || connectors.contains(e), "pipeline {name}: exporter {e} is not defined");
            if connectors.contains(e) {
                connectors_in.insert(e.clone());
            } else {
                used_exporters.insert(e.clone());
            }
        }
        // memory_limiter first, batch after any sampling: the order the Collector recommends.
        assert_eq!(pipeline_processors.first().map(String::as_str), Some("memory_limiter"), "pipeline {name}");
        assert_eq!(pipeline_processors.last().map(String::as_str), Some("batch"), "pipeline {name}");
    }
    assert_eq!(used_receivers, receivers, "receivers defined but unused");
    assert_eq!(used_processors, processors, "processors defined but unused");
    assert_eq!(used_exporters, exporters, "exporters defined but unused");
    assert_eq!(connectors_in, connectors, "every connector is an exporter of some pipeline");
    assert_eq!(connectors_out, connectors, "every connector is a receiver of some pipeline");
    for extension in names(&config["service"]["extensions"]) {
        assert!(extensions.contains(&extension), "extension {extension} is not defined");
    }
    assert_eq!(signals, BTreeSet::from(["metrics".to_string(), "traces".to_string()]));
    // The OTLP receiver listens on both protocols tokentap can export with.
    let protocols = keys(&config["receivers"]["otlp"]["protocols"]);
    assert_eq!(protocols, BTreeSet::from(["grpc".to_string(), "http".to_string()]));
    assert!(connectors.contains("spanmetrics"));
}

#[test]
fn sampling_policies_and_dimensions_name_exported_attributes() {
    let config = collector();
    let source = conventions_source();
    let exported = |key: &str| source.contains(&format!("\"{key}\""));
    let policies = config["processors"]["tail_sampling"]["policies"].as_sequence().expect("tail_sampling.policies");
    let mut types = BTreeSet::new();
    for policy in policies {
        let kind = policy["type"].as_str().expect("policy type").to_string();
        let body = &policy[kind.as_str()];
        assert!(!body.is_null(), "policy {:?} has no {kind} section", policy["name"]);
        if let Some(key) = body["key"].as_str() {
            assert!(exported(key), "policy {:?} uses {key}, which tokentap does not export", policy["name"]);
        }
        for condition in names(&body["span"]) {
            for key in condition.split("attributes[\"").skip(1).filter_map(|rest| rest.split('"').next()) {
                assert!(exported(key), "policy {:?} uses {key}, which tokentap does not export", policy["name"]);
            }
        }
        types.insert(kind);
    }
    for kind in ["status_code", "ottl_condition", "numeric_attribute", "boolean_attribute", "probabilistic"] {
        assert!(types.contains(kind), "no {kind} policy (errors, slow first answer, stalls, re-buffering, the rest)");
    }
    let dimensions = config["connectors"]["spanmetrics"]["dimensions"].as_sequence().expect("spanmetrics.dimensions");
    for d in dimensions {
        let key = d["name"].as_str().unwrap();
        assert!(exported(key), "spanmetrics dimension {key} is not an attribute tokentap exports");
    }
}

fn promtool() -> PathBuf {
    let path = PathBuf::from("/usr/bin/promtool");
    let found = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join("promtool")).find(|p| p.is_file()))
        .unwrap_or(path);
    assert!(found.is_file(), "promtool not found: run scripts/setup.sh test (Debian package prometheus)");
    found
}

#[test]
fn prometheus_config_passes_promtool() {
    let path = repo_file("collector-config/prometheus.yml");
    let config: Value = serde_yaml::from_str(&read("collector-config/prometheus.yml")).expect("prometheus.yml is YAML");
    let jobs: Vec<&str> =
        config["scrape_configs"].as_sequence().unwrap().iter().filter_map(|j| j["job_name"].as_str()).collect();
    assert_eq!(jobs, ["tokentap", "otel-collector"]);
    assert_eq!(config["scrape_configs"][0]["metrics_path"], "/metrics");
    let out = Command::new(promtool()).args(["check", "config"]).arg(&path).output().expect("run promtool");
    assert!(
        out.status.success(),
        "promtool check config:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Metric names in a PromQL expression: identifiers directly followed by `{`, and the first
/// argument of `label_values(`.
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut i = 0;
    while i < bytes.len() {
        if is_ident(bytes[i]) && (i == 0 || !is_ident(bytes[i - 1])) {
            let start = i;
            while i < bytes.len() && is_ident(bytes[i]) {
                i += 1;
            }
            if bytes.get(i) == Some(&b'{') {
                out.push(expr[start..i].to_string());
            }
            continue;
        }
        i += 1;
    }
    if let Some(rest) = expr.strip_prefix("label_values(") {
        out.push(rest.split([',', ')']).next().unwrap_or("").trim().to_string());
    }
    out
}

fn collect_exprs(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

#[test]
fn dashboard_queries_metrics_tokentap_serves() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("collector-config/grafana-dashboard.json")).expect("dashboard JSON");
    let source = conventions_source();
    let families: BTreeSet<String> = source
        .lines()
        .filter_map(|l| l.trim().strip_prefix("prometheus_name: \""))
        .filter_map(|rest| rest.split('"').next().map(str::to_string))
        .collect();
    assert!(families.len() >= 10, "could not read the metric table: {families:?}");
    let mut exprs = Vec::new();
    collect_exprs(&dashboard, &mut exprs);
    assert!(exprs.len() >= 12, "{exprs:?}");
    let mut queried = BTreeSet::new();
    for expr in &exprs {
        for name in metric_names(expr) {
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|base| families.contains(*base))
                .unwrap_or(&name);
            assert!(families.contains(family), "dashboard queries {name}, which tokentap does not serve (in {expr})");
            queried.insert(family.to_string());
        }
    }
    // The key panels: TTFT percentiles, tokens/s, stalls, goodput.
    for needed in [
        "tokentap_ttft_answer_seconds",
        "tokentap_output_tps_per_second",
        "tokentap_stalls_total",
        "tokentap_requests_good_total",
    ] {
        assert!(queried.contains(needed), "no panel uses {needed}");
    }
    let titles: Vec<&str> =
        dashboard["panels"].as_array().unwrap().iter().filter_map(|p| p["title"].as_str()).collect();
    assert!(titles.iter().any(|t| t.contains("TTFT")), "{titles:?}");
}

fn seconds(duration: &str) -> u64 {
    let (number, unit) = duration.split_at(duration.find(|c: char| !c.is_ascii_digit()).unwrap_or(duration.len()));
    let n: u64 = number.parse().unwrap_or_else(|_| panic!("duration {duration:?}"));
    match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => panic!("duration {duration:?}: unit {unit:?}"),
    }
}

/// The default of a `${env:NAME:-default}` placeholder, or the value itself.
fn env_default(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => panic!("not a scalar: {other:?}"),
    };
    match text.strip_prefix("${env:").and_then(|rest| rest.strip_suffix('}')) {
        Some(inner) => inner.split_once(":-").map(|(_, d)| d.to_string()).expect("placeholder with a default"),
        None => text,
    }
}

/// tokentap's default `[turns] idle_close_s`, read from its config source.
fn turn_idle_close_s() -> u64 {
    let source = read("proxy/server/src/config/turns.rs");
    let line = source.lines().find_map(|l| l.trim().strip_prefix("idle_close_s: ")).expect("idle_close_s default");
    line.trim_end_matches(',').parse().expect("idle_close_s default is a number")
}

#[test]
fn tail_sampling_waits_for_a_whole_turn_and_remembers_its_decisions() {
    let config = collector();
    let sampling = &config["processors"]["tail_sampling"];
    let wait = seconds(&env_default(&sampling["decision_wait"]));
    // A turn's agent span leaves when the turn closes: up to idle_close_s after its last step.
    assert!(wait > turn_idle_close_s(), "decision_wait {wait} s is shorter than a turn can stay open");
    let early = seconds(sampling["decision_wait_after_root_received"].as_str().expect("decide early on a root"));
    assert!(early < wait);
    let num_traces = sampling["num_traces"].as_u64().unwrap();
    let per_second = sampling["expected_new_traces_per_sec"].as_u64().unwrap();
    assert!(num_traces >= per_second * wait, "num_traces holds the traces of one decision_wait");
    for cache in ["sampled_cache_size", "non_sampled_cache_size"] {
        let size = sampling["decision_cache"][cache].as_u64().unwrap_or(0);
        assert!(size >= 10 * num_traces, "decision_cache.{cache} {size}: late spans need decisions remembered");
    }
    // Every listen address is an environment variable with the usual port as its default.
    let listen = [
        &config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"],
        &config["receivers"]["otlp"]["protocols"]["http"]["endpoint"],
        &config["exporters"]["prometheus"]["endpoint"],
        &config["extensions"]["health_check"]["endpoint"],
    ];
    let defaults: Vec<String> = listen.iter().map(|v| env_default(v)).collect();
    assert_eq!(defaults, ["0.0.0.0:4317", "0.0.0.0:4318", "0.0.0.0:8889", "0.0.0.0:13133"]);
    assert!(listen.iter().all(|v| v.as_str().unwrap().starts_with("${env:")), "{listen:?}");
}

#[test]
fn the_load_balancing_tier_routes_spans_by_trace_id_to_the_sampling_tier() {
    let config: Value =
        serde_yaml::from_str(&read("collector-config/otelcol-loadbalancer.yaml")).expect("otelcol-loadbalancer.yaml");
    let traces = &config["service"]["pipelines"]["traces"];
    let exporters = names(&traces["exporters"]);
    assert_eq!(exporters.len(), 1, "one exporter: the router");
    let router = &config["exporters"][exporters[0].as_str()];
    assert!(exporters[0].starts_with("loadbalancing"), "{exporters:?}");
    assert_eq!(router["routing_key"], "traceID");
    assert!(!names(&traces["processors"]).iter().any(|p| p.starts_with("tail_sampling")), "tier 1 does not sample");
    let metrics = &config["service"]["pipelines"]["metrics"];
    let metric_router = &config["exporters"][names(&metrics["exporters"])[0].as_str()];
    assert_eq!(metric_router["routing_key"], "streamID", "a cumulative series stays on one replica");
    // Tier 2 is otelcol.yaml: the router speaks OTLP/gRPC to its receiver's port.
    let tier2 = env_default(&router["resolver"]["static"]["hostnames"]);
    assert!(tier2.starts_with('[') && tier2.contains(":4317"), "{tier2}");
}

/// The Collector built from collector-config/distribution/ accepts both configurations as
/// shipped, with their defaults.
#[test]
fn collector_validates_the_configs() {
    let bin = tokentap_e2e::collector::otelcol_bin();
    for file in ["otelcol.yaml", "otelcol-loadbalancer.yaml"] {
        let mut cmd = Command::new(&bin);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("OTEL_") {
                cmd.env_remove(key);
            }
        }
        let out = cmd
            .arg("validate")
            .arg(format!("--config={}", repo_file(&format!("collector-config/{file}")).display()))
            .output()
            .unwrap_or_else(|e| panic!("cannot run {bin:?}: {e}"));
        assert!(
            out.status.success(),
            "{bin:?} validate {file} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
