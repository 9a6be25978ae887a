//! Tidy checks over the workspace's own sources and manifests (in the spirit of
//! rust-analyzer's), for what clippy cannot check (its rules are in clippy.toml): every
//! member `cargo metadata` lists keeps to what ARCHITECTURE.md's crate table says it must
//! not depend on (runtime, transport, storage, clock); the replicated state machine
//! and the scheduler import no randomly seeded map; every `unsafe` says why it is sound; every module says what it is; every crate
//! uses the workspace lints and every dependency it declares; nothing stray sits at the
//! root.

use gsched_tests::workspace;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every workspace member as `cargo metadata` lists it: package name and folder (relative
/// to the workspace root).
fn members() -> Vec<(String, String)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .current_dir(workspace())
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let root = workspace();
    meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let manifest = PathBuf::from(p["manifest_path"].as_str().expect("manifest_path"));
            let dir = manifest
                .parent()
                .expect("a folder")
                .strip_prefix(&root)
                .expect("in the workspace");
            (
                p["name"].as_str().expect("name").to_string(),
                dir.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

/// ARCHITECTURE.md's crate table: each crate's folder and what it must not depend on
/// ("clock" means reading the wall or monotonic clock; "tonic" the whole HTTP/2 stack).
fn must_not_depend_on() -> Vec<(String, String, Vec<String>)> {
    read(&workspace().join("ARCHITECTURE.md"))
        .lines()
        .filter(|l| l.starts_with("| `gsched-"))
        .map(|l| {
            let cells: Vec<&str> = l
                .split(" | ")
                .map(|c| c.trim_matches(['|', ' ', '`']))
                .collect();
            let banned = cells
                .last()
                .unwrap()
                .split(", ")
                .filter(|w| *w != "—" && !w.is_empty())
                .map(str::to_string)
                .collect();
            (cells[0].to_string(), cells[1].to_string(), banned)
        })
        .collect()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The crate's own sources: src/, tests/, benches/, examples/, support/ and build.rs.
fn crate_sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for sub in ["src", "tests", "benches", "examples", "support"] {
        files.extend(rust_files(&dir.join(sub)));
    }
    if dir.join("build.rs").exists() {
        files.push(dir.join("build.rs"));
    }
    files
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Lines of code before a file's test module, `//` comment lines left out (a tidy check,
/// not a parser: the patterns it looks for do not occur in strings).
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    code.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, l))
}

#[test]
fn every_crate_keeps_to_what_architecture_md_says_it_must_not_depend_on() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let rows = must_not_depend_on();
    let members = members();
    for (name, dir) in &members {
        assert!(
            rows.iter().any(|(n, d, _)| n == name && d == dir),
            "{name} ({dir}) has no row in ARCHITECTURE.md's crate table"
        );
    }
    for (package, dir, banned) in rows.iter().filter(|(_, _, b)| !b.is_empty()) {
        assert!(
            members.iter().any(|(n, _)| n == package),
            "ARCHITECTURE.md names {package}, which is not a workspace member"
        );
        let out = Command::new(&cargo)
            .args([
                "tree",
                "--offline",
                "--locked",
                "-e",
                "normal",
                "--prefix",
                "none",
                "--format",
                "{p}",
                "-p",
                package,
            ])
            .current_dir(workspace())
            .output()
            .expect("run cargo tree");
        assert!(
            out.status.success(),
            "cargo tree -p {package}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let tree = String::from_utf8_lossy(&out.stdout);
        let names: BTreeSet<&str> = tree
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        for word in banned.iter().filter(|w| *w != "clock") {
            let family: &[&str] = match word.as_str() {
                "tonic" => &["tonic", "hyper", "h2", "axum"],
                other => &[other][..],
            };
            for banned in family {
                assert!(
                    !names.contains(banned),
                    "{package} depends on {banned}, which ARCHITECTURE.md rules out (normal dependencies: {names:?})"
                );
            }
        }
        if !banned.iter().any(|w| w == "clock") {
            continue;
        }
        for file in rust_files(&workspace().join(dir).join("src")) {
            for (n, line) in code_lines(&read(&file)) {
                for clock in ["SystemTime::now", "Instant::now", "UNIX_EPOCH"] {
                    assert!(
                        !line.contains(clock),
                        "{}:{n} reads the clock ({clock}) in a crate that must not",
                        file.display()
                    );
                }
            }
        }
    }
}

/// Every path a file's `use` declarations import, grouped imports expanded
/// (`use std::collections::{BTreeMap, HashMap as Map};` gives `std::collections::BTreeMap`
/// and `std::collections::HashMap`), with the line each declaration starts on.
fn imported_paths(text: &str) -> Vec<(usize, String)> {
    fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
        let tree = tree.trim();
        let Some(open) = tree.find('{') else {
            let name = tree.split(" as ").next().unwrap_or(tree).trim();
            if !name.is_empty() {
                out.push(format!("{prefix}{name}"));
            }
            return;
        };
        let head = &tree[..open];
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let mut depth = 0;
        let mut part = String::new();
        for c in inner.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&format!("{prefix}{head}"), &part, out);
                    part.clear();
                    continue;
                }
                _ => {}
            }
            part.push(c);
        }
        expand(&format!("{prefix}{head}"), &part, out);
    }
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut out = Vec::new();
    let mut lines = code.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        let t = line.trim_start();
        let t = t.strip_prefix("pub ").unwrap_or(t);
        let Some(rest) = t.strip_prefix("use ") else {
            continue;
        };
        let mut decl = rest.to_string();
        while !decl.contains(';') {
            let Some((_, next)) = lines.next() else { break };
            decl.push_str(next);
        }
        let decl: String = decl
            .split(';')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let mut paths = Vec::new();
        expand(
            "",
            &decl.replace(" :: ", "::").replace(":: ", "::"),
            &mut paths,
        );
        out.extend(paths.into_iter().map(|p| (i + 1, p.replace(' ', ""))));
    }
    out
}

#[test]
fn imports_are_read_whole_grouped_and_nested() {
    let text = "use std::collections::{BTreeMap, HashMap as Map};\nuse std::{\n    sync::{Arc, Mutex},\n    io,\n};\n";
    let paths: Vec<String> = imported_paths(text).into_iter().map(|(_, p)| p).collect();
    assert_eq!(
        paths,
        [
            "std::collections::BTreeMap",
            "std::collections::HashMap",
            "std::sync::Arc",
            "std::sync::Mutex",
            "std::io"
        ]
    );
}

#[test]
fn replicated_state_uses_no_seeded_maps() {
    // Fx maps hash with a fixed seed (same order on every replica); std's are randomly
    // seeded per map, so iterating one makes results differ. (Platform math in the state
    // machine and std's poisoning locks are clippy's to refuse: clippy.toml.)
    let state = workspace().join("controller/state/src");
    let scheduler = workspace().join("controller/scheduler/src");
    let mut files = rust_files(&state);
    files.extend(rust_files(&scheduler));
    let banned = ["std::collections::HashMap", "std::collections::HashSet"];
    for file in files {
        let text = read(&file);
        for (n, path) in imported_paths(&text) {
            assert!(
                !banned.contains(&path.as_str()),
                "{}:{n}: {path} (use BTreeMap/BTreeSet or an Fx map)",
                file.display()
            );
        }
        for (n, line) in code_lines(&text) {
            for map in banned {
                assert!(
                    !line.contains(map),
                    "{}:{n}: {map} (use BTreeMap/BTreeSet or an Fx map)",
                    file.display()
                );
            }
        }
    }
    // The decay the state machine uses is the table one.
    let jobs = read(&state.join("machine/jobs.rs"));
    assert!(jobs.contains("use gsched_scheduler::decay::decay;"));
    let decay = read(&scheduler.join("decay.rs"));
    assert!(!code_lines(&decay).any(|(_, l)| l.contains(".exp(")));
}

#[test]
fn the_rules_clippy_enforces_stay_configured() {
    // clippy.toml replaces, not extends, the workspace's for the crate it sits in.
    let workspace_rules = read(&workspace().join("clippy.toml"));
    // The crates whose results replicas and followers must agree on bit for bit: the
    // state machine, and the scheduler (followers estimate start times with it).
    let agreeing: Vec<String> = ["controller/state", "controller/scheduler"]
        .iter()
        .map(|d| read(&workspace().join(d).join("clippy.toml")))
        .collect();
    for rules in std::iter::once(&workspace_rules).chain(&agreeing) {
        for path in ["std::env::args", "std::sync::Mutex", "std::sync::RwLock"] {
            assert!(rules.contains(&format!("path = \"{path}\"")), "{path}");
        }
    }
    for rules in &agreeing {
        for f in ["exp", "powf", "powi", "ln", "log2", "log10", "sqrt"] {
            assert!(rules.contains(&format!("path = \"f64::{f}\"")), "f64::{f}");
        }
    }
}

#[test]
fn every_unsafe_says_why_it_is_sound() {
    let mut missing = Vec::new();
    for (_, member) in &members() {
        // This file names the patterns it looks for.
        for file in crate_sources(&workspace().join(member))
            .into_iter()
            .filter(|f| !f.ends_with("tidy.rs"))
        {
            let text = read(&file);
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                let is_unsafe = code.contains("unsafe {")
                    || code.contains("unsafe fn")
                    || code.contains("unsafe impl")
                    || code.trim_end().ends_with("unsafe");
                if !is_unsafe || code.contains("unsafe_op_in_unsafe_fn") {
                    continue;
                }
                let above = lines[i.saturating_sub(6)..i].join("\n");
                if !above.contains("SAFETY:") && !line.contains("SAFETY:") {
                    missing.push(format!("{}:{}", file.display(), i + 1));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "unsafe without a `// SAFETY:` comment: {missing:#?}"
    );
}

#[test]
fn every_module_says_what_it_is() {
    let mut missing = Vec::new();
    for (_, member) in &members() {
        for file in crate_sources(&workspace().join(member)) {
            let text = read(&file);
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            if !first.starts_with("//!") {
                missing.push(file.display().to_string());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "files without a `//!` line: {missing:#?}"
    );
}

/// The dependency names a manifest section declares.
fn declared(manifest: &str, section: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            inside = t == format!("[{section}]");
            continue;
        }
        if inside
            && let Some((name, _)) = t.split_once('=')
            && !t.starts_with('#')
        {
            out.push(name.trim().split('.').next().unwrap_or("").to_string());
        }
    }
    out
}

#[test]
fn every_crate_uses_the_workspace_lints_and_every_dependency_it_declares() {
    // Used only by code a build script generates.
    let generated = [("proto", "prost"), ("proto", "tonic-prost")];
    let mut problems = Vec::new();
    for (_, member) in &members() {
        let dir = workspace().join(member);
        let manifest = read(&dir.join("Cargo.toml"));
        if !manifest.contains("[lints]\nworkspace = true") {
            problems.push(format!("{member}: no `[lints] workspace = true`"));
        }
        let sources: String = crate_sources(&dir)
            .iter()
            .map(|f| read(f))
            .collect::<Vec<_>>()
            .join("\n");
        for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
            for dep in declared(&manifest, section) {
                let ident = dep.replace('-', "_");
                let used = [
                    format!("{ident}::"),
                    format!("use {ident}"),
                    format!("extern crate {ident}"),
                    format!("{ident}!"),
                    format!("#[{ident}"),
                    format!("{ident}::{{"),
                ]
                .iter()
                .any(|p| sources.contains(p.as_str()));
                if !used && !generated.contains(&(member.as_str(), dep.as_str())) {
                    problems.push(format!("{member}: [{section}] {dep} is never used"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn nothing_stray_is_committed_at_the_root() {
    let out = Command::new("git")
        .args(["ls-files"])
        .current_dir(workspace())
        .output()
        .expect("run git ls-files");
    assert!(out.status.success(), "git ls-files failed");
    let stray: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|f| !f.contains('/'))
        .filter(|f| {
            [".log", ".out", ".tmp", ".swp"]
                .iter()
                .any(|x| f.ends_with(x))
        })
        .map(str::to_string)
        .collect();
    assert!(stray.is_empty(), "stray files at the root: {stray:?}");
}
