//! The documents `dpone run` prints, one per process.
//!
//! Each carries the original's envelope (`manifest`, `process`, `selector`,
//! `run_id`, `passed`, `attempts`, `max_attempts`, `retry_backoff_seconds`,
//! `result{status, inserted_rows, updated_rows, final_rows,
//! extracted_rows, duration_seconds, errors, error_code}`) and, beside it,
//! the fields this runtime printed before batches existed (`status`,
//! `route`, `window`, `publication`, rows, `chunks`, `evidence_path`,
//! structured `errors`, ...). Every document has the same keys whatever
//! happened: success, failure, refusal, interruption, a process that was
//! not run, one this operation had already completed. `--format json`
//! prints them as JSON lines (one compact document per line, in the order
//! processes end); `--format md` renders the same documents as Markdown.

use dpone_core::Diagnostics;
use dpone_core::plan::Plan;
use dpone_engine::{ProcessRecord, RunFailure, RunReport};
use serde_json::{Value, json};
use std::path::Path;

/// Who the document is about, and how it was attempted.
pub struct Head<'a> {
    pub manifest: &'a Path,
    /// The process name ("" when the manifest could not be read).
    pub process: &'a str,
    pub selector: Option<&'a str>,
    /// `--run-id`, the operation's id as the caller named it.
    pub run_label: Option<&'a str>,
    pub attempts: u32,
    pub max_attempts: u32,
    pub backoff: f64,
}

/// What happened to the process.
pub enum Body<'a> {
    Succeeded(&'a RunReport),
    Failed(&'a RunFailure),
    Refused(&'a Diagnostics),
    Interrupted,
    /// Not started: the reason.
    NotRun(&'a str),
    /// Already succeeded in this operation (not run again).
    Done(&'a ProcessRecord),
}

/// The keys of every document, in order (pinned by the golden tests).
#[cfg(test)]
pub const KEYS: &[&str] = &[
    "manifest",
    "process",
    "selector",
    "run_id",
    "passed",
    "attempts",
    "max_attempts",
    "retry_backoff_seconds",
    "result",
    "status",
    "journal_run_id",
    "skipped",
    "route",
    "window",
    "publication",
    "publication_check",
    "execution",
    "resumed",
    "reused_chunks",
    "extracted_rows",
    "inserted_rows",
    "kept_rows",
    "kept_null_window_rows",
    "replaced_rows",
    "final_rows",
    "target_unchanged",
    "concurrent_rows_carried",
    "concurrent_window_rows_replaced",
    "incremental",
    "chunks",
    "delivery",
    "evidence_path",
    "duration_seconds",
    "error_code",
    "errors",
];

/// The keys of `result`.
#[cfg(test)]
pub const RESULT_KEYS: &[&str] =
    &["status", "inserted_rows", "updated_rows", "final_rows", "extracted_rows", "duration_seconds", "errors", "error_code"];

fn error_objects(body: &Body) -> Vec<Value> {
    match body {
        Body::Succeeded(_) | Body::Done(_) => Vec::new(),
        Body::Failed(f) if f.refusals.is_empty() => vec![json!({"code": f.code, "message": f.message, "hint": f.hint})],
        Body::Failed(f) => f.refusals.iter().map(|d| json!(d)).collect(),
        Body::Refused(d) => d.0.iter().map(|d| json!(d)).collect(),
        Body::Interrupted => vec![json!({"code": "interrupted", "message": "interrupted by a signal"})],
        Body::NotRun(why) => vec![json!({"code": "not_run", "message": why})],
    }
}

/// The original's `errors`: one line of text per problem.
fn error_lines(errors: &[Value]) -> Vec<String> {
    errors
        .iter()
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            let mut line = format!("{}: {}", text("code"), text("message"));
            let path = text("path");
            if !path.is_empty() {
                line.push_str(&format!(" (at {path}"));
                if let (Some(l), Some(c)) = (e["line"].as_u64(), e["column"].as_u64()) {
                    line.push_str(&format!(", line {l}, column {c}"));
                }
                line.push(')');
            }
            line
        })
        .collect()
}

/// The document of one process.
pub fn document(head: &Head, plan: Option<&Plan>, body: &Body, duration_seconds: f64) -> Value {
    let status = match body {
        Body::Succeeded(_) | Body::Done(_) => "succeeded",
        Body::Failed(f) => f.kind.status(),
        Body::Refused(_) => "refused",
        Body::Interrupted => "interrupted",
        Body::NotRun(_) => "not_run",
    };
    let errors = error_objects(body);
    let error_code = errors.first().map(|e| e["code"].clone()).unwrap_or(Value::Null);
    let summary = |key: &str| match body {
        Body::Done(rec) => rec.summary.get(key).cloned().unwrap_or(Value::Null),
        _ => Value::Null,
    };
    let journal_run_id = match body {
        Body::Succeeded(r) => json!(r.run_id),
        Body::Failed(f) => json!(f.run_id),
        Body::Done(rec) => json!(rec.run_id),
        _ => Value::Null,
    };
    let report = match body {
        Body::Succeeded(r) => Some(*r),
        _ => None,
    };
    let rows = |pick: fn(&RunReport) -> u64, key: &str| match report {
        Some(r) => json!(pick(r)),
        None => summary(key).as_u64().map(|v| json!(v)).unwrap_or(json!(0)),
    };
    let optional = |pick: fn(&RunReport) -> Value, key: &str| report.map(pick).unwrap_or_else(|| summary(key));
    let extracted = rows(|r| r.extracted_rows, "extracted_rows");
    // null: not counted (an incremental run into a target that counts only by reading every row).
    let final_rows = match report {
        Some(r) => json!(r.final_rows),
        None if matches!(body, Body::Done(rec) if rec.summary.get("final_rows").is_some_and(Value::is_null)) => Value::Null,
        None => rows(|r| r.final_rows.unwrap_or_default(), "final_rows"),
    };
    // A merge reports as the original does: the target rows its batch
    // replaced are `updated_rows`, and only the rest of its rows are
    // `inserted_rows` (a succeeded process reported again keeps both).
    let merge = plan.is_some_and(|p| p.publishes.merge_key().is_some());
    let (inserted, updated) = match report {
        Some(r) if merge => (json!(r.inserted_rows.saturating_sub(r.replaced_rows)), json!(r.replaced_rows)),
        Some(r) => (json!(r.inserted_rows), json!(0)),
        None => (rows(|r| r.inserted_rows, "inserted_rows"), summary("updated_rows").as_u64().map_or(json!(0), |v| json!(v))),
    };
    let duration = match report {
        Some(r) => r.duration_seconds,
        None => duration_seconds,
    };
    let publication = match body {
        Body::Succeeded(_) | Body::Done(_) => json!("published"),
        Body::Failed(f) => json!(f.publication),
        _ => Value::Null,
    };
    json!({
        "manifest": head.manifest,
        "process": head.process,
        "selector": head.selector,
        "run_id": head.run_label.map(|l| json!(l)).unwrap_or_else(|| journal_run_id.clone()),
        "passed": status == "succeeded",
        "attempts": head.attempts,
        "max_attempts": head.max_attempts,
        "retry_backoff_seconds": head.backoff,
        "result": {
            "status": status,
            "inserted_rows": inserted,
            "updated_rows": updated,
            "final_rows": final_rows,
            "extracted_rows": extracted,
            "duration_seconds": duration,
            "errors": error_lines(&errors),
            "error_code": error_code,
        },
        "status": status,
        "journal_run_id": journal_run_id,
        "skipped": matches!(body, Body::Done(_)),
        "route": plan.map(|p| p.route.name.clone()),
        "window": plan.and_then(|p| p.window.as_ref()).map(|w| json!({"column": w.column, "start": w.start, "end": w.end})),
        "publication": publication,
        "publication_check": optional(|r| json!(r.publication_check), "publication_check"),
        "execution": optional(|r| json!(r.execution), "execution"),
        "resumed": optional(|r| json!(r.resumed), "resumed"),
        "reused_chunks": optional(|r| json!(r.reused_chunks), "reused_chunks"),
        "extracted_rows": extracted,
        "inserted_rows": inserted,
        "kept_rows": optional(|r| json!(r.kept_rows), "kept_rows"),
        "kept_null_window_rows": optional(|r| json!(r.kept_null_window_rows), "kept_null_window_rows"),
        "replaced_rows": optional(|r| json!(r.replaced_rows), "replaced_rows"),
        "final_rows": final_rows,
        "target_unchanged": optional(|r| json!(r.target_unchanged), "target_unchanged"),
        "concurrent_rows_carried": optional(|r| json!(r.concurrent_rows_carried), "concurrent_rows_carried"),
        "concurrent_window_rows_replaced": optional(|r| json!(r.concurrent_window_rows_replaced), "concurrent_window_rows_replaced"),
        "incremental": optional(|r| json!(r.incremental), "incremental"),
        "chunks": report.map(|r| json!(r.chunks)).unwrap_or_else(|| json!([])),
        "delivery": optional(|r| json!(r.delivery), "delivery"),
        "evidence_path": optional(|r| json!(r.evidence_path), "evidence_path"),
        "duration_seconds": duration,
        "error_code": error_code,
        "errors": errors,
    })
}

/// What the operation record keeps of a succeeded process, to report it
/// again when the same operation is run again.
pub fn summary_of(doc: &Value) -> Value {
    let keys = [
        "extracted_rows",
        "inserted_rows",
        "final_rows",
        "kept_rows",
        "kept_null_window_rows",
        "replaced_rows",
        "target_unchanged",
        "concurrent_rows_carried",
        "concurrent_window_rows_replaced",
        "publication_check",
        "execution",
        "resumed",
        "reused_chunks",
        "evidence_path",
    ];
    let mut kept: serde_json::Map<String, Value> = keys.iter().map(|k| (k.to_string(), doc[*k].clone())).collect();
    kept.insert("updated_rows".into(), doc["result"]["updated_rows"].clone());
    Value::Object(kept)
}

fn md_cell(v: &Value) -> String {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    crate::output::safe(&s).replace('|', "\\|").replace('`', "'")
}

/// A process's status in Markdown: `skipped` when this invocation found
/// it already published by an earlier run of the same operation.
fn md_status(d: &Value) -> String {
    if d["skipped"] == json!(true) { "skipped".into() } else { md_cell(&d["status"]) }
}

/// The documents as Markdown: the original's layout for one process; a
/// summary table and one section per process for several.
pub fn markdown(docs: &[Value]) -> String {
    let mut out = vec!["# dpone run".to_string(), String::new()];
    if docs.len() > 1 {
        out.push(
            "| process | selector | status | passed | attempts | extracted_rows | inserted_rows | final_rows | duration_seconds |".into(),
        );
        out.push("|---|---|---|---|---|---|---|---|---|".into());
        for d in docs {
            let cells: Vec<String> =
                ["process", "selector", "status", "passed", "attempts", "extracted_rows", "inserted_rows", "final_rows"]
                    .iter()
                    .map(|k| if *k == "status" { md_status(d) } else { md_cell(&d[*k]) })
                    .chain([md_cell(&d["result"]["duration_seconds"])])
                    .collect();
            out.push(format!("| {} |", cells.join(" | ")));
        }
        out.push(String::new());
    }
    for d in docs {
        if docs.len() > 1 {
            out.push(format!("## {}", md_cell(if d["selector"].is_null() { &d["process"] } else { &d["selector"] })));
            out.push(String::new());
        }
        for (label, key) in [
            ("Manifest", "manifest"),
            ("Process", "process"),
            ("Selector", "selector"),
            ("Run ID", "run_id"),
            ("Status", "status"),
            ("Passed", "passed"),
            ("Attempts", "attempts"),
            ("Max attempts", "max_attempts"),
            ("Retry backoff seconds", "retry_backoff_seconds"),
        ] {
            let value = if key == "status" { md_status(d) } else { md_cell(&d[key]) };
            out.push(format!("- {label}: `{value}`"));
        }
        out.push(String::new());
        if d["skipped"] == json!(true) {
            // Nothing ran now: the figures are those of the run that did it.
            out.push(format!(
                "Skipped: run `{}` of this operation already published this process; nothing was read or written now. Its figures:",
                md_cell(&d["journal_run_id"])
            ));
            out.push(String::new());
        }
        out.push("| metric | value |".into());
        out.push("|---|---|".into());
        for key in ["extracted_rows", "inserted_rows", "updated_rows", "final_rows", "duration_seconds"] {
            out.push(format!("| `{key}` | `{}` |", md_cell(&d["result"][key])));
        }
        out.push(String::new());
        if let Some(errors) = d["result"]["errors"].as_array().filter(|e| !e.is_empty()) {
            out.push("Errors:".into());
            out.push(String::new());
            out.extend(errors.iter().map(|e| format!("- `{}`", md_cell(e))));
            out.push(String::new());
        }
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(v: &Value) -> Vec<&str> {
        v.as_object().expect("an object").keys().map(String::as_str).collect()
    }

    #[test]
    fn every_document_has_the_same_keys() {
        let head = Head {
            manifest: Path::new("m.yaml"),
            process: "p",
            selector: Some("public.orders"),
            run_label: Some("airflow-1"),
            attempts: 2,
            max_attempts: 3,
            backoff: 1.5,
        };
        let refused = Diagnostics::one(dpone_core::Diagnostic::new("unknown_var", "defaults.sink.table.name", "bad").at(3, 7));
        let done = ProcessRecord {
            status: "succeeded".into(),
            run_id: Some("r1".into()),
            summary: serde_json::json!({"inserted_rows": 5, "evidence_path": "e.json"}),
        };
        for body in [Body::Refused(&refused), Body::Interrupted, Body::NotRun("why"), Body::Done(&done)] {
            let d = document(&head, None, &body, 0.25);
            assert_eq!(keys(&d), KEYS);
            assert_eq!(keys(&d["result"]), RESULT_KEYS);
            assert_eq!(d["run_id"], "airflow-1", "--run-id names the operation");
            assert_eq!((d["attempts"].as_u64(), d["max_attempts"].as_u64()), (Some(2), Some(3)));
        }
        let d = document(&head, None, &Body::Refused(&refused), 0.25);
        assert_eq!(d["result"]["errors"][0], "unknown_var: bad (at defaults.sink.table.name, line 3, column 7)");
        assert_eq!(
            (d["passed"].as_bool(), d["status"].as_str(), d["error_code"].as_str()),
            (Some(false), Some("refused"), Some("unknown_var"))
        );
        let d = document(&head, None, &Body::Done(&done), 0.25);
        assert_eq!((d["passed"].as_bool(), d["skipped"].as_bool(), d["journal_run_id"].as_str()), (Some(true), Some(true), Some("r1")));
        assert_eq!((d["inserted_rows"].as_u64(), d["evidence_path"].as_str()), (Some(5), Some("e.json")));
    }

    #[test]
    fn markdown_has_one_section_per_process() {
        let head = Head {
            manifest: Path::new("m.yaml"),
            process: "p",
            selector: None,
            run_label: None,
            attempts: 1,
            max_attempts: 1,
            backoff: 0.0,
        };
        let one = document(&head, None, &Body::NotRun("x|y"), 0.0);
        let md = markdown(std::slice::from_ref(&one));
        assert!(md.starts_with("# dpone run\n\n- Manifest: `m.yaml`"), "{md}");
        assert!(md.contains("| `inserted_rows` | `0` |") && md.contains("- `not_run: x\\|y`"), "{md}");
        let two = markdown(&[one.clone(), one]);
        assert!(two.contains("| process | selector | status |") && two.matches("## p").count() == 2, "{two}");
    }
}
