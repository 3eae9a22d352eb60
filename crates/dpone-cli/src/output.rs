//! Rendering for people: plans, runs, diagnostics, type tables; JSON
//! helpers. The run's documents for programs are `envelope.rs`.
//! Diagnostics go to stderr. Nothing rendered here contains a credential:
//! connection blocks are never serialized.

use crate::Format;
use dpone_core::plan::Plan;
use dpone_core::ports::PublicationOutcome;
use dpone_core::{Diagnostic, Diagnostics};
use dpone_engine::{RunFailure, RunReport};
use serde_json::json;
use std::path::Path;

pub enum RunOutcome {
    Succeeded(RunReport),
    Failed(RunFailure),
}

/// Text safe for a terminal: control characters (C0 including NUL, DEL,
/// C1: escape sequences could move the cursor, recolour, retitle or hide
/// text) and Unicode's bidirectional and invisible format controls (which
/// reorder or hide what is shown) are escaped as `\u{..}` (`\n`, `\t`,
/// `\r` for those). Manifest values, file names and server messages pass
/// through here before text output; JSON output escapes them by itself.
pub fn safe(s: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char =
        |c: char| c.is_control() || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}');
    if !s.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(s);
    }
    s.chars().map(|c| if unsafe_char(c) { c.escape_default().to_string() } else { c.to_string() }).collect::<String>().into()
}

/// A diagnostic whose fields are [`safe`] for a terminal.
pub fn safe_diagnostic(d: &Diagnostic) -> Diagnostic {
    Diagnostic {
        code: safe(&d.code).into_owned(),
        path: safe(&d.path).into_owned(),
        message: safe(&d.message).into_owned(),
        hint: d.hint.as_deref().map(|h| safe(h).into_owned()),
        ..d.clone()
    }
}

pub fn print_json(v: &serde_json::Value) {
    println!("{}", serde_json::to_string_pretty(v).expect("JSON values serialize"));
}

pub fn print_diagnostics(file: &Path, diags: &Diagnostics) {
    let file = file.display().to_string();
    let file = safe(&file);
    for d in &diags.0 {
        let d = safe_diagnostic(d);
        match (d.line, d.column) {
            (Some(l), Some(c)) => eprintln!("{file}:{l}:{c}: {}", d.without_position()),
            _ => eprintln!("{file}: {d}"),
        }
    }
}

pub fn print_type_matrix(format: Format) {
    // Each target's mapping of the routes into it, as its adapter declares.
    let tables: Vec<_> = crate::registry::REGISTRY.targets.iter().filter_map(|t| t.type_matrix).map(|m| (m.mapping, m.rows)).collect();
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
    println!("route       {}: {} -> {}", r.name, safe(&r.source_table), safe(&r.target_table));
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
            safe(&w.column),
            w.start,
            w.end,
            w.lookback,
            w.chunk_interval,
            w.anchor
        );
        if w.delivery == dpone_core::delivery::Delivery::Changed {
            println!(
                "delivery    changed: a chunk whose source fingerprint ({}) and target rows equal the record of its last publication is \
                 carried from the target; every other chunk is transferred (`dpone run --delivery all` transfers all)",
                w.authority.unwrap_or("none")
            );
            println!(
                "  audit     {}: the chunks a run would carry are checked by a content digest on both servers (docs/audit.md); a \
                 chunk the target would copy to carry (not aligned with its partitions) is transferred when any other is (carry_costly)",
                w.audit
            );
            if let Some(d) = &w.decisions {
                println!("  a run now: {}", d.summary());
                for c in d.chunks.iter().filter(|c| c.decision.transfers()) {
                    println!("  chunk {:<4} [{}, {})  {}", c.index, c.start, c.end, c.decision.as_str());
                }
            }
        }
        println!("chunks      {} (parallelism {})", w.chunk_count, plan.staging.parallelism);
        let show = |c: &dpone_core::window::Chunk| println!("  #{:<5} [{}, {})", c.index, c.start, c.end);
        if w.chunks.len() <= 24 {
            w.chunks.iter().for_each(show);
        } else {
            w.chunks[..10].iter().for_each(show);
            println!("  ... {} more ...", w.chunks.len() - 15);
            w.chunks[w.chunks.len() - 5..].iter().for_each(show);
        }
    } else if let Some(inc) = &plan.incremental {
        let mark = match &inc.stored_mark {
            Some(m) => format!("{} (run {})", m.value.map(|v| v.to_string()).unwrap_or_else(|| "none".into()), safe(&m.run_id)),
            None => "none (no run published yet)".into(),
        };
        println!(
            "cursor      {}{}",
            safe(&inc.column),
            inc.initial_value.as_ref().map(|v| format!(", initial_value {}", safe(v))).unwrap_or_default()
        );
        println!("mark        {mark}");
        if let Some(key) = &inc.unique_key {
            let versions = if inc.fail_on_duplicates {
                "duplicate_policy fail: a key with more than one row in the batch fails the run"
            } else {
                "a key's row with the greatest cursor wins"
            };
            println!("unique key  {}: {versions}", safe(&key.join(", ")));
        }
        if let Some(m) = &inc.merge {
            let index =
                m.key_index.as_deref().map(safe).unwrap_or_else(|| "none: a merge scans the whole target for the batch's keys".into());
            println!("key index   {index}");
            println!("rewrites    {}", safe(&m.rewrites));
        }
        if let Some(reads) = &inc.reads {
            println!("reads       {}", safe(reads));
        }
        println!("chunks      1 (the batch above the mark)");
    } else {
        println!("chunks      1 (the whole table)");
    }
    if plan.staging.scope == "direct" {
        println!(
            "staging     none: each chunk attempt is loaded into {} inside the publishing transaction, one after another, under a savepoint of its own; frames of <= {} rows / {} bytes",
            safe(&plan.staging.location),
            plan.staging.block_rows,
            plan.staging.block_bytes
        );
        println!(
            "verified by count, NULL counts and a {} multiset digest of every chunk, read back from the target inside the transaction",
            plan.staging.digest_tag
        );
    } else {
        println!(
            "staging     one table per chunk attempt ({}) in {}; frames of <= {} rows / {} bytes",
            plan.staging.name_pattern,
            safe(&plan.staging.location),
            plan.staging.block_rows,
            plan.staging.block_bytes
        );
        println!("verified by count, NULL counts and a {} multiset digest of every staged chunk", plan.staging.digest_tag);
    }
    println!(
        "publication {}{}: {}",
        plan.publication.method,
        if plan.publication.atomic { " (atomic)" } else { "" },
        plan.publication.description
    );
    if plan.incremental.is_some() {
        println!("generation  the batch only: the target's rows are neither copied nor rewritten");
    } else if let Some(g) = &plan.generation {
        print_generation(g);
    }
    if let Some(a) = &plan.access {
        print_access(a);
    }
    match &plan.columns {
        Some(cols) => {
            println!("columns     {} (probed)", cols.len());
            for c in cols {
                // The target's type: a NOT NULL target column fed by a
                // nullable source column is not shown as Nullable.
                let ty = if plan.null_checks.contains(&c.name) {
                    let mut t = c.ty.clone();
                    t.nullable = false;
                    format!("{t} NOT NULL")
                } else {
                    c.ty.to_string()
                };
                println!("  {:<24} {:<28} <- {}", safe(&c.name), ty, safe(&c.native_type));
            }
        }
        None if !plan.probed => println!("columns     not probed (--offline)"),
        None => {}
    }
    for c in &plan.null_checks {
        println!(
            "null check  `{}` may be NULL in the source but is NOT NULL in the target: every row is checked; the first NULL fails the run naming the column (nothing coerced, nothing published)",
            safe(c)
        );
    }
    if let Some(r) = &plan.datetime64_range {
        println!("DateTime64  the target server holds {} (probed); a value outside is refused naming its column", r.text(6));
    }
    if plan.refusals.is_empty() {
        println!("refusals    none: the plan is runnable");
    } else {
        println!("refusals    {} (nothing will be written)", plan.refusals.len());
        for d in &plan.refusals {
            println!("  {}", safe_diagnostic(d));
        }
    }
}

/// How the source selects the window's rows and how the chunks are read.
fn print_access(a: &dpone_core::ports::AccessPlan) {
    let column = safe(&a.path.column);
    let path = match (&a.path.index, a.path.partitioned) {
        (Some(index), _) => format!("the window column `{column}` is indexed ({})", safe(index)),
        (None, true) => format!("the table is partitioned on the window column `{column}`"),
        (None, false) => format!("the window column `{column}` has no index and the table is not partitioned on it"),
    };
    let how = match a.read {
        dpone_core::ports::WindowRead::PerChunk => a.read.as_str().to_string(),
        dpone_core::ports::WindowRead::ScanPerGroup => {
            let plural = if a.scans == 1 { "" } else { "s" };
            format!("{} (up to {} chunks per scan, {} scan{plural})", a.read.as_str(), a.chunks_per_scan, a.scans)
        }
    };
    println!("access      {path}: {how}");
    if let Some(reason) = &a.reason {
        println!("            {}", safe(reason));
    }
}

/// What building the generation will take, in words.
fn print_generation(g: &dpone_core::ports::GenerationEstimate) {
    use dpone_core::ports::GenerationMethod;
    let bytes = |b: u64| bytes_text(b);
    match g.method {
        GenerationMethod::InPlace => println!("generation  the window is replaced in place: no row outside it is copied"),
        GenerationMethod::PartitionLinks => println!(
            "generation  {} partitions linked ({} rows, not copied), {} straddling a window bound (their kept rows copied, at most {} rows), {} replaced",
            thousands(g.partitions_linked),
            thousands(g.rows_linked),
            thousands(g.partitions_copied),
            thousands(g.rows_copied),
            thousands(g.partitions_replaced)
        ),
        GenerationMethod::FullCopy => println!("generation  full copy: at most {} rows are copied", thousands(g.rows_copied)),
    }
    if !g.reason.is_empty() {
        println!("            {}", g.reason);
    }
    if g.method != GenerationMethod::InPlace {
        let disk = match g.disk_free_bytes {
            Some(free) => format!("{} free after a reserve of {}", bytes(free), bytes(g.disk_reserve_bytes)),
            None => "free space unknown".into(),
        };
        println!(
            "            writes at most {} to the target's disk ({disk}): {} copied, {} for the staged window",
            bytes(g.bytes_to_write),
            bytes(g.bytes_copied),
            bytes(g.window_bytes_estimate)
        );
        println!("            staged window estimated from {}", g.window_estimate_text());
    }
}

fn bytes_text(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{b} B") } else { format!("{v:.1} {}", UNITS[u]) }
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

/// What a run that did not succeed says on stderr (every format): the
/// error or the refusals, and what is visible in the target.
pub fn print_failure(file: &Path, f: &RunFailure) {
    if f.refusals.is_empty() {
        eprintln!("error[{}]: {}", safe(&f.code), safe(&f.message));
        if let Some(h) = &f.hint {
            eprintln!("  hint: {}", safe(h));
        }
    } else {
        eprintln!("refused: {} problem(s); nothing was written", f.refusals.len());
        print_diagnostics(file, &Diagnostics(f.refusals.clone()));
    }
    let visible = match f.publication {
        Some(PublicationOutcome::Published) => "the new data IS visible in the target",
        Some(PublicationOutcome::Unknown) => "whether the new data is visible is UNKNOWN: inspect before rerunning",
        _ => "the target is unchanged",
    };
    eprintln!("status: {}; {visible}", f.kind.status());
}

pub fn print_interrupted() {
    eprintln!("interrupted: the run stopped; run the same command again to resume");
}

/// A succeeded run, for people.
pub fn print_success(plan: &Plan, r: &RunReport) {
    println!("run         {} ({})", r.run_id, plan.route.name);
    if let Some(w) = &plan.window {
        let n = r.chunks.len();
        println!(
            "window      {} in [{}, {}), {n} {} of {}",
            safe(&w.column),
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
    if let Some(d) = &r.delivery {
        println!("delivery    changed ({}): {}", safe(&d.authority), d.summary());
        for c in d.chunks.iter().filter(|c| c.decision.transfers()) {
            println!("  chunk {:<4} [{}, {})  {}", c.index, c.start, c.end, c.decision.as_str());
        }
    }
    if let Some(w) = &plan.window {
        println!(
            "kept        {} target rows outside the window ({} of them with NULL {})",
            thousands(r.kept_rows.unwrap_or_default()),
            thousands(r.kept_null_window_rows),
            safe(&w.column)
        );
    }
    let holds = match r.final_rows {
        Some(n) => format!("the target now holds {} rows", thousands(n)),
        // Counting would read every row of the target: a batch's cost follows the batch.
        None => "the target's rows were not counted (it counts only by reading them all)".to_string(),
    };
    println!("published   {} rows (replacing {}); {holds}", thousands(r.inserted_rows), thousands(r.replaced_rows));
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
    println!("evidence    {}", safe(&r.evidence_path.display().to_string()));
    println!("duration    {:.2} s", r.duration_seconds);
}
