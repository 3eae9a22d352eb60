//! `dpone run`: the selected processes of a manifest, each with its own
//! lease, journal, evidence and resume, up to `--jobs` at a time.
//!
//! 1. Load and select (pure): a problem refuses the whole command (exit 2).
//! 2. Plan and wire every selected process (pure): one refused process
//!    refuses the command before anything is written (exit 2), and says so
//!    for every process.
//! 3. Run. A failing process does not stop the others; `--retry-attempts`
//!    runs a failed one again after `--retry-backoff-seconds` (the engine
//!    resumes it from its journal, and a publication is never repeated
//!    blindly). Each process's document is printed when it ends.
//! 4. The exit code follows `dpone_engine::batch_exit_code` (0 only when
//!    every process succeeded, 2 when nothing was written, else 1; 130 on
//!    a signal).
//!
//! A run of several processes, or one named by `--run-id`, keeps an
//! operation record (`dpone_engine::BatchRecord`) in the first process's
//! work dir: running the same command again after a crash skips the
//! processes that already succeeded and resumes the others.

use crate::adapters::Adapters;
use crate::commands::{self, EXIT_CONFIG};
use crate::envelope::{self, Body, Head};
use crate::output::{self, RunOutcome, safe};
use crate::state::StoreChoice;
use crate::{IntervalArgs, RunArgs, RunFormat};
use dpone_core::Diagnostics;
use dpone_core::manifest::Process;
use dpone_core::manifest::select::{self, Selection};
use dpone_core::plan::Plan;
use dpone_core::ports::Target;
use dpone_engine::{BatchRecord, FailureKind, ProcessEnd, ProcessRecord};
use futures_util::StreamExt;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Request<'a> {
    pub path: &'a Path,
    pub interval: &'a IntervalArgs,
    pub selection: Selection,
    pub args: &'a RunArgs,
    pub format: RunFormat,
}

impl Request<'_> {
    fn head<'a>(&'a self, p: Option<&'a Process>, attempts: u32) -> Head<'a> {
        Head {
            manifest: self.path,
            process: p.map(|p| p.name.as_str()).unwrap_or(""),
            selector: p.and_then(|p| p.selector.as_deref()).or(if p.is_none() { self.selection.selector.as_deref() } else { None }),
            run_label: self.args.run_id.as_deref(),
            attempts,
            max_attempts: self.args.retry_attempts + 1,
            backoff: self.args.retry_backoff_seconds,
        }
    }
}

/// A process ready to run.
struct Job<'a> {
    process: &'a Process,
    plan: Plan,
    adapters: Adapters,
    work_dir: PathBuf,
    /// Where its leases and journal live (`state:`, DPONE_STATE_URL or the work dir).
    store: StoreChoice,
}

/// How a process ended: its document and its share of the exit code.
struct Ended {
    label: String,
    doc: Value,
    end: ProcessEnd,
}

/// Prints documents as processes end (JSON lines stream; Markdown waits
/// for the last one).
struct Printer {
    format: RunFormat,
    many: bool,
    /// Print the documents (false: only collect them, for `backfill`).
    echo: bool,
    docs: Mutex<Vec<Value>>,
}

impl Printer {
    fn emit(&self, doc: Value) {
        if self.format == RunFormat::Json && self.echo {
            use std::io::Write;
            let line = serde_json::to_string(&doc).expect("JSON values serialize");
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
        self.docs.lock().expect("printer lock").push(doc);
    }

    /// Prints the end of the output and hands back every document.
    fn finish(&self, path: &Path, code: u8) -> (u8, Vec<Value>) {
        let docs = std::mem::take(&mut *self.docs.lock().expect("printer lock"));
        if !self.echo {
            return (code, docs);
        }
        match self.format {
            RunFormat::Md => print!("{}", envelope::markdown(&docs)),
            RunFormat::Text if self.many => {
                let count = |s: &str| docs.iter().filter(|d| d["status"] == s).count();
                let mut parts = vec![format!("{} succeeded", count("succeeded"))];
                for s in ["failed", "outcome_unknown", "refused", "unavailable", "interrupted", "not_run"] {
                    if count(s) > 0 {
                        parts.push(format!("{} {}", count(s), s.replace('_', " ")));
                    }
                }
                println!("batch       {}: {} processes: {} (exit {code})", safe(&path.display().to_string()), docs.len(), parts.join(", "));
            }
            _ => {}
        }
        (code, docs)
    }
}

/// A refusal before the processes are known (the manifest, the selection).
fn refuse_all(req: &Request, d: &Diagnostics, echo: bool) -> (u8, Vec<Value>) {
    output::print_diagnostics(req.path, d);
    let printer = Printer { format: req.format, many: false, echo, docs: Mutex::new(Vec::new()) };
    printer.emit(envelope::document(&req.head(None, 0), None, &Body::Refused(d), 0.0));
    printer.finish(req.path, EXIT_CONFIG)
}

/// `dpone run`: prints each process's document; the exit code.
pub fn run(req: &Request) -> u8 {
    run_collect(req, true).0
}

/// Runs as `dpone run` does and returns the exit code and every process's
/// document; with `echo = false` the documents are not printed (failures
/// are still reported on stderr).
pub fn run_collect(req: &Request, echo: bool) -> (u8, Vec<Value>) {
    let loaded = match commands::load(req.path) {
        Ok(l) => l,
        Err(d) => return refuse_all(req, &d, echo),
    };
    let chosen = match select::select(&loaded, &req.selection) {
        Ok(c) => c,
        Err(d) => return refuse_all(req, &d, echo),
    };
    let many = chosen.len() > 1;
    let printer = Printer { format: req.format, many, echo, docs: Mutex::new(Vec::new()) };

    // Plan and wire every process before anything runs.
    let mut jobs = Vec::new();
    let mut refused: Vec<(&Process, Option<Plan>, Diagnostics)> = Vec::new();
    for p in &chosen {
        let store = match StoreChoice::of(&p.manifest, req.path) {
            Ok(s) => s,
            Err(mut d) => {
                p.manifest.locate(&mut d);
                refused.push((p, None, Diagnostics::one(d)));
                continue;
            }
        };
        // A work dir that cannot be written refuses before any write (a run
        // would otherwise publish, then fail writing its evidence).
        if let Err(mut d) = crate::workdir::resolve(&p.manifest, req.path).check_writable() {
            p.manifest.locate(&mut d);
            refused.push((p, None, Diagnostics::one(d)));
            continue;
        }
        match commands::prepare(req.path, &p.manifest, req.interval) {
            Ok((mut plan, adapters)) if plan.refusals.is_empty() => {
                // `--delivery` overrides the manifest's window delivery.
                if let (Some(d), Some(w)) = (req.args.delivery, plan.window.as_mut()) {
                    w.delivery = d.delivery();
                    let source = dpone_core::adapter::installed().and_then(|r| r.source(p.manifest.source.system));
                    w.authority = source.and_then(|s| s.delivery_authority);
                    if w.delivery == dpone_core::delivery::Delivery::Changed && w.authority.is_none() {
                        let d = dpone_core::Diagnostic::new(
                            "delivery_unsupported",
                            "--delivery",
                            format!(
                                "`--delivery changed` needs a source that fingerprints its chunks; a {} source has none",
                                p.manifest.source.system
                            ),
                        )
                        .hint("use `--delivery all`; PostgreSQL and ClickHouse sources support `changed`");
                        refused.push((p, Some(plan), Diagnostics::one(d)));
                        continue;
                    }
                }
                jobs.push(Job { process: p, work_dir: commands::work_dir(&p.manifest, req.path), plan, adapters, store })
            }
            Ok((plan, _)) => {
                let d = Diagnostics(plan.refusals.clone());
                refused.push((p, Some(plan), d));
            }
            Err(d) => refused.push((p, None, d)),
        }
    }
    // Two processes on one target would share one lease holder's fence.
    for (j, b) in jobs.iter().enumerate() {
        if let Some(a) = jobs[..j].iter().find(|a| a.adapters.target.scope() == b.adapters.target.scope()) {
            let mut d = dpone_core::Diagnostic::new(
                "duplicate_target",
                "sink.table",
                format!("`{}` and `{}` write the same target", a.process.label(), b.process.label()),
            )
            .hint("each process must write its own table; select one of them");
            b.process.manifest.locate(&mut d);
            refused.push((b.process, Some(b.plan.clone()), Diagnostics::one(d)));
        }
    }
    if !refused.is_empty() {
        for (p, plan, d) in &refused {
            if many {
                eprintln!("process {}: refused", safe(p.label()));
            }
            output::print_diagnostics(req.path, d);
            printer.emit(envelope::document(&req.head(Some(p), 0), plan.as_ref(), &Body::Refused(d), 0.0));
        }
        let why = "not run: another selected process was refused, and nothing runs until every selected process can";
        for job in jobs.iter().filter(|j| !refused.iter().any(|(p, _, _)| p.label() == j.process.label())) {
            printer.emit(envelope::document(&req.head(Some(job.process), 0), Some(&job.plan), &Body::NotRun(why), 0.0));
        }
        return printer.finish(req.path, EXIT_CONFIG);
    }

    let operation = Operation::of(req, &jobs);
    let recorded = match operation.as_ref().map(Operation::read).transpose() {
        Ok(r) => r.flatten(),
        Err(d) => return refuse_all(req, &d, echo),
    };
    let done = |label: &str| recorded.as_ref().and_then(|r| r.processes.get(label).filter(|p| p.status == "succeeded"));
    let mut ends = Vec::new();
    let mut pending = Vec::new();
    for job in jobs {
        match done(job.process.label()) {
            Some(rec) => {
                if req.format == RunFormat::Text {
                    println!("== {}: already succeeded in this operation; not run again", safe(job.process.label()));
                }
                printer.emit(envelope::document(&req.head(Some(job.process), 0), Some(&job.plan), &Body::Done(rec), 0.0));
                ends.push(ProcessEnd::Succeeded);
            }
            None => pending.push(job),
        }
    }
    ends.extend(execute(req, pending, &printer, operation.as_ref()));
    let code = dpone_engine::batch_exit_code(&ends);
    if code == commands::EXIT_OK
        && let Some(op) = &operation
    {
        op.write(|r| r.complete = true);
    }
    printer.finish(req.path, code)
}

/// Runs the jobs, up to `--jobs` at a time, under one signal handler: the
/// first SIGINT/SIGTERM stops every run cooperatively (staging and
/// journals kept for the next invocation), a second one exits at once.
fn execute(req: &Request, jobs: Vec<Job>, printer: &Printer, op: Option<&Operation>) -> Vec<ProcessEnd> {
    if jobs.is_empty() {
        return Vec::new();
    }
    let cancel = dpone_engine::Cancel::default();
    // One set of test failpoints for the whole invocation: `name:n` fires at
    // the n-th hit across its processes.
    let base = commands::run_options(PathBuf::new(), &jobs[0].store);
    let labels: Vec<(String, String, Option<Plan>)> =
        jobs.iter().map(|j| (j.process.label().to_string(), j.process.name.clone(), Some(j.plan.clone()))).collect();
    let ended: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let results = commands::runtime().block_on(async {
        let n = req.args.jobs as usize;
        let progress = req.format == RunFormat::Text && n == 1;
        let work = futures_util::stream::iter(jobs)
            .map(|job| run_job(req, job, &base, &cancel, progress, printer.many))
            .buffer_unordered(n)
            .map(|e| {
                if let Some(op) = op {
                    op.note(&e);
                }
                ended.lock().expect("lock").push(e.label.clone());
                printer.emit(e.doc.clone());
                e.end
            })
            .collect::<Vec<_>>();
        tokio::pin!(work);
        tokio::select! {
            ends = &mut work => return Some(ends),
            _ = shutdown_signal() => {
                eprintln!("interrupt received: stopping the runs cooperatively (press Ctrl-C again to exit at once)");
                cancel.trigger();
            }
        }
        tokio::select! {
            ends = &mut work => Some(ends),
            _ = shutdown_signal() => None,
            _ = tokio::time::sleep(STOP_GRACE) => {
                eprintln!("the runs did not stop within {} s; exiting", STOP_GRACE.as_secs());
                None
            }
        }
    });
    if let Some(ends) = results {
        return ends;
    }
    // Stopped at once: every process that had not ended is reported interrupted.
    let ended = ended.into_inner().expect("lock");
    let mut ends = vec![ProcessEnd::Failed(FailureKind::Interrupted)];
    for (label, name, plan) in labels.iter().filter(|(l, _, _)| !ended.contains(l)) {
        let head = Head { process: name, selector: Some(label.as_str()).filter(|_| printer.many), ..req.head(None, 1) };
        printer.emit(envelope::document(&head, plan.as_ref(), &Body::Interrupted, 0.0));
        ends.push(ProcessEnd::Failed(FailureKind::Interrupted));
    }
    output::print_interrupted();
    ends
}

/// How long a cooperative stop may take before the process exits anyway.
const STOP_GRACE: Duration = Duration::from_secs(15);

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("signal handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}

/// A failure worth another attempt: one the next invocation would resume
/// or retry (not a refusal, which would repeat, nor an interruption, which
/// the operator asked for).
fn retryable(outcome: &RunOutcome) -> bool {
    matches!(outcome, RunOutcome::Failed(f) if matches!(f.kind, FailureKind::Failed | FailureKind::OutcomeUnknown | FailureKind::Unavailable))
}

async fn run_job(
    req: &Request<'_>,
    job: Job<'_>,
    base: &dpone_engine::RunOptions,
    cancel: &dpone_engine::Cancel,
    progress: bool,
    many: bool,
) -> Ended {
    let p = job.process;
    let started = Instant::now();
    let max = req.args.retry_attempts + 1;
    let store = job.store.clone();
    let host = commands::run_options(PathBuf::new(), &job.store).host;
    let opener = move |create: bool| store.open(create);
    let mut attempts = 0;
    let outcome = loop {
        attempts += 1;
        let mut options = dpone_engine::RunOptions::new(job.work_dir.clone(), crate::host::holder_for(p.label()), host.clone());
        options.failpoints = base.failpoints.clone();
        options.lease_ttl_ms = base.lease_ttl_ms;
        options.cancel = cancel.clone();
        options.interval_origin = job.plan.window.as_ref().and(commands::interval(req.interval).end.map(|(_, origin)| origin.to_string()));
        options.progress = if progress { crate::progress::for_terminal() } else { None };
        let (source, target) = (job.adapters.source.clone(), job.adapters.target.clone());
        let outcome = match dpone_engine::execute(&p.manifest, &job.plan, source, target, &opener, &options).await {
            Ok(report) => RunOutcome::Succeeded(report),
            Err(mut f) => {
                f.refusals.iter_mut().for_each(|d| p.manifest.locate(d));
                RunOutcome::Failed(f)
            }
        };
        if attempts >= max || !retryable(&outcome) || cancel.is_cancelled() {
            break outcome;
        }
        if let RunOutcome::Failed(f) = &outcome {
            eprintln!(
                "{}: attempt {attempts} of {max} failed ({}); retrying in {} s: the next attempt resumes the run",
                safe(p.label()),
                safe(&f.code),
                req.args.retry_backoff_seconds
            );
        }
        let until = Instant::now() + Duration::from_secs_f64(req.args.retry_backoff_seconds);
        while Instant::now() < until && !cancel.is_cancelled() {
            tokio::time::sleep(Duration::from_millis(50).min(until - Instant::now())).await;
        }
    };
    let elapsed = started.elapsed().as_secs_f64();
    if req.format == RunFormat::Text && many {
        println!("== {} ({})", safe(p.label()), safe(&p.name));
    }
    let head = req.head(Some(p), attempts);
    let (doc, end) = match &outcome {
        RunOutcome::Succeeded(r) => {
            if req.format == RunFormat::Text {
                output::print_success(&job.plan, r);
            }
            (envelope::document(&head, Some(&job.plan), &Body::Succeeded(r), elapsed), ProcessEnd::Succeeded)
        }
        RunOutcome::Failed(f) => {
            if many {
                eprintln!("process {}: {}", safe(p.label()), f.kind.status());
            }
            output::print_failure(req.path, f);
            (envelope::document(&head, Some(&job.plan), &Body::Failed(f), elapsed), ProcessEnd::Failed(f.kind))
        }
    };
    if req.format == RunFormat::Text && many {
        println!();
    }
    Ended { label: p.label().to_string(), doc, end }
}

/// The operation a run of several processes (or one named by `--run-id`)
/// belongs to, and its record.
struct Operation {
    id: String,
    fingerprint: String,
    named: bool,
    /// The first process's state store keeps the operation's record.
    store: StoreChoice,
    holder: String,
    lock: Mutex<()>,
}

impl Operation {
    fn of(req: &Request, jobs: &[Job]) -> Option<Operation> {
        if jobs.len() < 2 && req.args.run_id.is_none() {
            return None;
        }
        let mut h = Sha256::new();
        for j in jobs {
            let window = j.plan.window.as_ref().map(|w| format!("{}..{}", w.start, w.end)).unwrap_or_default();
            h.update(format!("{}\0{}\0{window}\n", j.process.label(), j.process.manifest.fingerprint).as_bytes());
        }
        let fingerprint = format!("{:x}", h.finalize());
        let id = match &req.args.run_id {
            Some(r) => format!("run-id/{r}"),
            None => format!("selection/{}", &fingerprint[..24]),
        };
        Some(Operation {
            id,
            fingerprint,
            named: req.args.run_id.is_some(),
            store: jobs[0].store.clone(),
            holder: crate::host::holder(),
            lock: Mutex::new(()),
        })
    }

    /// The record of an unfinished operation (or, named by `--run-id`, of a
    /// finished one): which processes are done. A `--run-id` used before
    /// for other processes is refused.
    fn read(&self) -> Result<Option<BatchRecord>, Diagnostics> {
        let unavailable = |e: dpone_core::ports::AdapterError| {
            Diagnostics::one(dpone_core::Diagnostic { hint: e.hint, ..dpone_core::Diagnostic::new(e.code, "", e.message) })
        };
        let Some(store) = self.store.open(false).map_err(unavailable)? else { return Ok(None) };
        let Some(record) = dpone_engine::read_batch(store.as_ref(), &self.id).map_err(unavailable)? else { return Ok(None) };
        if self.named && record.fingerprint != self.fingerprint {
            return Err(Diagnostics::one(
                dpone_core::Diagnostic::new(
                    "run_id_conflict",
                    "--run-id",
                    format!("run id `{}` names an operation on other processes or windows", &self.id["run-id/".len()..]),
                )
                .hint("pass a new --run-id, or the same selection, interval and manifest as that operation"),
            ));
        }
        Ok(if record.complete && !self.named { None } else { Some(record) })
    }

    fn write(&self, change: impl FnOnce(&mut BatchRecord)) {
        let _guard = self.lock.lock().expect("operation lock");
        let result = self.store.open(true).and_then(|store| {
            let store = store.expect("a created store");
            let pause = || std::thread::sleep(Duration::from_millis(50));
            dpone_engine::update_batch(store.as_ref(), &self.holder, &self.id, 40, &pause, |r| {
                if r.fingerprint != self.fingerprint || (r.complete && !self.named) {
                    // A new operation over this selection starts from nothing.
                    *r = BatchRecord { operation: self.id.clone(), fingerprint: self.fingerprint.clone(), ..Default::default() };
                }
                change(r)
            })
        });
        if let Err(e) = result {
            eprintln!("warning: the operation record was not updated ({}): a rerun may run finished processes again", safe(&e.message));
        }
    }

    /// Records how a process ended, when it wrote anything (a refused or
    /// unavailable process leaves no trace).
    fn note(&self, e: &Ended) {
        let status = match e.end {
            ProcessEnd::Succeeded => "succeeded",
            ProcessEnd::Failed(k @ (FailureKind::Failed | FailureKind::OutcomeUnknown | FailureKind::Interrupted)) => k.status(),
            _ => return,
        };
        let record = ProcessRecord {
            status: status.to_string(),
            run_id: e.doc["journal_run_id"].as_str().map(str::to_string),
            summary: envelope::summary_of(&e.doc),
        };
        self.write(|r| {
            r.processes.insert(e.label.clone(), record);
        });
    }
}
