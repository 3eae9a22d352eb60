//! `dpone backfill plan|run|status`: re-loads a historical range window by
//! window, as the original's `dpone backfill` does.
//!
//! The range `[--from, --to)` is cut into the manifest's own windows: each
//! is `lookback` long (`sink.strategy.window`), the first starts at
//! `--from`, the last ends at `--to`. Each window is a normal `dpone run`
//! anchored at its end (`--interval-end`), with its own lease, journal and
//! evidence, under a run id of its own (`backfill-<id>-<end>`, `<id>`
//! digesting the range, the selection and the manifest): its operation
//! record says which of its processes succeeded. So running the same
//! command again skips the windows that succeeded, and the window a crash
//! interrupted resumes from its journal (`dpone run`'s rules). A changed
//! manifest or range is another backfill: every window runs again.
//!
//! Windows run one at a time, oldest first: they write the same targets,
//! whose lease admits one run each. `--jobs` runs the processes of a batch
//! manifest of one window at the same time, as `dpone run --jobs` does.
//! The first window that does not succeed stops the backfill; its exit
//! code is the command's.

use crate::commands::{self, EXIT_CONFIG, EXIT_OK};
use crate::output::{self, safe};
use crate::state::StoreChoice;
use crate::{Format, IntervalArgs, RunArgs, RunFormat, SelectArgs};
use dpone_core::manifest::Process;
use dpone_core::manifest::select;
use dpone_core::ports::Target;
use dpone_core::state::RunState;
use dpone_core::time::{FixedDuration, Timestamp};
use dpone_core::{Diagnostic, Diagnostics};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// At most this many windows per backfill.
pub const MAX_WINDOWS: usize = 10_000;

#[derive(clap::Args, Debug, Clone)]
pub struct BackfillArgs {
    pub manifest: PathBuf,
    /// Start of the range (RFC 3339, UTC): the first window starts here.
    #[arg(long, value_name = "INSTANT")]
    pub from: String,
    /// End of the range (RFC 3339, UTC): the last window ends here.
    #[arg(long, value_name = "INSTANT")]
    pub to: String,
    #[command(flatten)]
    pub select: SelectArgs,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(clap::Subcommand, Debug)]
pub enum BackfillCommand {
    /// The range's windows, the anchor each runs with, and what each already is (nothing is written).
    Plan(BackfillArgs),
    /// Run every window not yet succeeded, oldest first; the same command again resumes.
    Run {
        #[command(flatten)]
        args: BackfillArgs,
        /// Processes of one window run at the same time (windows run one at a time).
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
        jobs: u32,
    },
    /// What each window of the range is: succeeded, failed, unfinished (the next run resumes it) or pending.
    Status(BackfillArgs),
}

pub fn main(command: BackfillCommand) -> u8 {
    match command {
        BackfillCommand::Plan(a) => describe(&a, "dpone.backfill_plan"),
        BackfillCommand::Status(a) => describe(&a, "dpone.backfill_status"),
        BackfillCommand::Run { args, jobs } => run(&args, jobs),
    }
}

/// One window of the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: Timestamp,
    pub end: Timestamp,
}

/// The windows of `[from, to)`, each `lookback` long, oldest first.
pub fn windows(from: Timestamp, to: Timestamp, lookback: FixedDuration) -> Result<Vec<Window>, Diagnostic> {
    let step = lookback.micros();
    if from >= to {
        return Err(Diagnostic::new("backfill_empty_range", "--to", format!("--to {to} is not after --from {from}"))
            .hint("pass --from before --to: the range is [--from, --to)"));
    }
    let span = to.0 - from.0;
    if span % step != 0 {
        let lower = Timestamp(from.0 + span / step * step);
        let upper = Timestamp(lower.0 + step);
        let fit = if lower > from { format!("--to {lower} or {upper}") } else { format!("--to {upper}") };
        return Err(Diagnostic::new(
            "backfill_range_not_whole_windows",
            "--to",
            format!("[{from}, {to}) is not a whole number of the manifest's windows ({lookback} each, sink.strategy.window.lookback)"),
        )
        .hint(format!("pass {fit}")));
    }
    let n = span / step;
    if n > MAX_WINDOWS as i64 {
        return Err(Diagnostic::new("backfill_too_many_windows", "--to", format!("the range holds {n} windows of {lookback}"))
            .hint(format!("split it into backfills of at most {MAX_WINDOWS} windows")));
    }
    Ok((0..n).map(|i| Window { start: Timestamp(from.0 + i * step), end: Timestamp(from.0 + (i + 1) * step) }).collect())
}

/// A backfill: its processes, windows and id.
struct Backfill<'a> {
    args: &'a BackfillArgs,
    processes: Vec<&'a Process>,
    lookback: FixedDuration,
    windows: Vec<Window>,
    id: String,
}

fn instant(value: &str, flag: &str) -> Result<Timestamp, Diagnostic> {
    Timestamp::parse_rfc3339(value).map_err(|e| {
        Diagnostic::new("invalid_interval", flag, format!("{flag} `{value}`: {e}"))
            .hint("pass an RFC 3339 instant, e.g. 2026-09-01T00:00:00Z")
    })
}

fn prepare<'a>(args: &'a BackfillArgs, loaded: &'a dpone_core::manifest::Loaded) -> Result<Backfill<'a>, Diagnostics> {
    let processes = select::select(loaded, &args.select.selection())?;
    let (from, to) = (instant(&args.from, "--from")?, instant(&args.to, "--to")?);
    let mut lookback = None;
    for p in &processes {
        let Some(w) = p.manifest.window() else {
            let mut d = Diagnostic::new(
                "backfill_requires_window",
                "sink.strategy",
                format!("`{}` has no window: only `mode: replace` with `window` is loaded window by window", p.label()),
            )
            .hint("run full_refresh and incremental processes with `dpone run`; select the windowed processes with --select / --exclude");
            p.manifest.locate(&mut d);
            return Err(d.into());
        };
        match lookback {
            Some(l) if l != w.lookback => {
                let mut d = Diagnostic::new(
                    "backfill_windows_differ",
                    "sink.strategy.window.lookback",
                    format!("`{}` has windows of {}, other selected processes of {l}", p.label(), w.lookback),
                )
                .hint("backfill processes with the same window length together: select them with --select / --exclude");
                p.manifest.locate(&mut d);
                return Err(d.into());
            }
            _ => lookback = Some(w.lookback),
        }
    }
    let lookback = lookback.expect("a selection holds a process");
    let windows = windows(from, to, lookback)?;
    let mut h = Sha256::new();
    h.update(format!("{from}\0{to}\n").as_bytes());
    for p in &processes {
        h.update(format!("{}\0{}\n", p.label(), p.manifest.fingerprint).as_bytes());
    }
    let id = format!("{:x}", h.finalize())[..16].to_string();
    Ok(Backfill { args, processes, lookback, windows, id })
}

impl Backfill<'_> {
    /// The run id of a window (`dpone run --run-id`): its operation record.
    fn run_id(&self, w: &Window) -> String {
        let end: String = w.end.to_string().chars().filter(char::is_ascii_alphanumeric).collect();
        format!("backfill-{}-{end}", self.id)
    }

    /// What each window is, read from the state store (nothing is created):
    /// `succeeded` (every process), `failed` / `outcome_unknown` /
    /// `interrupted` (as recorded), `unfinished` (a process's journal holds
    /// an unfinished run of this window: the next run resumes it) or `pending`.
    fn statuses(&self) -> Result<Vec<String>, Diagnostics> {
        let first = self.processes[0];
        let store = StoreChoice::of(&first.manifest, &self.args.manifest)
            .map_err(|mut d| {
                first.manifest.locate(&mut d);
                Diagnostics::one(d)
            })?
            .open(false)
            .map_err(unavailable)?;
        let Some(store) = store else { return Ok(vec!["pending".to_string(); self.windows.len()]) };
        // The journal of each process's target: the window of its latest run.
        let mut unfinished = Vec::new();
        for p in &self.processes {
            let target = crate::adapters::build_target(&p.manifest, &commands::base_dir(&self.args.manifest)).map_err(Diagnostics::one)?;
            let stores = StoreChoice::of(&p.manifest, &self.args.manifest).map_err(Diagnostics::one)?.open(false).map_err(unavailable)?;
            if let Some(s) = stores
                && let Some((_, j)) = dpone_engine::read_journal(s.as_ref(), &target.scope()).map_err(unavailable)?
                && !matches!(j.state, RunState::Succeeded | RunState::Failed | RunState::OutcomeUnknown)
            {
                unfinished.extend(j.window_end);
            }
        }
        self.windows
            .iter()
            .map(|w| {
                let record = dpone_engine::read_batch(store.as_ref(), &format!("run-id/{}", self.run_id(w))).map_err(unavailable)?;
                let of = |p: &&Process| record.as_ref().and_then(|r| r.processes.get(p.label())).map(|r| r.status.clone());
                let recorded: Vec<Option<String>> = self.processes.iter().map(of).collect();
                Ok(if recorded.iter().all(|s| s.as_deref() == Some("succeeded")) {
                    "succeeded".to_string()
                } else if let Some(s) = recorded.iter().flatten().find(|s| *s != "succeeded") {
                    s.clone()
                } else if unfinished.contains(&w.end) {
                    "unfinished".to_string()
                } else {
                    "pending".to_string()
                })
            })
            .collect()
    }

    fn head(&self, kind: &str) -> serde_json::Map<String, Value> {
        let labels: Vec<&str> = self.processes.iter().map(|p| p.label()).collect();
        let mut m = serde_json::Map::new();
        m.insert("kind".into(), json!(kind));
        m.insert("manifest".into(), json!(self.args.manifest));
        m.insert("processes".into(), json!(labels));
        m.insert("from".into(), json!(self.windows[0].start.to_string()));
        m.insert("to".into(), json!(self.windows[self.windows.len() - 1].end.to_string()));
        m.insert("window_length".into(), json!(self.lookback.to_string()));
        m.insert("backfill_id".into(), json!(self.id));
        m
    }

    fn window_doc(&self, i: usize, w: &Window, status: &str) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert("index".into(), json!(i + 1));
        m.insert("start".into(), json!(w.start.to_string()));
        m.insert("end".into(), json!(w.end.to_string()));
        m.insert("interval_end".into(), json!(w.end.to_string()));
        m.insert("run_id".into(), json!(self.run_id(w)));
        m.insert("status".into(), json!(status));
        m
    }
}

fn unavailable(e: dpone_core::ports::AdapterError) -> Diagnostics {
    Diagnostics::one(Diagnostic { hint: e.hint, ..Diagnostic::new(e.code, "", e.message) })
}

fn counts<'a>(statuses: impl Iterator<Item = &'a str>) -> Value {
    let mut m = std::collections::BTreeMap::<&str, u64>::new();
    for s in statuses {
        *m.entry(s).or_default() += 1;
    }
    json!(m)
}

fn refuse(args: &BackfillArgs, kind: &str, d: &Diagnostics) -> u8 {
    output::print_diagnostics(&args.manifest, d);
    if args.format == Format::Json {
        output::print_json(&json!({"kind": kind, "manifest": args.manifest, "passed": false, "status": "refused", "errors": d}));
    }
    EXIT_CONFIG
}

/// `plan` and `status`: the windows and what each is; `plan` also checks
/// that each window's run can be planned (offline: nothing is probed).
fn describe(args: &BackfillArgs, kind: &str) -> u8 {
    with_backfill(args, kind, |b| describe_windows(args, kind, b))
}

/// Loads the manifest and prepares its backfill for `f`; what does not
/// load or prepare is refused as `kind`.
fn with_backfill(args: &BackfillArgs, kind: &str, f: impl FnOnce(&Backfill) -> u8) -> u8 {
    let loaded = match commands::load(&args.manifest) {
        Ok(l) => l,
        Err(d) => return refuse(args, kind, &d),
    };
    match prepare(args, &loaded) {
        Ok(b) => f(&b),
        Err(d) => refuse(args, kind, &d),
    }
}

fn describe_windows(args: &BackfillArgs, kind: &str, b: &Backfill) -> u8 {
    let statuses = match b.statuses() {
        Ok(s) => s,
        Err(d) => return refuse(args, kind, &d),
    };
    let mut refusals = Vec::new();
    if kind == "dpone.backfill_plan" {
        for w in &b.windows {
            let interval = IntervalArgs { interval_end: Some(w.end.to_string()), interval_start: None };
            for p in &b.processes {
                match commands::prepare(&args.manifest, &p.manifest, &interval) {
                    Ok((plan, _)) => refusals.extend(plan.refusals),
                    Err(d) => refusals.extend(d.0),
                }
            }
        }
        refusals.dedup_by(|a, b| a.code == b.code && a.path == b.path && a.message == b.message);
    }
    let code = if refusals.is_empty() { EXIT_OK } else { EXIT_CONFIG };
    match args.format {
        Format::Json => {
            let mut doc = b.head(kind);
            let windows: Vec<Value> =
                b.windows.iter().zip(&statuses).enumerate().map(|(i, (w, s))| Value::Object(b.window_doc(i, w, s))).collect();
            doc.insert("windows_total".into(), json!(windows.len()));
            doc.insert("counts".into(), counts(statuses.iter().map(String::as_str)));
            doc.insert("windows".into(), Value::Array(windows));
            if kind == "dpone.backfill_plan" {
                doc.insert("runnable".into(), json!(refusals.is_empty()));
                doc.insert("errors".into(), json!(refusals));
            }
            output::print_json(&Value::Object(doc));
        }
        Format::Text => {
            print_head(b);
            for (i, (w, s)) in b.windows.iter().zip(&statuses).enumerate() {
                println!("  {:>4}  {} .. {}  {s}", i + 1, w.start, w.end);
            }
            match statuses.iter().filter(|s| *s != "succeeded").count() {
                0 => println!("every window succeeded"),
                n => println!("{n} of {} windows to run: `dpone backfill run` with the same arguments runs them", statuses.len()),
            }
        }
    }
    if !refusals.is_empty() {
        output::print_diagnostics(&args.manifest, &Diagnostics(refusals));
    }
    code
}

fn print_head(b: &Backfill) {
    let labels: Vec<&str> = b.processes.iter().map(|p| p.label()).collect();
    println!(
        "backfill    {} ({}): {} windows of {} from {} to {}",
        safe(&b.args.manifest.display().to_string()),
        safe(&labels.join(", ")),
        b.windows.len(),
        b.lookback,
        b.windows[0].start,
        b.windows[b.windows.len() - 1].end
    );
}

/// How a window's run ended, from its documents.
fn window_status(docs: &[Value]) -> String {
    let status = |d: &Value| d["status"].as_str().unwrap_or("unknown").to_string();
    docs.iter()
        .map(status)
        .find(|s| s != "succeeded")
        .unwrap_or_else(|| if docs.is_empty() { "unknown".into() } else { "succeeded".into() })
}

fn run(args: &BackfillArgs, jobs: u32) -> u8 {
    let kind = "dpone.backfill_run";
    with_backfill(args, kind, |b| run_windows(args, kind, jobs, b))
}

fn run_windows(args: &BackfillArgs, kind: &str, jobs: u32, b: &Backfill) -> u8 {
    let text = args.format == Format::Text;
    if text {
        print_head(b);
    }
    let total = b.windows.len();
    let mut docs: Vec<Value> = Vec::new();
    let mut code = EXIT_OK;
    let mut statuses: Vec<String> = Vec::new();
    for (i, w) in b.windows.iter().enumerate() {
        if code != EXIT_OK {
            statuses.push("not_run".into());
            docs.push(Value::Object(b.window_doc(i, w, "not_run")));
            continue;
        }
        let interval = IntervalArgs { interval_end: Some(w.end.to_string()), interval_start: None };
        let run_args = RunArgs { jobs, run_id: Some(b.run_id(w)), retry_attempts: 0, retry_backoff_seconds: 0.0, delivery: None };
        let request = crate::run::Request {
            path: &args.manifest,
            interval: &interval,
            selection: args.select.selection(),
            args: &run_args,
            format: RunFormat::Json,
        };
        let (window_code, runs) = crate::run::run_collect(&request, false);
        let status = window_status(&runs);
        // Every process had succeeded before: nothing ran.
        let skipped = status == "succeeded" && runs.iter().all(|d| d["attempts"] == 0);
        if text {
            let rows: u64 = runs.iter().filter_map(|d| d["inserted_rows"].as_u64()).sum();
            let seconds: f64 = runs.iter().filter_map(|d| d["duration_seconds"].as_f64()).sum();
            let what = if skipped {
                "skipped: already succeeded".to_string()
            } else if status == "succeeded" {
                format!("succeeded: {rows} rows in {seconds:.1} s")
            } else {
                let error = runs.iter().find_map(|d| d["error_code"].as_str()).unwrap_or("");
                format!("{status} ({}), exit {window_code}", safe(error))
            };
            println!("window {:>4}/{total}  {} .. {}  {what}", i + 1, w.start, w.end);
        }
        let mut doc = b.window_doc(i, w, &status);
        doc.insert("skipped".into(), json!(skipped));
        doc.insert("exit_code".into(), json!(window_code));
        doc.insert("runs".into(), Value::Array(runs));
        docs.push(Value::Object(doc));
        statuses.push(status);
        code = window_code;
    }
    let succeeded = statuses.iter().filter(|s| *s == "succeeded").count();
    match args.format {
        Format::Json => {
            let mut doc = b.head(kind);
            doc.insert("passed".into(), json!(code == EXIT_OK));
            doc.insert("exit_code".into(), json!(code));
            doc.insert("windows_total".into(), json!(total));
            doc.insert("counts".into(), counts(statuses.iter().map(String::as_str)));
            doc.insert("windows".into(), Value::Array(docs));
            output::print_json(&Value::Object(doc));
        }
        Format::Text if code == EXIT_OK => println!("backfill    {succeeded} of {total} windows succeeded (exit 0)"),
        Format::Text => println!(
            "backfill    {succeeded} of {total} windows succeeded; stopped at window {} (exit {code}): fix what it reports, then run the same command again to continue",
            succeeded + 1
        ),
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn a_range_is_cut_into_the_manifests_windows_oldest_first() {
        let day = FixedDuration::parse_iso8601("P1D").unwrap();
        let w = windows(ts("2026-01-01T00:00:00Z"), ts("2026-01-11T00:00:00Z"), day).unwrap();
        assert_eq!(w.len(), 10);
        assert_eq!((w[0].start, w[0].end), (ts("2026-01-01T00:00:00Z"), ts("2026-01-02T00:00:00Z")));
        assert_eq!(w[9].end, ts("2026-01-11T00:00:00Z"));
        assert!(w.windows(2).all(|p| p[0].end == p[1].start), "windows are contiguous");
    }

    #[test]
    fn a_range_that_is_not_whole_windows_is_refused_naming_the_ends_that_fit() {
        let week = FixedDuration::parse_iso8601("P7D").unwrap();
        let d = windows(ts("2026-01-01T00:00:00Z"), ts("2026-01-10T00:00:00Z"), week).unwrap_err();
        assert_eq!(d.code, "backfill_range_not_whole_windows");
        assert!(d.hint.as_deref().unwrap().contains("2026-01-08T00:00:00Z or 2026-01-15T00:00:00Z"), "{d:?}");
        let d = windows(ts("2026-01-02T00:00:00Z"), ts("2026-01-01T00:00:00Z"), week).unwrap_err();
        assert_eq!(d.code, "backfill_empty_range");
        let second = FixedDuration::parse_iso8601("PT1S").unwrap();
        let d = windows(ts("2026-01-01T00:00:00Z"), ts("2026-01-02T00:00:00Z"), second).unwrap_err();
        assert_eq!(d.code, "backfill_too_many_windows");
    }

    #[test]
    fn a_window_fails_with_its_first_process_that_did_not_succeed() {
        let ok = json!({"status": "succeeded"});
        assert_eq!(window_status(&[ok.clone(), ok.clone()]), "succeeded");
        assert_eq!(window_status(&[ok, json!({"status": "failed"}), json!({"status": "refused"})]), "failed");
        assert_eq!(window_status(&[]), "unknown");
    }
}
