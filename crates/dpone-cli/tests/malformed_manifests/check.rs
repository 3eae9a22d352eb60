//! Running a case in a sandbox and the checks every configuration error
//! must pass.

use super::doc::{Doc, SECRET};
use crate::common::Run;
use std::path::{Path, PathBuf};

/// A manifest folder and an (empty) folder the manifest's databases point into.
pub struct Sandbox {
    _root: tempfile::TempDir,
    pub manifest_dir: PathBuf,
    db_dir: PathBuf,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let root = tempfile::tempdir().expect("temp dir");
        let manifest_dir = root.path().join("manifest");
        let db_dir = root.path().join("db");
        std::fs::create_dir(&manifest_dir).expect("manifest dir");
        std::fs::create_dir(&db_dir).expect("db dir");
        Sandbox { _root: root, manifest_dir, db_dir }
    }

    /// Writes the manifest (with `{DB}` pointing at the empty folder).
    pub fn write(&self, doc: &Doc) -> PathBuf {
        let path = self.manifest_dir.join("manifest.yaml");
        std::fs::write(&path, doc.0.replace("{DB}", &self.db_dir.display().to_string())).expect("write manifest");
        path
    }

    pub fn missing_manifest(&self) -> PathBuf {
        self.manifest_dir.join("no-such-manifest.yaml")
    }

    /// Problems if any file appeared: no database, work dir or evidence may be created.
    pub fn untouched(&self, manifest: &Path) -> Vec<String> {
        let mut problems = Vec::new();
        let created: Vec<String> = list(&self.db_dir);
        if !created.is_empty() {
            problems.push(format!("expected the database folder to stay empty (no I/O), but it now holds {created:?}"));
        }
        let expected: Vec<String> = manifest.exists().then(|| "manifest.yaml".to_string()).into_iter().collect();
        let beside = list(&self.manifest_dir);
        if beside != expected {
            problems.push(format!("expected only {expected:?} in the manifest folder, found {beside:?}"));
        }
        problems
    }
}

fn list(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).expect("read dir").map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// Problems common to every configuration error: exit 2, code and file
/// named on stderr, no panic, no secret.
pub fn common_problems(run: &Run, file: &Path, code: &str, path: &str) -> Vec<String> {
    let mut p = Vec::new();
    if run.code != Some(2) {
        p.push(format!("expected exit code 2 (configuration error), got {:?}", run.code));
    }
    if !run.stderr.contains(&format!("error[{code}]")) {
        p.push(format!("expected stderr to contain `error[{code}]`"));
    }
    if !run.stderr.contains(&file.display().to_string()) {
        p.push(format!("expected stderr to name the manifest file {}", file.display()));
    }
    if !path.is_empty()
        && !run.stderr.contains(&format!("error[{code}] at {path} "))
        && !run.stderr.contains(&format!("error[{code}] at {path}:"))
    {
        p.push(format!("expected stderr to show `error[{code}] at {path}`"));
    }
    if let Some(problem) = run.panic_problem() {
        p.push(problem);
    }
    if run.stdout.contains(SECRET) || run.stderr.contains(SECRET) {
        p.push("a connection password was printed".to_string());
    }
    p
}

/// `run --format json`: one refusal document whose first error is `code` at `path`.
pub fn json_refusal_problems(run: &Run, code: &str, path: &str) -> Vec<String> {
    let doc = match run.single_json() {
        Ok(doc) => doc,
        Err(e) => return vec![e],
    };
    let mut p = Vec::new();
    if doc["passed"] != serde_json::json!(false) {
        p.push(format!("expected JSON `passed: false`, got {}", doc["passed"]));
    }
    if doc["status"] != "refused" {
        p.push(format!("expected JSON `status: \"refused\"`, got {}", doc["status"]));
    }
    if doc["error_code"] != code {
        p.push(format!("expected JSON `error_code: \"{code}\"`, got {}", doc["error_code"]));
    }
    if doc["errors"][0]["path"] != path {
        p.push(format!("expected the first JSON error's path to be \"{path}\", got {}", doc["errors"][0]["path"]));
    }
    p
}

/// `manifest validate`: a `file:LINE:COL: error[code]` line, on the marked line if any.
pub fn position_problems(run: &Run, file: &Path, code: &str, marked_line: Option<u64>) -> Vec<String> {
    let prefix = format!("{}:", file.display());
    let positions: Vec<(u64, u64)> = run
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let mut parts = rest.splitn(3, ':');
            let line = parts.next()?.parse().ok()?;
            let column = parts.next()?.parse().ok()?;
            parts.next()?.trim_start().starts_with(&format!("error[{code}]")).then_some((line, column))
        })
        .collect();
    match (positions.first(), marked_line) {
        (None, _) => vec![format!("expected a `{}LINE:COL: error[{code}]` line on stderr", prefix)],
        (Some((line, _)), Some(want)) if *line != want => {
            vec![format!("expected the diagnostic at line {want} (the edited line), but it is reported at line {line}")]
        }
        _ => Vec::new(),
    }
}

pub fn report(failures: &mut Vec<String>, name: &str, run: &Run, problems: Vec<String>) {
    if !problems.is_empty() {
        failures.push(format!("case `{name}`: {}\n  - {}\n{}", run.args.join(" "), problems.join("\n  - "), run.describe()));
    }
}

pub fn env_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// `run --format json` of a batch manifest: one refusal document per
/// process refused (or one for the whole file), the others `not_run`;
/// every one `passed: false`, the first refusal naming `code` at `path`.
pub fn batch_json_problems(run: &Run, code: &str, path: &str) -> Vec<String> {
    let docs: Vec<serde_json::Value> = match serde_json::Deserializer::from_str(&run.stdout).into_iter().collect() {
        Ok(d) => d,
        Err(e) => return vec![format!("stdout is not JSON lines: {e}")],
    };
    let mut p = Vec::new();
    if docs.is_empty() {
        p.push("expected at least one JSON document".to_string());
    }
    if docs.iter().any(|d| d["passed"] != serde_json::json!(false) || !["refused", "not_run"].contains(&d["status"].as_str().unwrap_or("")))
    {
        p.push("expected every document to be `passed: false`, refused or not_run".to_string());
    }
    match docs.iter().find(|d| d["status"] == "refused") {
        Some(d) if d["error_code"] == code && d["errors"][0]["path"] == path => {}
        Some(d) => {
            p.push(format!("expected the first refusal to be `{code}` at `{path}`, got {} at {}", d["error_code"], d["errors"][0]["path"]))
        }
        None => p.push("expected a refused document".to_string()),
    }
    p
}
