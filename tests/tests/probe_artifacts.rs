//! The browser probe artifacts committed in proxy/server/assets/probe/ (embedded in tokentap) are what
//! the sources build to, fit the size budget, and are what tokentap serves.

use std::path::Path;
use std::process::Command;

use tokentap_e2e::browser::repo_root;
use tokentap_e2e::{http1, Mock, Tokentap};

const ARTIFACTS: [(&str, &str); 3] = [
    ("probe.js", "text/javascript"),
    ("tokentap_probe.js", "text/javascript"),
    ("tokentap_probe_bg.wasm", "application/wasm"),
];
/// wasm + JS glue, gzipped (64 KiB until the WebRTC peer connection watch added 8.3 KB:
/// browser-probe/README.md, "Size").
const BUDGET_GZIP_BYTES: usize = 77 * 1024;

fn committed(name: &str) -> Vec<u8> {
    let path = repo_root().join("proxy/server/assets/probe").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (run scripts/build-probe.sh)", path.display()))
}

fn gzip_len(path: &Path) -> usize {
    let out = Command::new("gzip").args(["-9", "-n", "-c"]).arg(path).output().expect("gzip");
    assert!(out.status.success());
    out.stdout.len()
}

#[test]
fn committed_probe_matches_a_fresh_build() {
    let out_dir = tempfile::tempdir().unwrap();
    let build = Command::new(repo_root().join("scripts/build-probe.sh"))
        .arg("--out-dir")
        .arg(out_dir.path())
        .output()
        .expect("run scripts/build-probe.sh");
    assert!(
        build.status.success(),
        "scripts/build-probe.sh failed (scripts/setup.sh probe installs its toolchain):\n{}{}",
        String::from_utf8_lossy(&build.stdout),
        String::from_utf8_lossy(&build.stderr)
    );
    for (name, _) in ARTIFACTS {
        let fresh = std::fs::read(out_dir.path().join(name)).unwrap();
        assert!(
            fresh == committed(name),
            "proxy/server/assets/probe/{name} is stale ({} bytes committed, {} bytes built): run scripts/build-probe.sh and commit the result",
            committed(name).len(),
            fresh.len()
        );
    }
}

#[test]
fn probe_fits_the_size_budget() {
    let dir = repo_root().join("proxy/server/assets/probe");
    let sizes: Vec<(&str, usize, usize)> =
        ARTIFACTS.iter().map(|(name, _)| (*name, committed(name).len(), gzip_len(&dir.join(name)))).collect();
    let total: usize = sizes.iter().map(|s| s.2).sum();
    assert!(
        total <= BUDGET_GZIP_BYTES,
        "probe is {total} bytes gzipped, over the {BUDGET_GZIP_BYTES} budget: {sizes:?}"
    );
    eprintln!("probe size (name, raw, gzip): {sizes:?}; total {total} bytes gzipped");
}

#[test]
fn tokentap_serves_the_committed_probe() {
    let mock = Mock::start(&[]);
    let tokentap = Tokentap::start(&mock.url, &[]);
    for (name, content_type) in ARTIFACTS {
        let resp = http1::get(tokentap.addr, &format!("/_tokentap/probe/{name}"), &[]);
        assert_eq!(resp.status, 200, "/_tokentap/probe/{name}");
        let served_type = resp.header("content-type").unwrap_or_default();
        assert!(served_type.starts_with(content_type), "{name}: content-type {served_type}");
        assert!(
            resp.body[..] == committed(name)[..],
            "tokentap serves a different {name} than proxy/server/assets/probe/ (rebuild tokentap)"
        );
    }
}

/// The npm package folder (browser-probe/npm/) holds tokentap's build byte for byte
/// (`scripts/setup.sh test` copies it in), its package.json names the entry, the types and the
/// wasm, and its types declare exactly the functions the module exports.
#[test]
fn npm_package_is_the_embedded_build_with_types_for_every_export() {
    let package = repo_root().join("browser-probe/npm");
    for (name, _) in ARTIFACTS {
        let packaged = std::fs::read(package.join(name)).unwrap_or_else(|e| {
            panic!("browser-probe/npm/{name}: {e} (scripts/setup.sh test, or scripts/build-probe.sh --package-only)")
        });
        assert!(
            packaged == committed(name),
            "browser-probe/npm/{name} is not proxy/server/assets/probe/{name}: run scripts/build-probe.sh --package-only"
        );
    }
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(package.join("package.json")).unwrap()).expect("package.json");
    assert_eq!(manifest["type"], "module");
    assert_eq!(manifest["exports"]["."]["default"], "./probe.js");
    assert_eq!(manifest["exports"]["."]["types"], "./probe.d.ts");
    let files: Vec<&str> = manifest["files"].as_array().unwrap().iter().filter_map(|f| f.as_str()).collect();
    for name in ["probe.js", "probe.d.ts", "tokentap_probe.js", "tokentap_probe_bg.wasm"] {
        assert!(files.contains(&name), "package.json files lacks {name}: {files:?}");
    }
    // `export function NAME` / `export async function NAME`, in order of appearance.
    let exported = |text: &str| -> Vec<String> {
        let mut names: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("export "))
            .map(|l| l.strip_prefix("async ").unwrap_or(l))
            .filter_map(|l| l.strip_prefix("function "))
            .map(|l| l.split(['(', '<']).next().unwrap_or("").trim().to_string())
            .collect();
        names.sort();
        names
    };
    let js = exported(&String::from_utf8(committed("probe.js")).unwrap());
    let types = exported(&std::fs::read_to_string(package.join("probe.d.ts")).unwrap());
    assert!(js.len() >= 8, "{js:?}");
    assert_eq!(js, types, "probe.d.ts declares other functions than probe.js exports");
}
