//! Commands the documentation tells a reader to run parse: every `cargo run … -p tokentap-mock --
//! ARGS` and `-p tokentap -- ARGS` in a README is given to the binary with `--help` appended
//! (clap rejects an unknown flag before it prints help).

use std::path::{Path, PathBuf};
use std::process::Command;

use tokentap_e2e::browser::repo_root;
use tokentap_e2e::process::bin;

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().map_while(Result::ok) {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                markdown_files(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// `(binary, args)` of every `cargo run … -p BINARY -- ARGS` in `text`; ARGS end at `&`, `#`, `|`, `\`,
/// a backquote or the end of the line.
fn cargo_runs(text: &str) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    for line in text.lines() {
        let Some(start) = line.find("cargo run") else { continue };
        let rest = &line[start..];
        let Some(package) = rest.split_whitespace().skip_while(|w| *w != "-p").nth(1) else { continue };
        let Some((_, args)) = rest.split_once(" -- ") else { continue };
        // Inline code ends at its closing backquote.
        let args = args.split('`').next().unwrap_or("");
        let args: Vec<String> =
            args.split_whitespace().take_while(|w| !["&", "#", "|", "\\"].contains(w)).map(str::to_string).collect();
        if package == "tokentap-mock" || package == "tokentap" {
            found.push((package.to_string(), args));
        }
    }
    found
}

#[test]
fn documented_mock_and_tokentap_commands_parse() {
    let mut files = Vec::new();
    markdown_files(&repo_root(), &mut files);
    let mut checked = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (binary, args) in cargo_runs(&text) {
            // Files named in the command (configs, records) need not exist for `--help`.
            let out = Command::new(bin(&binary)).args(&args).arg("--help").output().unwrap();
            assert!(
                out.status.success(),
                "{}: `{binary} {}` does not parse:\n{}",
                file.display(),
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
            checked += 1;
        }
    }
    assert!(checked >= 4, "only {checked} documented commands found");
}

/// `tokentap --help` ends with examples, and each one parses.
#[test]
fn help_shows_examples_that_parse() {
    let out = Command::new(bin("tokentap")).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let examples = help.split("Examples:").nth(1).unwrap_or_else(|| panic!("no examples in --help:\n{help}"));
    let mut checked = 0;
    for line in examples.lines().filter(|l| l.trim_start().starts_with("tokentap ")) {
        let command = line.split('#').next().unwrap();
        let args: Vec<&str> = command.split_whitespace().skip(1).filter(|a| *a != "--help").collect();
        let out = Command::new(bin("tokentap")).args(&args).arg("--help").output().unwrap();
        assert!(out.status.success(), "`{command}` does not parse:\n{}", String::from_utf8_lossy(&out.stderr));
        checked += 1;
    }
    assert!(checked >= 3, "{help}");
}
