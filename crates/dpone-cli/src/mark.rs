//! `dpone state show|reset`: an `incremental_append` (or
//! `incremental_merge`) target's high-water
//! mark, read from the target (where the publication wrote it), and an
//! operator's deliberate move of it. `show` is read-only and takes no
//! lease; `reset` takes the target's lease as a run does, is refused while
//! a run of the target is unfinished, writes the new mark in one target
//! transaction that checks the mark is still the one read first
//! (compare-and-set) and journals who and why in the state store
//! (`dpone_engine::reset_mark`).

use crate::Format;
use crate::adapters::AnyTarget;
use crate::commands::{EXIT_CONFIG, EXIT_OK};
use crate::output::{print_diagnostics, print_json, safe};
use dpone_core::Diagnostic;
use dpone_core::Diagnostics;
use dpone_core::incremental::{CursorKind, CursorValue, StoredMark, receipt_identity};
use dpone_core::manifest::Manifest;
use dpone_core::ports::{AdapterError, Target};
use dpone_engine::MarkReset;
use serde_json::json;
use std::path::Path;

/// What `reset` is asked to do.
pub struct ResetRequest<'a> {
    pub to: Option<&'a str>,
    pub clear: bool,
    pub reason: Option<&'a str>,
    /// The receipt (`mark:<column>=<value>;run=<run>`) the operator saw in
    /// `state show`; without it, the mark read at the start of the command.
    pub expect: Option<&'a str>,
    pub yes: bool,
}

/// Who asks: `DPONE_OPERATOR`, else the OS user (`USER`, `LOGNAME`).
fn operator_name() -> String {
    ["DPONE_OPERATOR", "USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.trim().is_empty()))
        .unwrap_or_else(|| "unknown".into())
}

fn fail(e: &AdapterError) -> u8 {
    eprintln!("error[{}]: {}", e.code, safe(&e.message));
    if let Some(h) = &e.hint {
        eprintln!("  hint: {}", safe(h));
    }
    EXIT_CONFIG
}

fn refuse(path: &Path, manifest: Option<&Manifest>, mut d: Diagnostic) -> u8 {
    if let Some(m) = manifest {
        m.locate(&mut d);
    }
    print_diagnostics(path, &Diagnostics::one(d));
    EXIT_CONFIG
}

/// The manifest's process, its target and cursor column, or the exit code
/// of a refusal (not an `incremental_append` or `incremental_merge`).
fn open(path: &Path, selector: Option<&str>) -> Result<(Manifest, AnyTarget, crate::state::StoreChoice, String), u8> {
    let (manifest, target, choice) = crate::commands::prepare_for_status(path, selector).map_err(|d| {
        print_diagnostics(path, &d);
        EXIT_CONFIG
    })?;
    let Some((column, _)) = manifest.incremental() else {
        let d = Diagnostic::new(
            "not_incremental",
            "sink.strategy.mode",
            "this process is neither an incremental_append nor an incremental_merge: it keeps no mark",
        )
        .hint("state show|reset apply to processes with sink.strategy.mode: incremental_append or incremental_merge");
        return Err(refuse(path, Some(&manifest), d));
    };
    let column = column.to_string();
    Ok((manifest, target, choice, column))
}

fn mark_json(m: &StoredMark) -> serde_json::Value {
    json!({
        "column": m.column,
        "type": m.value.map(|v| v.kind().as_str()),
        "value": m.value.map(|v| v.to_string()),
        "run_id": m.run_id,
        "receipt": receipt_identity(Some(m)),
    })
}

fn reset_json(r: &MarkReset) -> serde_json::Value {
    json!({
        "id": r.id, "operator": r.operator, "holder": r.holder, "reason": r.reason, "at": r.at, "state": r.state,
        "before": receipt_identity(r.before.as_ref()), "after": receipt_identity(r.after.as_ref()), "error": r.error,
    })
}

/// The latest reset journaled for the target (None: none, or no store).
fn last_reset(choice: &crate::state::StoreChoice, scope: &str) -> Option<MarkReset> {
    let store = choice.open(false).ok().flatten()?;
    dpone_engine::mark_resets(store.as_ref(), scope).ok()?.pop()
}

pub fn show(path: &Path, selector: Option<&str>, format: Format) -> u8 {
    let (_, target, choice, column) = match open(path, selector) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let mark = match crate::commands::runtime().block_on(target.peek_mark()) {
        Ok(m) => m,
        Err(e) => return fail(&e),
    };
    let scope = target.scope();
    let reset = last_reset(&choice, &scope);
    if format == Format::Json {
        print_json(&json!({
            "target_scope": scope,
            "column": column,
            "mark": mark.as_ref().map(mark_json),
            "last_reset": reset.as_ref().map(reset_json),
        }));
        return EXIT_OK;
    }
    println!("target      {}", safe(&scope));
    match &mark {
        None => println!("mark        no mark: the next run reads {column} from the start (or initial_value)"),
        Some(m) => {
            let value = m.value.map(|v| format!("{v} ({})", v.kind().as_str())).unwrap_or_else(|| "none (no row was read yet)".into());
            println!("mark        {} = {}", safe(&m.column), safe(&value));
            println!("written by  {}", safe(&m.run_id));
            println!("receipt     {}", safe(&receipt_identity(Some(m))));
        }
    }
    if let Some(r) = &reset {
        print_reset(r);
    }
    EXIT_OK
}

fn print_reset(r: &MarkReset) {
    println!(
        "last reset  {} by {} at {} ({}): {} -> {}",
        r.state,
        safe(&r.operator),
        safe(&r.at),
        safe(&r.reason),
        safe(&receipt_identity(r.before.as_ref())),
        safe(&receipt_identity(r.after.as_ref()))
    );
}

/// The cursor's type: the target column's, else the stored value's.
async fn cursor_kind(target: &AnyTarget, column: &str, stored: Option<&StoredMark>) -> Result<Option<CursorKind>, AdapterError> {
    let from_target =
        target.describe().await?.and_then(|cols| cols.into_iter().find(|c| c.name == column)).and_then(|c| CursorKind::of(&c.ty.dtype));
    Ok(from_target.or_else(|| stored.and_then(|m| m.value).map(|v| v.kind())))
}

pub fn reset(path: &Path, selector: Option<&str>, req: &ResetRequest<'_>) -> u8 {
    let (manifest, target, choice, column) = match open(path, selector) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let reason = req.reason.map(str::trim).unwrap_or_default();
    if reason.is_empty() {
        let d = Diagnostic::new("reset_reason_required", "--reason", "a reset of the mark needs a reason; it is journaled with who asked")
            .hint("add --reason \"<why the mark moves>\"");
        return refuse(path, None, d);
    }
    if req.clear == req.to.is_some() {
        let d = Diagnostic::new("invalid_value", "--to", "give exactly one of --to <value> and --clear")
            .hint("--to moves the mark to a value of the cursor's type; --clear removes it (the next run reads from the start)");
        return refuse(path, None, d);
    }
    let rt = crate::commands::runtime();
    let stored = match rt.block_on(target.read_mark()) {
        Ok(m) => m,
        Err(e) => return fail(&e),
    };
    // The mark the operator saw: as given (a receipt from `state show`), else as read now.
    if let Some(expect) = req.expect
        && expect != receipt_identity(stored.as_ref())
    {
        let e = AdapterError::permanent(
            "incremental_mark_moved",
            format!("the target's mark is {} but --expect names {}", receipt_identity(stored.as_ref()), expect),
        )
        .hint(
            "the mark moved since it was shown (a run, or another reset); nothing was changed: look at `dpone state show` and reset again",
        );
        return fail(&e);
    }
    let store_choice = choice.clone();
    let operator = crate::commands::operator(&store_choice);
    let id = format!("{:016x}", operator.host.entropy());
    let after = match req.to {
        None => None,
        Some(text) => {
            let kind = match rt.block_on(cursor_kind(&target, &column, stored.as_ref())) {
                Ok(Some(k)) => k,
                Ok(None) => {
                    let d = Diagnostic::new(
                        "incremental_column_type",
                        "source.options.incremental_column",
                        format!("the type of the cursor `{column}` is unknown: the target has no such column of a cursor type"),
                    )
                    .hint("create the target table first, or use --clear");
                    return refuse(path, Some(&manifest), d);
                }
                Err(e) => return fail(&e),
            };
            match CursorValue::parse(kind, text) {
                Ok(v) => Some(StoredMark { column: column.clone(), value: Some(v), run_id: format!("reset-{id}") }),
                Err(why) => {
                    let d = Diagnostic::new("invalid_mark_value", "--to", format!("{why}: the cursor `{column}` is a {}", kind.as_str()))
                        .hint("give a value of the cursor's type, as `dpone state show` prints it");
                    return refuse(path, None, d);
                }
            }
        }
    };
    println!("target      {}", safe(&target.scope()));
    println!("mark        {} -> {}", safe(&receipt_identity(stored.as_ref())), safe(&receipt_identity(after.as_ref())));
    if !req.yes && !confirmed() {
        eprintln!("error[reset_not_confirmed]: the mark was not changed");
        eprintln!("  hint: answer `yes`, or pass --yes");
        return EXIT_CONFIG;
    }
    let store = match choice.open(true) {
        Ok(Some(s)) => s,
        Ok(None) => return fail(&AdapterError::permanent("state_store_unavailable", "no state store to journal the reset in")),
        Err(e) => return fail(&e),
    };
    let reset = MarkReset {
        id,
        target_scope: target.scope(),
        operator: operator_name(),
        holder: operator.holder.clone(),
        reason: reason.to_string(),
        at: now(),
        before: stored,
        after,
        state: String::new(),
        error: None,
    };
    match rt.block_on(dpone_engine::reset_mark(store, &operator, std::sync::Arc::new(target), reset)) {
        Ok(r) => {
            print_reset(&r);
            match &r.after {
                Some(m) => {
                    println!("next        the next run reads {} > {}", safe(&m.column), m.value.map(|v| v.to_string()).unwrap_or_default())
                }
                None => println!("next        the next run reads {column} from the start (or initial_value)"),
            }
            EXIT_OK
        }
        Err(e) => fail(&e),
    }
}

/// Asks on the terminal; anything but `yes` declines.
fn confirmed() -> bool {
    use std::io::Write;
    print!("move the mark? type yes: ");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).is_ok() && line.trim() == "yes"
}

fn now() -> String {
    let micros = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0);
    dpone_core::time::Timestamp(micros).to_string()
}
