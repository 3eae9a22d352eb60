//! `dpone status` and `dpone resolve`: what the journal says about a
//! target, what is visible, and what the operator does next. Both read the
//! manifest's state store, so with a shared store (PostgreSQL) they work
//! from any host that reaches it; the evidence is read from the store.

use crate::Format;
use crate::adapters::AnyTarget;
use crate::commands::{EXIT_CONFIG, EXIT_OK};
use crate::output::{print_diagnostics, print_json};
use crate::state::StoreChoice;
use dpone_core::Diagnostics;
use dpone_core::incremental::{StoredMark, receipt_identity};
use dpone_core::manifest::Manifest;
use dpone_core::ports::Target;
use dpone_core::state::{ChunkState, RunJournal, RunState, StateStore};
use serde_json::json;
use std::path::Path;

/// What is visible in the target, and what to do, for each state.
pub fn explain(state: RunState) -> (&'static str, &'static str) {
    match state {
        RunState::Planned => ("the previous target (nothing staged yet)", "run the same command again; it continues"),
        RunState::Staging => (
            "the previous target; some chunks are staged",
            "run the same command again: verified chunks are reused if the source version is unchanged, else the window is re-extracted",
        ),
        RunState::Verified => (
            "the previous target; every chunk is staged and verified (stage complete)",
            "run the same command again: it publishes from the verified staging without reading the source",
        ),
        RunState::Publishing => (
            "unknown until reconciled: the publication may or may not have happened",
            "run the same command again: dpone compares the target's identity with the recorded intent and finishes or publishes once",
        ),
        RunState::Published => (
            "the NEW data (published; evidence not yet written)",
            "run the same command again to write the evidence; the source is not read",
        ),
        RunState::EvidenceComplete => {
            ("the NEW data (evidence written)", "run the same command again to record success; the source is not read")
        }
        RunState::Succeeded => ("the NEW data", "nothing: the run succeeded"),
        RunState::Failed => ("the previous target (the run failed before publishing)", "fix the cause shown below and run again"),
        RunState::OutcomeUnknown => (
            "UNKNOWN: the publication may or may not have taken effect",
            "stop writers; compare the target with the run's generation (docs/recovery.md), then `dpone resolve --outcome published|absent`",
        ),
    }
}

/// Why a journal could not be picked.
enum Lookup {
    Unreadable(String),
    /// The `--run-id` prefix names several runs: their ids.
    Ambiguous(Vec<String>),
}

/// The target's current journal, or the one of the run `run_id` names (a
/// prefix is enough when it names one run: the current journal if it is
/// that run, else its latest execution in the target's history).
fn find_journal(store: &dyn StateStore, scope: &str, run_id: Option<&str>) -> Result<Option<RunJournal>, Lookup> {
    let current = dpone_engine::read_journal(store, scope).map_err(|e| Lookup::Unreadable(e.message))?.map(|(_, j)| j);
    let Some(wanted) = run_id else { return Ok(current) };
    let mut matches: Vec<RunJournal> = current.into_iter().filter(|j| j.run_id.starts_with(wanted)).collect();
    let current_matched = !matches.is_empty();
    // History keys are `history/<this target's invocation>/<run id>-<execution>`.
    let invocation = dpone_engine::journal_key(scope)["run/".len()..].to_string();
    let unreadable = |e: String| Lookup::Unreadable(e);
    for key in store.keys(&format!("history/{invocation}/")).map_err(|e| unreadable(e.to_string()))? {
        if key.split('/').nth(2).is_some_and(|k| k.starts_with(wanted))
            && let Some(v) = store.get(&key).map_err(|e| unreadable(e.to_string()))?
        {
            matches.push(serde_json::from_str(&v.body).map_err(|e: serde_json::Error| unreadable(e.to_string()))?);
        }
    }
    let mut ids: Vec<String> = matches.iter().map(|j| j.run_id.clone()).collect();
    ids.sort();
    ids.dedup();
    if ids.len() > 1 {
        return Err(Lookup::Ambiguous(ids));
    }
    // One run: the current journal (listed first) is its latest state;
    // else its latest execution in the history.
    if current_matched {
        return Ok(matches.into_iter().next());
    }
    Ok(matches.into_iter().max_by_key(|j| j.execution))
}

/// An `incremental_append` target's stored mark, as `status` shows it
/// (read from the target, where the publication wrote it).
struct MarkView {
    column: String,
    mark: Result<Option<StoredMark>, String>,
    /// The latest `dpone state reset` journaled for the target.
    last_reset: Option<dpone_engine::MarkReset>,
}

impl MarkView {
    fn read(manifest: &Manifest, target: &AnyTarget) -> Option<MarkView> {
        let (column, _) = manifest.incremental()?;
        let mark = crate::commands::runtime().block_on(target.peek_mark()).map_err(|e| format!("[{}] {}", e.code, e.message));
        Some(MarkView { column: column.to_string(), mark, last_reset: None })
    }

    fn with_resets(mut self, store: &dyn StateStore, scope: &str) -> MarkView {
        self.last_reset = dpone_engine::mark_resets(store, scope).ok().and_then(|mut all| all.pop());
        self
    }

    fn json(&self) -> serde_json::Value {
        let mut v = match &self.mark {
            Ok(m) => json!({"column": self.column, "stored_mark": m}),
            Err(e) => json!({"column": self.column, "error": e}),
        };
        if let Some(r) = &self.last_reset {
            v["last_reset"] = json!({"operator": r.operator, "reason": r.reason, "at": r.at, "state": r.state,
                "before": receipt_identity(r.before.as_ref()), "after": receipt_identity(r.after.as_ref())});
        }
        v
    }

    fn print(&self) {
        let text = match &self.mark {
            Ok(Some(m)) => {
                format!("{} = {} (published by {})", m.column, m.value.map(|v| v.to_string()).unwrap_or_else(|| "none".into()), m.run_id)
            }
            Ok(None) => format!("none for {}: the next run reads from the start", self.column),
            Err(e) => format!("unreadable: {e}"),
        };
        println!("mark        {}", crate::output::safe(&text));
        if let Some(r) = &self.last_reset {
            let text = format!(
                "{} by {} at {} ({}): {} -> {}",
                r.state,
                r.operator,
                r.at,
                r.reason,
                receipt_identity(r.before.as_ref()),
                receipt_identity(r.after.as_ref())
            );
            println!("last reset  {}", crate::output::safe(&text));
        }
    }
}

pub fn status(path: &Path, selector: Option<&str>, run_id: Option<&str>, format: Format) -> u8 {
    let (manifest, target, choice) = match crate::commands::prepare_for_status(path, selector) {
        Ok(v) => v,
        Err(d) => {
            print_diagnostics(path, &d);
            return EXIT_CONFIG;
        }
    };
    let mark = MarkView::read(&manifest, &target);
    let scope = target.scope();
    let store = match choice.open(false) {
        Ok(Some(s)) => s,
        Ok(None) => {
            report_none(&scope, &choice, format, mark.as_ref());
            return EXIT_OK;
        }
        Err(e) => {
            eprintln!("error[{}]: {}", e.code, crate::output::safe(&e.message));
            return EXIT_CONFIG;
        }
    };
    let mark = mark.map(|m| m.with_resets(store.as_ref(), &scope));
    let journal = match find_journal(store.as_ref(), &scope, run_id) {
        Ok(Some(j)) => j,
        Ok(None) => {
            report_none(&scope, &choice, format, mark.as_ref());
            return EXIT_OK;
        }
        Err(Lookup::Unreadable(e)) => {
            eprintln!("error[journal_unreadable]: {e}");
            return EXIT_CONFIG;
        }
        Err(Lookup::Ambiguous(ids)) => {
            let d = dpone_core::Diagnostic::new(
                "ambiguous_run_id",
                "--run-id",
                format!("`{}` is the prefix of {} runs: {}", run_id.unwrap_or_default(), ids.len(), ids.join(", ")),
            )
            .hint("pass a longer prefix that names one run");
            print_diagnostics(path, &Diagnostics::one(d));
            return EXIT_CONFIG;
        }
    };
    let (visible, next) = explain(journal.state);
    // The evidence as the state store keeps it (any host can read it).
    let evidence: Option<serde_json::Value> =
        journal.evidence_key.as_deref().and_then(|k| store.get(k).ok().flatten()).and_then(|v| serde_json::from_str(&v.body).ok());
    if format == Format::Json {
        print_json(&json!({
            "target_scope": scope,
            "state_store": choice.describe(),
            "evidence": evidence,
            "run_id": journal.run_id,
            "execution": journal.execution,
            "state": journal.state,
            "visible": visible,
            "next": next,
            "chunks_total": journal.chunk_count,
            "chunks_verified": journal.verified_chunks(),
            "incremental": mark.as_ref().map(MarkView::json),
            "journal": journal,
        }));
        return EXIT_OK;
    }
    println!("target      {}", crate::output::safe(&scope));
    println!("run         {} (execution {})", journal.run_id, journal.execution);
    println!("state       {}", journal.state.as_str());
    println!("visible     {visible}");
    if let (Some(s), Some(e)) = (journal.window_start, journal.window_end) {
        println!("window      [{s}, {e})");
    }
    if let Some(m) = &mark {
        m.print();
    }
    if let Some(b) = &journal.cursor {
        println!("batch       {}", crate::output::safe(&b.describe()));
    }
    println!("chunks      {} of {} verified", journal.verified_chunks(), journal.chunk_count);
    for c in journal.chunks.values() {
        let state = match c.state {
            ChunkState::Verified => format!("verified, {} rows", c.rows),
            ChunkState::Staging => "staging (not verified)".into(),
            ChunkState::Failed => "failed".into(),
        };
        println!("  #{:<4} attempt {} in {}: {state}", c.index, c.attempt, c.staging_table);
    }
    if let Some(i) = &journal.intent {
        println!("intent      publish {} (target identity before: {}, generation: {})", i.generation_table, i.target_before, i.generation);
    }
    if let Some(p) = journal.evidence_path.as_deref() {
        println!("evidence    {} (on the host of {})", crate::output::safe(p), crate::output::safe(&journal.last_holder));
    }
    if let (Some(k), Some(_)) = (journal.evidence_key.as_deref(), &evidence) {
        println!("            and in the state store as {} (`--format json` prints it)", crate::output::safe(k));
    }
    if let Some(e) = &journal.error {
        println!("error       [{}] {}", e.code, crate::output::safe(&e.message));
    }
    println!("source      version {}{}", journal.source_version.id, if journal.source_version.durable { "" } else { " (not reopenable)" });
    println!("written by  {}", crate::output::safe(&journal.last_holder));
    println!("state store {}", crate::output::safe(&choice.describe()));
    println!("next        {next}");
    EXIT_OK
}

fn report_none(scope: &str, store: &StoreChoice, format: Format, mark: Option<&MarkView>) {
    if format == Format::Json {
        print_json(&json!({
            "target_scope": scope,
            "state_store": store.describe(),
            "state": null,
            "visible": "the target as it is: dpone has no run journal for it",
            "incremental": mark.map(MarkView::json),
        }));
    } else {
        println!("target      {}", crate::output::safe(scope));
        println!("state       no run recorded in the state store {}", crate::output::safe(&store.describe()));
        if let Some(m) = mark {
            m.print();
        }
    }
}

/// Records an operator's verdict on an outcome-unknown run (`outcome`
/// given) or abandons an unfinished run (`outcome` None).
pub fn resolve(path: &Path, selector: Option<&str>, outcome: Option<&str>) -> u8 {
    let (_, target, choice) = match crate::commands::prepare_for_status(path, selector) {
        Ok(v) => v,
        Err(d) => {
            print_diagnostics(path, &d);
            return EXIT_CONFIG;
        }
    };
    let scope = target.scope();
    let store = match choice.open(false) {
        Ok(Some(s)) => s,
        Ok(None) => {
            eprintln!("error[no_journal]: no run journal in the state store {}", crate::output::safe(&choice.describe()));
            return EXIT_CONFIG;
        }
        Err(e) => {
            eprintln!("error[{}]: {}", e.code, crate::output::safe(&e.message));
            return EXIT_CONFIG;
        }
    };
    let published = match outcome {
        None => None,
        Some("published") => Some(true),
        Some("absent") => Some(false),
        Some(other) => {
            print_diagnostics(
                path,
                &Diagnostics::one(
                    dpone_core::Diagnostic::new("invalid_value", "--outcome", format!("`{other}` is not an outcome"))
                        .hint("use published or absent"),
                ),
            );
            return EXIT_CONFIG;
        }
    };
    let operator = crate::commands::operator(&choice);
    let done = crate::commands::runtime().block_on(async {
        match published {
            Some(p) => dpone_engine::resolve_unknown(store, &scope, &operator, p).await,
            None => dpone_engine::abandon_unfinished(store, &scope, &operator).await,
        }
    });
    match done {
        Ok(j) => {
            println!("run {} is now {}: {}", j.run_id, j.state.as_str(), explain(j.state).1);
            EXIT_OK
        }
        Err(e) => {
            eprintln!("error[{}]: {}", e.code, e.message);
            if let Some(h) = e.hint {
                eprintln!("  hint: {h}");
            }
            EXIT_CONFIG
        }
    }
}
