//! Rendering: text for people, one JSON document for programs.
//!
//! `run --format json` prints exactly one JSON document on stdout, success
//! or failure. Diagnostics go to stderr. Nothing rendered here contains a
//! credential: connection blocks are never serialized.

use crate::Format;
use crate::commands::{EXIT_CONFIG, EXIT_INTERRUPTED, EXIT_OK};
use dpone_core::Diagnostics;
use dpone_core::plan::Plan;
use dpone_core::ports::PublicationOutcome;
use dpone_core::types::{CLICKHOUSE_TO_POSTGRES, MappingRow, POSTGRES_TO_CLICKHOUSE, SQLITE_TYPES};
use dpone_engine::{RunFailure, RunReport};
use serde_json::json;
use std::path::Path;

pub enum RunOutcome {
    Succeeded(RunReport),
    Failed(RunFailure),
    Interrupted,
}

pub fn print_json(v: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(v).expect("JSON values serialize"));
}

pub fn print_diagnostics(file: &Path, diags: &Diagnostics) {
    for d in &diags.0 {
        match (d.line, d.column) {
            (Some(l), Some(c)) => eprintln!("{}:{l}:{c}: {}", file.display(), d.without_position()),
            _ => eprintln!("{}: {d}", file.display()),
        }
    }
}

pub fn print_type_matrix(format: Format) {
    let tables: [(&str, &[MappingRow]); 3] = [
        ("postgres -> clickhouse", POSTGRES_TO_CLICKHOUSE),
        ("clickhouse -> postgres", CLICKHOUSE_TO_POSTGRES),
        ("sqlite <-> canonical", SQLITE_TYPES),
    ];
    match format {
        Format::Json => print_json(&json!(tables.iter().map(|(name, rows)| json!({"mapping": name, "rows": rows})).collect::<Vec<_>>())),
        Format::Text => {
            for (name, rows) in tables {
                println!("{name}");
                let w = rows.iter().map(|r| r.from.chars().count()).max().unwrap_or(0);
                let w2 = rows.iter().map(|r| r.to.chars().count()).max().unwrap_or(0);
                for r in rows {
                    let note = if r.note.is_empty() { String::new() } else { format!("  ({})", r.note) };
                    println!("  {:w$}  ->  {:w2$}{note}", r.from, r.to);
                }
                println!();
            }
            println!("Anything not listed is refused with the column name; dpone never coerces a value.");
        }
    }
}

pub fn print_plan(plan: &Plan, format: Format) {
    if format == Format::Json {
        print_json(&serde_json::to_value(plan).expect("plans serialize"));
        return;
    }
    let r = &plan.route;
    println!("plan        {} (contract {})", plan.plan_version, plan.contract_version);
    println!("route       {}: {} -> {}", r.name, r.source_table, r.target_table);
    println!(
        "transport   {} [wire {}/{}, transport {}]",
        r.transport,
        r.wire_mode,
        r.binary_format,
        serde_json::to_value(r.transport_mode).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
    );
    println!("strategy    {}", plan.strategy);
    if let Some(w) = &plan.window {
        println!(
            "window      {} in [{}, {})  lookback {}, chunks of {}, anchor {} (UTC)",
            w.column, w.start, w.end, w.lookback, w.chunk_interval, w.anchor
        );
        println!("chunks      {} (parallelism {})", w.chunk_count, plan.staging.parallelism);
        let show = |c: &dpone_core::window::Chunk| println!("  #{:<5} [{}, {})", c.index, c.start, c.end);
        if w.chunks.len() <= 24 {
            w.chunks.iter().for_each(show);
        } else {
            w.chunks[..10].iter().for_each(show);
            println!("  ... {} more ...", w.chunks.len() - 15);
            w.chunks[w.chunks.len() - 5..].iter().for_each(show);
        }
    } else {
        println!("chunks      1 (the whole table)");
    }
    println!(
        "staging     one table per chunk attempt ({}) in {}; frames of <= {} rows / {} bytes",
        plan.staging.name_pattern, plan.staging.location, plan.staging.block_rows, plan.staging.block_bytes
    );
    println!(
        "publication {}{}: {}",
        plan.publication.method,
        if plan.publication.atomic { " (atomic)" } else { "" },
        plan.publication.description
    );
    match &plan.columns {
        Some(cols) => {
            println!("columns     {} (probed)", cols.len());
            for c in cols {
                println!("  {:<24} {:<28} <- {}", c.name, c.ty.to_string(), c.native_type);
            }
        }
        None if !plan.probed => println!("columns     not probed (--offline)"),
        None => {}
    }
    if plan.refusals.is_empty() {
        println!("refusals    none: the plan is runnable");
    } else {
        println!("refusals    {} (nothing will be written)", plan.refusals.len());
        for d in &plan.refusals {
            println!("  {d}");
        }
    }
}

/// The JSON document of a run that did not succeed; one shape for every
/// failure, whichever stage found it.
fn failure_document(
    status: &str,
    plan: Option<&Plan>,
    failure: Option<&RunFailure>,
    error_code: &str,
    errors: serde_json::Value,
) -> serde_json::Value {
    json!({
        "passed": false,
        "status": status,
        "run_id": failure.and_then(|f| f.run_id.clone()),
        "route": plan.map(|p| p.route.name.clone()),
        "publication": failure.and_then(|f| f.publication),
        "extracted_rows": 0,
        "inserted_rows": 0,
        "error_code": error_code,
        "errors": errors,
    })
}

/// A configuration error before any I/O: exit 2.
pub fn report_refusal(file: &Path, plan: Option<&Plan>, diags: &Diagnostics, format: Format) -> u8 {
    print_diagnostics(file, diags);
    if format == Format::Json {
        print_json(&failure_document("refused", plan, None, diags.first_code(), json!(diags)));
    }
    EXIT_CONFIG
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn report_run(file: &Path, plan: &Plan, outcome: &RunOutcome, format: Format) -> u8 {
    match outcome {
        RunOutcome::Succeeded(r) => {
            if format == Format::Json {
                let mut v = serde_json::to_value(r).expect("reports serialize");
                v["passed"] = json!(true);
                v["route"] = json!(plan.route.name);
                v["window"] = json!(plan.window.as_ref().map(|w| json!({"column": w.column, "start": w.start, "end": w.end})));
                v["errors"] = json!([]);
                v["error_code"] = json!(null);
                print_json(&v);
            } else {
                print_success(plan, r);
            }
            EXIT_OK
        }
        RunOutcome::Failed(f) => {
            let (exit, status) = (f.exit_code(), f.kind.status());
            if format == Format::Json {
                let errors =
                    if f.refusals.is_empty() { json!([{"code": f.code, "message": f.message, "hint": f.hint}]) } else { json!(f.refusals) };
                print_json(&json!({
                    "passed": false,
                    "status": status,
                    "run_id": f.run_id,
                    "route": plan.route.name,
                    "publication": f.publication,
                    "error_code": f.code,
                    "errors": errors,
                }));
            }
            if f.refusals.is_empty() {
                eprintln!("{f}");
            } else {
                eprintln!("refused: {} problem(s); nothing was written", f.refusals.len());
                print_diagnostics(file, &Diagnostics(f.refusals.clone()));
            }
            let visible = match f.publication {
                Some(PublicationOutcome::Published) => "the new data IS visible in the target",
                Some(PublicationOutcome::Unknown) => "whether the new data is visible is UNKNOWN: inspect before rerunning",
                _ => "the target is unchanged",
            };
            eprintln!("status: {status}; {visible}");
            exit
        }
        RunOutcome::Interrupted => {
            if format == Format::Json {
                print_json(
                    &json!({"passed": false, "status": "interrupted", "error_code": "interrupted", "errors": [{"code": "interrupted", "message": "interrupted by a signal"}]}),
                );
            }
            eprintln!("interrupted: the run stopped; run the same command again to resume");
            EXIT_INTERRUPTED
        }
    }
}

fn print_success(plan: &Plan, r: &RunReport) {
    println!("run         {} ({})", r.run_id, plan.route.name);
    if let Some(w) = &plan.window {
        let n = r.chunks.len();
        println!(
            "window      {} in [{}, {}), {n} {} of {}",
            w.column,
            w.start,
            w.end,
            if n == 1 { "chunk" } else { "chunks" },
            w.chunk_interval
        );
    }
    for c in &r.chunks {
        match (c.start, c.end) {
            (Some(s), Some(e)) => println!("  chunk {:<4} [{s}, {e})  {:>10} rows", c.index, thousands(c.rows)),
            _ => println!("  chunk {:<4} whole table  {:>10} rows", c.index, thousands(c.rows)),
        }
    }
    if let Some(w) = &plan.window {
        println!(
            "kept        {} target rows outside the window ({} of them with NULL {})",
            thousands(r.kept_rows),
            thousands(r.kept_null_window_rows),
            w.column
        );
    }
    println!(
        "published   {} rows (replacing {}); the target now holds {} rows",
        thousands(r.inserted_rows),
        thousands(r.replaced_rows),
        thousands(r.final_rows)
    );
    let check = match r.publication_check {
        dpone_core::evidence::PublicationCheck::Digest => "the published rows' digest equals the generation's",
        dpone_core::evidence::PublicationCheck::TableIdentity => "the target is now the verified generation table (same UUID)",
        dpone_core::evidence::PublicationCheck::Receipt => "the receipt naming the verified generation committed with the rows",
    };
    println!("publication {}: published; {check}", plan.publication.method);
    if r.target_unchanged {
        println!("idempotent  the window already held exactly these rows: target contents unchanged");
    } else {
        println!("changed     the window's rows differ from before this run");
    }
    println!("evidence    {}", r.evidence_path.display());
    println!("duration    {:.2} s", r.duration_seconds);
}
