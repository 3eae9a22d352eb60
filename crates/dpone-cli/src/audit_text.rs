//! `dpone audit`'s text output: a header, one line per differing row
//! (side, key values or row hash, window value; every value with
//! `--show-values`), a line per differing chunk, the incomplete segments
//! and the verdict. Values and server messages are escaped
//! (`output::safe`).

use crate::output::safe;
use dpone_core::audit::report::{AuditReport, AuditStatus};

/// `name=value` pairs of `names` and `values` (NULL as `NULL`).
fn pairs(names: &[String], values: &[Option<String>]) -> String {
    names
        .iter()
        .zip(values)
        .map(|(n, v)| format!("{}={}", safe(n), v.as_deref().map(safe).unwrap_or_else(|| "NULL".into())))
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn print(r: &AuditReport) {
    let status = match r.status {
        AuditStatus::Equal => "equal",
        AuditStatus::Different => "different",
        AuditStatus::Refused => "refused",
        AuditStatus::Unavailable => "unavailable",
    };
    if let Some(e) = &r.error {
        eprintln!("error[{}]: {}", safe(&e.code), safe(&e.message));
        if let Some(h) = &e.hint {
            eprintln!("  hint: {}", safe(h));
        }
        println!("audit {}: {status} (nothing compared)", safe(&r.route));
        return;
    }
    if let Some(w) = &r.window {
        println!(
            "audit {}: window {} [{}, {}) in {} chunks, {} columns, encoding {}",
            safe(&r.route),
            safe(&w.column),
            w.start,
            w.end,
            r.chunks.len(),
            r.columns.len(),
            r.encoding
        );
    }
    for c in r.chunks.iter().filter(|c| !c.equal) {
        println!(
            "chunk {} [{}, {}): source {} rows, target {} rows, digests differ",
            c.index, c.start, c.end, c.source.rows, c.target.rows
        );
        for d in r.differences.iter().filter(|d| d.chunk == c.index) {
            let row = &d.difference.row;
            let who = if r.key.is_empty() { format!("row_hash={}", row.hash) } else { pairs(&r.key, &row.key) };
            let window = row.window.map(|t| t.to_string()).unwrap_or_else(|| "NULL".into());
            let times = if d.difference.count > 1 { format!(" (x{})", d.difference.count) } else { String::new() };
            let side = serde_json::to_value(d.difference.side).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
            println!("  {side:<11} {who} {}={window}{times}", r.window.as_ref().map(|w| safe(&w.column).into_owned()).unwrap_or_default());
            if r.show_values {
                println!("              {}", pairs(&r.columns, &row.values));
            }
        }
        for i in r.incomplete.iter().filter(|i| i.segment.chunk == c.index) {
            println!(
                "  incomplete  [{}, {}): source {} rows, target {} rows: {}",
                i.segment.start,
                i.segment.end,
                i.source_rows,
                i.target_rows,
                safe(&i.reason)
            );
        }
    }
    let t = &r.totals;
    println!(
        "{status}: {} of {} chunks differ; {} source rows, {} target rows; {} rows only in the source, {} only in the target{} ({:.1} s)",
        t.chunks_different,
        t.chunks,
        t.source_rows,
        t.target_rows,
        t.source_only,
        t.target_only,
        if r.incomplete.is_empty() { "" } else { " (some segments compared in part, see above)" },
        r.seconds.total
    );
}
