//! `dpone audit`: compares a windowed manifest's window on the source and
//! the target by content (docs/audit.md). Each server digests its own
//! rows (`Source::content_digests`, `Target::content_digests`); differing
//! chunks are narrowed down to rows by the engine (`dpone_engine::audit`).
//!
//! Read-only: nothing is written to either server or to the state store,
//! and no lease is taken, so a running run never blocks an audit (nor the
//! other way round). Exit codes: 0 every chunk equal, 1 a chunk differs, 2
//! the audit could not compare (configuration, a type without a canonical
//! form, a route without content digests, a server that could not be
//! read). A batch of several processes exits with the worst of them, 2
//! before 1.

use crate::commands::{self, EXIT_CONFIG, EXIT_OK};
use crate::output;
use crate::{Format, IntervalArgs};
use dpone_core::audit::bisect::Limits;
use dpone_core::audit::report::{AuditError, AuditReport, AuditStatus, Seconds, WindowRef};
use dpone_core::audit::{AuditSpec, KeyScope};
use dpone_core::manifest::select::{self, Selection};
use dpone_core::manifest::{Manifest, Strategy};
use dpone_core::ports::{AdapterError, ErrorClass, ErrorKind, Source, Target};
use std::path::Path;
use std::time::Instant;

/// What `dpone audit` was asked, besides the manifest.
pub struct Request<'a> {
    pub path: &'a Path,
    pub interval: &'a IntervalArgs,
    pub selection: Selection,
    pub format: Format,
    /// `--key`: key columns that tell rows with one window value apart.
    pub key: Option<Vec<String>>,
    pub show_values: bool,
    /// `--query-timeout`: seconds one server query may take.
    pub query_timeout_s: u64,
}

/// Runs the audit of every selected process; returns the exit code.
pub fn audit(r: &Request<'_>) -> u8 {
    let refused = |d: &dpone_core::Diagnostics| {
        if r.format == Format::Json {
            let first = d.0.first();
            let error = AuditError {
                code: first.map(|d| d.code.clone()).unwrap_or_default(),
                message: first.map(|d| d.message.clone()).unwrap_or_default(),
                hint: first.and_then(|d| d.hint.clone()),
            };
            print_report(&AuditReport::failed(AuditStatus::Refused, String::new(), error), r.format);
        }
        output::print_diagnostics(r.path, d);
        EXIT_CONFIG
    };
    let loaded = match commands::load(r.path) {
        Ok(l) => l,
        Err(d) => return refused(&d),
    };
    let chosen = match select::select(&loaded, &r.selection) {
        Ok(c) => c,
        Err(d) => return refused(&d),
    };
    let mut code = EXIT_OK;
    for p in chosen {
        if chosen_many(&loaded) && r.format == Format::Text {
            println!("== {} ({})", output::safe(p.label()), output::safe(&p.name));
        }
        let mut report = audit_one(r, &p.manifest);
        report.process = Some(p.name.clone());
        print_report(&report, r.format);
        code = worse(code, report.status.exit_code());
    }
    code
}

fn chosen_many(loaded: &dpone_core::manifest::Loaded) -> bool {
    loaded.processes.len() > 1
}

/// 2 before 1 before 0.
fn worse(a: u8, b: u8) -> u8 {
    match (a, b) {
        (2, _) | (_, 2) => 2,
        (1, _) | (_, 1) => 1,
        _ => 0,
    }
}

/// A refusal of the configuration (exit 2).
fn refusal(route: &str, code: &str, message: String, hint: &str) -> AuditReport {
    AuditReport::failed(AuditStatus::Refused, route.to_string(), AuditError { code: code.into(), message, hint: Some(hint.into()) })
}

/// The audit of one process.
fn audit_one(r: &Request<'_>, manifest: &Manifest) -> AuditReport {
    let route = format!("{}->{}", manifest.source.system, manifest.sink.system);
    let Strategy::Replace { window } = &manifest.sink.strategy else {
        let hint = "dpone audit compares a `mode: replace` manifest with `sink.strategy.window`";
        return refusal(
            &route,
            "audit_not_windowed",
            format!("the manifest's strategy is {}, not a windowed replace", commands::strategy_name(manifest)),
            hint,
        );
    };
    let (plan, adapters) = match commands::prepare(r.path, manifest, r.interval) {
        Ok(p) => p,
        Err(d) => {
            let d = d.0.into_iter().next();
            let (code, message, hint) = d.map(|d| (d.code, d.message, d.hint.unwrap_or_default())).unwrap_or_default();
            return refusal(&route, &code, message, &hint);
        }
    };
    let Some(w) = plan.window.clone() else {
        return refusal(&route, "audit_not_windowed", "the plan has no window".into(), "pass --interval-end");
    };
    let key = r.key.clone().unwrap_or_else(|| unique_key(manifest));
    let started = Instant::now();
    let deadline = std::time::Duration::from_secs(r.query_timeout_s);
    let outcome = commands::runtime().block_on(async {
        let (source, target) = (adapters.source.as_ref(), adapters.target.as_ref());
        // The adapters' own calls before the audit's: bounded here (the
        // audit's queries carry their own deadlines).
        let columns =
            within(deadline, "describing the source", source.describe(manifest.source.columns.as_deref())).await.map_err(configuration)?;
        if within(deadline, "describing the target", target.describe()).await.map_err(configuration)?.is_none() {
            return Err(AdapterError::unsupported(
                "audit_target_missing",
                format!("the target table {} does not exist", manifest.sink.table),
            )
            .hint("the audit compares an existing target with its source"));
        }
        let spec = AuditSpec {
            columns,
            window_column: window.column.clone(),
            key: key.clone(),
            key_scope: KeyScope::ALL,
            query_timeout_ms: r.query_timeout_s.saturating_mul(1000),
        };
        spec.classes()?;
        spec.key_positions()?;
        // One source version for every level of the bisection, where the
        // source has snapshots (PostgreSQL: the audit's queries import it).
        within(deadline, "opening the source's snapshot", source.open_snapshot()).await?;
        let audited = dpone_engine::audit::audit_window(source, target, &spec, &w.chunks, &Limits::default()).await;
        let _ = within(deadline, "closing the source's snapshot", source.close_snapshot()).await;
        Ok((spec, audited?))
    });
    let total = started.elapsed().as_secs_f64();
    match outcome {
        Ok((spec, audited)) => {
            let names = spec.columns.iter().map(|c| c.name.clone()).collect();
            let window = WindowRef { column: w.column.clone(), start: w.start, end: w.end };
            let mut report = AuditReport::compared(plan.route.name.clone(), window, names, key, audited, r.show_values);
            // Besides the digests and the narrowing: describing both sides, the snapshot.
            report.seconds = Seconds { total, ..report.seconds };
            report
        }
        Err(e) => {
            let status = if e.kind == ErrorKind::Unsupported { AuditStatus::Refused } else { AuditStatus::Unavailable };
            let mut report =
                AuditReport::failed(status, plan.route.name.clone(), AuditError { code: e.code, message: e.message, hint: e.hint });
            report.seconds.total = total;
            report
        }
    }
}

/// `call` within `limit`, else an `audit_deadline` error saying `what`.
async fn within<T>(
    limit: std::time::Duration,
    what: &str,
    call: impl std::future::Future<Output = Result<T, AdapterError>>,
) -> Result<T, AdapterError> {
    tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
        Err(AdapterError::transient("audit_deadline", format!("{what} did not finish within {} s", limit.as_secs()))
            .hint("check the server's load and network; --query-timeout sets the limit"))
    })
}

/// A describe failure that no retry can help and that is not the
/// connection's (a missing table or column, a type the adapter maps to
/// nothing) is the manifest's problem: refused, not unavailable.
fn configuration(e: AdapterError) -> AdapterError {
    if e.class == ErrorClass::Permanent && !e.at_connection { AdapterError { kind: ErrorKind::Unsupported, ..e } } else { e }
}

/// The manifest's unique key, where its strategy has one.
fn unique_key(manifest: &Manifest) -> Vec<String> {
    match &manifest.sink.strategy {
        Strategy::IncrementalMerge { unique_key, .. } => unique_key.clone(),
        _ => Vec::new(),
    }
}

fn print_report(report: &AuditReport, format: Format) {
    match format {
        Format::Json => println!("{}", serde_json::to_string(report).expect("reports serialize")),
        Format::Text => crate::audit_text::print(report),
    }
}
