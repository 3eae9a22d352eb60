//! The commands. Each returns the process exit code.

use crate::adapters::{self, Adapters, AnyTarget};
use crate::output::{self, RunOutcome};
use crate::state::StoreChoice;
use crate::{Format, IntervalArgs};
use dpone_core::manifest::{self, Manifest};
use dpone_core::plan::{Interval, Plan};
use dpone_core::ports::Target;
use dpone_core::{Diagnostic, Diagnostics};
use dpone_engine::RunOptions;
use std::path::{Path, PathBuf};

pub use dpone_engine::{EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK};

/// Reads and validates a manifest; problems are printed with the file name.
fn load(path: &Path) -> Result<Manifest, Diagnostics> {
    let text = read_manifest(path).map_err(Diagnostics::one)?;
    manifest::load(&text)
}

/// The manifest's text, read with a bound: only a regular file (not a
/// FIFO, which would block, nor a device such as /dev/zero, which never
/// ends), and at most the document limit plus one byte, so that neither
/// the time nor the memory spent depends on what the path points to.
fn read_manifest(path: &Path) -> Result<String, Diagnostic> {
    use std::io::Read;
    let unreadable = |e: std::io::Error| {
        Diagnostic::new("manifest_unreadable", "", format!("cannot read {}: {e}", path.display())).hint("check the manifest path")
    };
    let not_a_file = |what: &str| {
        Diagnostic::new("manifest_not_a_file", "", format!("{} is {what}, not a regular file", path.display()))
            .hint("pass the path of a manifest file (a YAML file)")
    };
    let kind = |m: &std::fs::Metadata| {
        use std::os::unix::fs::FileTypeExt;
        let t = m.file_type();
        match () {
            _ if t.is_file() => None,
            _ if t.is_dir() => Some("a directory"),
            _ if t.is_fifo() => Some("a FIFO"),
            _ if t.is_char_device() || t.is_block_device() => Some("a device"),
            _ if t.is_socket() => Some("a socket"),
            _ => Some("not a file"),
        }
    };
    // Checked before opening: opening a FIFO blocks until a writer comes.
    if let Some(what) = kind(&std::fs::metadata(path).map_err(unreadable)?) {
        return Err(not_a_file(what));
    }
    let file = std::fs::File::open(path).map_err(unreadable)?;
    // Again on the opened file, in case the path changed in between.
    if let Some(what) = kind(&file.metadata().map_err(unreadable)?) {
        return Err(not_a_file(what));
    }
    let limit = dpone_core::yaml::MAX_DOCUMENT_BYTES as u64;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).map_err(unreadable)?;
    if bytes.len() as u64 > limit {
        return Err(Diagnostic::new("manifest_too_large", "", format!("{} is larger than the limit of {limit} bytes", path.display()))
            .hint("split the manifest; dpone manifests describe one transfer each"));
    }
    String::from_utf8(bytes).map_err(|_| {
        Diagnostic::new("manifest_unreadable", "", format!("{} is not UTF-8 text", path.display())).hint("save the manifest as UTF-8")
    })
}

fn interval(args: &IntervalArgs) -> Interval {
    let pick = |flag: &Option<String>, flag_name: &'static str, var: &'static str| {
        flag.clone().map(|v| (v, flag_name)).or_else(|| std::env::var(var).ok().filter(|v| !v.is_empty()).map(|v| (v, var)))
    };
    Interval {
        end: pick(&args.interval_end, "--interval-end", "DPONE_INTERVAL_END"),
        start: pick(&args.interval_start, "--interval-start", "DPONE_INTERVAL_START"),
    }
}

pub(crate) fn base_dir(manifest_path: &Path) -> PathBuf {
    manifest_path.parent().map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p }).unwrap_or(Path::new(".")).to_path_buf()
}

pub fn work_dir(manifest: &Manifest, manifest_path: &Path) -> PathBuf {
    let base = base_dir(manifest_path);
    match &manifest.work_dir {
        Some(d) if Path::new(d).is_absolute() => PathBuf::from(d),
        Some(d) => base.join(d),
        None => base.join(".dpone"),
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("dpone-worker").build().expect("the async runtime starts")
}

/// Loads the manifest and lets each adapter build itself from it (no I/O:
/// connections open on use), so that `params` blocks are checked too:
/// unknown keys, ports out of range, TLS settings. A connection read from
/// an environment variable that is not set here is not an error of the
/// manifest: the run's environment provides it.
fn load_and_check_connections(path: &Path) -> Result<Manifest, Diagnostics> {
    let m = load(path)?;
    let base = base_dir(path);
    let mut found: Vec<Diagnostic> =
        [adapters::AnySource::build(&m, &base).err(), adapters::build_target(&m, &base).err(), StoreChoice::of(&m, path).err()]
            .into_iter()
            .flatten()
            .filter(|d| d.code != "missing_connection_env")
            .collect();
    if found.is_empty() {
        return Ok(m);
    }
    found.iter_mut().for_each(|d| m.locate(d));
    Err(Diagnostics(found))
}

pub fn validate(path: &Path, format: Format) -> u8 {
    match load_and_check_connections(path) {
        Ok(m) => {
            match format {
                Format::Json => output::print_json(&serde_json::json!({"valid": true, "manifest": path, "fingerprint": m.fingerprint})),
                Format::Text => println!(
                    "{}: valid ({} -> {}, {})",
                    output::safe(&path.display().to_string()),
                    m.source.system,
                    m.sink.system,
                    strategy_name(&m)
                ),
            }
            EXIT_OK
        }
        Err(d) => {
            if format == Format::Json {
                output::print_json(&serde_json::json!({"valid": false, "manifest": path, "errors": d}));
            }
            output::print_diagnostics(path, &d);
            EXIT_CONFIG
        }
    }
}

fn strategy_name(m: &Manifest) -> &'static str {
    match m.sink.strategy {
        manifest::Strategy::FullRefresh { .. } => "full_refresh",
        manifest::Strategy::Replace { .. } => "replace",
    }
}

pub fn manifest_schema() -> u8 {
    output::print_json(&manifest::schema::json_schema());
    EXIT_OK
}

pub fn type_matrix(format: Format) -> u8 {
    output::print_type_matrix(format);
    EXIT_OK
}

/// Loads, plans and wires; any problem here is a configuration error.
/// Every diagnostic gets the file position of its manifest path.
fn prepare(path: &Path, args: &IntervalArgs) -> Result<(Manifest, Plan, Adapters), Diagnostics> {
    let manifest = load(path)?;
    let located = |mut d: Diagnostic| {
        manifest.locate(&mut d);
        Diagnostics::one(d)
    };
    let mut plan = Plan::build(&manifest, &interval(args)).map_err(located)?;
    let adapters = adapters::build(&manifest, &base_dir(path)).map_err(located)?;
    // Paths name files: two spellings of one file are one database.
    plan.refusals.extend(adapters::same_sqlite_table(&manifest, &base_dir(path)));
    plan.refusals.iter_mut().for_each(|d| manifest.locate(d));
    Ok((manifest, plan, adapters))
}

/// Loads the manifest and builds its target and its state store's
/// location, without a plan (status and the operator commands need
/// neither the interval nor the source).
pub fn prepare_for_status(path: &Path) -> Result<(Manifest, AnyTarget, StoreChoice), Diagnostics> {
    let manifest = load(path)?;
    let located = |mut d: Diagnostic| {
        manifest.locate(&mut d);
        Diagnostics::one(d)
    };
    let target = adapters::build_target(&manifest, &base_dir(path)).map_err(located)?;
    let store = StoreChoice::of(&manifest, path).map_err(located)?;
    Ok((manifest, target, store))
}

/// The manifest's state store, or its diagnostic placed in the file.
fn store_of(manifest: &Manifest, path: &Path) -> Result<StoreChoice, Diagnostics> {
    StoreChoice::of(manifest, path).map_err(|mut d| {
        manifest.locate(&mut d);
        Diagnostics::one(d)
    })
}

pub fn plan(path: &Path, args: &IntervalArgs, format: Format, offline: bool) -> u8 {
    let (manifest, mut plan, adapters) = match prepare(path, args) {
        Ok(v) => v,
        Err(d) => {
            output::print_diagnostics(path, &d);
            return EXIT_CONFIG;
        }
    };
    let store = match store_of(&manifest, path) {
        Ok(s) => s,
        Err(d) => {
            output::print_diagnostics(path, &d);
            return EXIT_CONFIG;
        }
    };
    if !offline && plan.refusals.is_empty() {
        let probed = runtime().block_on(async {
            let (s, t) = (adapters.source.as_ref(), adapters.target.as_ref());
            // Tables recorded by this target's journal are not foreign.
            let ours = match store.open(false) {
                Ok(Some(store)) => {
                    dpone_engine::read_journal(store.as_ref(), &t.scope()).ok().flatten().map(|(_, j)| j.owned).unwrap_or_default()
                }
                _ => Default::default(),
            };
            dpone_engine::probe(&manifest, &plan, Some(s), t, &ours).await
        });
        match probed {
            Ok(mut p) => {
                p.refusals.iter_mut().for_each(|d| manifest.locate(d));
                plan.generation = p.generation.clone();
                plan.null_checks = p.null_checks.clone();
                plan.add_probe(Some(p.read_columns.clone()).filter(|c| !c.is_empty()), p.refusals)
            }
            Err(e) => {
                // The plan writes nothing: a server that cannot be probed
                // is a run that could not start (exit 2, README).
                let d = Diagnostic { hint: e.hint, ..Diagnostic::new(e.code, "", format!("probing failed: {}", e.message)) };
                output::print_diagnostics(path, &Diagnostics::one(d));
                return EXIT_CONFIG;
            }
        }
    }
    output::print_plan(&plan, format);
    if plan.is_runnable() { EXIT_OK } else { EXIT_CONFIG }
}

pub fn run(path: &Path, args: &IntervalArgs, format: Format) -> u8 {
    let (manifest, plan, adapters) = match prepare(path, args) {
        Ok(v) => v,
        Err(d) => return output::report_refusal(path, None, &d, format),
    };
    // Refusals known without a connection stop the run before any I/O.
    if !plan.refusals.is_empty() {
        return output::report_refusal(path, Some(&plan), &Diagnostics(plan.refusals.clone()), format);
    }
    let store = match store_of(&manifest, path) {
        Ok(s) => s,
        Err(d) => return output::report_refusal(path, Some(&plan), &d, format),
    };
    let mut options = run_options(work_dir(&manifest, path), &store);
    options.interval_origin = plan.window.as_ref().and(interval(args).end.map(|(_, origin)| origin.to_string()));
    options.progress = if format == Format::Text { crate::progress::for_terminal() } else { None };
    let opener = move |create: bool| store.open(create);
    let mut outcome = execute(&manifest, &plan, adapters, &opener, &options);
    if let RunOutcome::Failed(f) = &mut outcome {
        f.refusals.iter_mut().for_each(|d| manifest.locate(d));
    }
    output::report_run(path, &plan, &outcome, format)
}

/// How this process runs: this host, this holder, SPEC's lease (and, in a
/// test build only, the environment's failpoints and lease TTL). With a
/// store shared by hosts, a lease is taken over only when it expired: a
/// holder's host name does not tell its process namespace apart (two
/// containers may share one), so "no such process here" proves nothing.
pub fn run_options(work_dir: PathBuf, store: &StoreChoice) -> RunOptions {
    let host = crate::host::ProcessHost { local_liveness: !store.is_shared() };
    #[allow(unused_mut)]
    let mut options = RunOptions::new(work_dir, crate::host::holder(), std::sync::Arc::new(host));
    #[cfg(feature = "failpoints")]
    {
        options.failpoints = crate::failpoints::from_env();
        if let Some(ttl) = crate::failpoints::lease_ttl_ms() {
            options.lease_ttl_ms = ttl;
        }
    }
    options
}

/// The operator of `resolve` / `abandon`: this process, with the run's lease TTL.
pub fn operator(store: &StoreChoice) -> dpone_engine::Operator {
    let o = run_options(PathBuf::new(), store);
    dpone_engine::Operator { holder: o.holder, lease_ttl_ms: o.lease_ttl_ms, host: o.host }
}

/// Probes and runs under the target's lease. The first SIGINT/SIGTERM
/// asks the run to stop cooperatively (workers joined, staging and journal
/// kept for resumption); a second one exits at once.
pub fn execute(
    manifest: &Manifest,
    plan: &Plan,
    adapters: Adapters,
    open_store: &dpone_engine::StoreOpener,
    options: &RunOptions,
) -> RunOutcome {
    runtime().block_on(async {
        let cancel = options.cancel.clone();
        let work = async {
            match dpone_engine::execute(manifest, plan, adapters.source, adapters.target, open_store, options).await {
                Ok(report) => RunOutcome::Succeeded(report),
                Err(f) => RunOutcome::Failed(f),
            }
        };
        tokio::pin!(work);
        tokio::select! {
            outcome = &mut work => return outcome,
            _ = shutdown_signal() => {
                eprintln!("interrupt received: stopping the run cooperatively (press Ctrl-C again to exit at once)");
                cancel.trigger();
            }
        }
        // A cooperative stop reports its run (exit 130 from its kind); a
        // second signal, or a stop that takes longer than the grace period
        // (a worker blocked in a driver call), exits at once.
        tokio::select! {
            outcome = &mut work => outcome,
            _ = shutdown_signal() => RunOutcome::Interrupted,
            _ = tokio::time::sleep(STOP_GRACE) => {
                eprintln!("the run did not stop within {} s; exiting", STOP_GRACE.as_secs());
                RunOutcome::Interrupted
            }
        }
    })
}

/// How long a cooperative stop may take before the process exits anyway.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("signal handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

const QUICKSTART_MANIFEST: &str = include_str!("../../../examples/quickstart/manifest.yaml");
pub const QUICKSTART_INTERVAL_END: &str = "2026-09-09T00:00:00Z";

pub fn quickstart(dir: &Path, format: Format) -> u8 {
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("error[quickstart_dir]: cannot create {}: {e}", dir.display());
        return EXIT_CONFIG;
    }
    let manifest_path = dir.join("manifest.yaml");
    if !manifest_path.exists()
        && let Err(e) = std::fs::write(&manifest_path, QUICKSTART_MANIFEST)
    {
        eprintln!("error[quickstart_dir]: cannot write {}: {e}", manifest_path.display());
        return EXIT_CONFIG;
    }
    match dpone_sqlite::demo::seed_quickstart(&dir.join("source.db"), &dir.join("target.db")) {
        Ok((src, dst)) => {
            if format == Format::Text {
                if src {
                    println!("seeded     {} (synthetic events, 2026-08-26 .. 2026-09-12)", dir.join("source.db").display());
                }
                if dst {
                    println!("seeded     {} (older rows, stale window rows, NULL timestamps)", dir.join("target.db").display());
                }
                println!("manifest   {}", manifest_path.display());
                println!("command    dpone run {} --interval-end {QUICKSTART_INTERVAL_END}", manifest_path.display());
            }
        }
        Err(e) => {
            eprintln!("error[quickstart_seed]: seeding the example databases failed: {e}");
            return EXIT_CONFIG;
        }
    }
    let args = IntervalArgs { interval_end: Some(QUICKSTART_INTERVAL_END.to_string()), interval_start: None };
    run(&manifest_path, &args, format)
}
