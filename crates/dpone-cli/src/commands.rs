//! The commands that read a manifest (validate, plan, quickstart) and
//! what they share with `run` (`run.rs`) and `status`: loading a manifest
//! into its processes, planning and wiring one process. Each command
//! returns the process exit code.

use crate::adapters::{self, Adapters, AnyTarget};
use crate::output;
use crate::state::StoreChoice;
use crate::{Format, IntervalArgs};
use dpone_core::delivery::Delivery;
use dpone_core::manifest::select::{self, Selection};
use dpone_core::manifest::{self, ExpandInput, Loaded, Manifest, Process};
use dpone_core::plan::{Interval, Plan};
use dpone_core::ports::{Source, Target};
use dpone_core::{Diagnostic, DiagnosticKind, Diagnostics};
use dpone_engine::RunOptions;
use std::path::{Path, PathBuf};

pub use dpone_engine::{EXIT_CONFIG, EXIT_FAILED, EXIT_OK};

/// The built-in var `env_code`: `ENV_CODE`, as the original reads it (default `dev`).
fn env_code() -> String {
    std::env::var("ENV_CODE").ok().filter(|v| !v.is_empty()).unwrap_or_else(|| "dev".into())
}

/// Reads and validates a manifest into its processes.
pub fn load(path: &Path) -> Result<Loaded, Diagnostics> {
    let text = read_manifest(path).map_err(Diagnostics::one)?;
    let presets = crate::conventions::read_presets(path, &text);
    crate::registry::install();
    manifest::load_processes_with(&text, &ExpandInput { manifest_path: path.display().to_string(), env_code: env_code() }, &presets)
}

/// The one process a command about one target acts on: the only one, or
/// the one `--selector` names.
pub fn pick<'a>(loaded: &'a Loaded, selector: Option<&str>) -> Result<&'a Process, Diagnostics> {
    match (selector, loaded.processes.as_slice()) {
        (None, [only]) => Ok(only),
        (None, all) => {
            let names: Vec<&str> = all.iter().take(10).map(Process::label).collect();
            Err(Diagnostic::new("selector_required", "--selector", format!("the manifest describes {} processes", all.len()))
                .hint(format!("name one with --selector: {}{}", names.join(", "), if all.len() > 10 { ", ..." } else { "" }))
                .into())
        }
        (Some(s), _) => Ok(select::select(loaded, &Selection { selector: Some(s.to_string()), ..Selection::default() })?.remove(0)),
    }
}

/// The manifest's text, read with a bound: only a regular file (not a
/// FIFO, which would block, nor a device such as /dev/zero, which never
/// ends), and at most the document limit plus one byte, so that neither
/// the time nor the memory spent depends on what the path points to.
pub(crate) fn read_manifest(path: &Path) -> Result<String, Diagnostic> {
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

pub fn interval(args: &IntervalArgs) -> Interval {
    let pick = |flag: &Option<String>, flag_name: &'static str, var: &'static str| {
        flag.clone().map(|v| (v, flag_name)).or_else(|| std::env::var(var).ok().filter(|v| !v.is_empty()).map(|v| (v, var)))
    };
    Interval {
        end: pick(&args.interval_end, "--interval-end", "DPONE_INTERVAL_END"),
        start: pick(&args.interval_start, "--interval-start", "DPONE_INTERVAL_START"),
    }
}

pub fn base_dir(manifest_path: &Path) -> PathBuf {
    manifest_path.parent().map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p }).unwrap_or(Path::new(".")).to_path_buf()
}

/// The work dir (`--work-dir`, `DPONE_WORK_DIR`, `runtime.storage.work_dir`
/// or `.dpone` next to the manifest; `workdir.rs`).
pub fn work_dir(manifest: &Manifest, manifest_path: &Path) -> PathBuf {
    crate::workdir::resolve(manifest, manifest_path).path
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("dpone-worker").build().expect("the async runtime starts")
}

/// Lets each adapter of every process build itself (no I/O: connections
/// open on use), so that `params` blocks are checked too: unknown keys,
/// ports out of range, TLS settings. A connection read from an
/// environment variable that is not set here is not an error of the
/// manifest: the run's environment provides it.
fn check_connections(path: &Path, loaded: &Loaded) -> Result<(), Diagnostics> {
    let base = base_dir(path);
    let mut found = Vec::new();
    for p in &loaded.processes {
        let m = &p.manifest;
        let checks = [adapters::AnySource::build(m, &base).err(), adapters::build_target(m, &base).err(), StoreChoice::of(m, path).err()];
        for mut d in checks.into_iter().flatten() {
            if !matches!(d.kind, DiagnosticKind::MissingConnectionEnv { .. }) {
                m.locate(&mut d);
                found.push(d);
            }
        }
    }
    if found.is_empty() { Ok(()) } else { Err(manifest::sorted(found)) }
}

/// Notes `validate` and `list` print about a valid manifest (none today:
/// every key they accept is used).
pub fn validate(path: &Path, format: Format) -> u8 {
    let loaded = load(path).and_then(|l| check_connections(path, &l).map(|_| l));
    match loaded {
        Ok(l) => {
            match format {
                Format::Json => output::print_json(&serde_json::json!({
                    "valid": true,
                    "manifest": path,
                    "fingerprint": l.fingerprint(),
                    "processes": l.processes.iter().map(crate::listing::summary).collect::<Vec<_>>(),
                })),
                Format::Text => {
                    let file = output::safe(&path.display().to_string()).into_owned();
                    match (l.batch, l.processes.as_slice()) {
                        (false, [p]) => {
                            let m = &p.manifest;
                            println!("{file}: valid ({} -> {}, {})", m.source.system, m.sink.system, strategy_name(m))
                        }
                        (_, all) => {
                            println!("{file}: valid ({} {})", all.len(), if all.len() == 1 { "process" } else { "processes" });
                            crate::listing::print_table(&l);
                        }
                    }
                }
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

pub fn strategy_name(m: &Manifest) -> &'static str {
    match m.sink.strategy {
        manifest::Strategy::FullRefresh { .. } => "full_refresh",
        manifest::Strategy::Replace { .. } => "replace",
        manifest::Strategy::IncrementalAppend { .. } => "incremental_append",
        manifest::Strategy::IncrementalMerge { .. } => "incremental_merge",
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

/// Plans and wires one process; any problem here is a configuration
/// error. Every diagnostic gets the file position (and path) where the
/// user wrote the value.
pub fn prepare(path: &Path, manifest: &Manifest, args: &IntervalArgs) -> Result<(Plan, Adapters), Diagnostics> {
    let located = |mut d: Diagnostic| {
        manifest.locate(&mut d);
        Diagnostics::one(d)
    };
    let mut plan = Plan::build(manifest, &interval(args), &crate::registry::REGISTRY).map_err(located)?;
    let adapters = adapters::build(manifest, &base_dir(path)).map_err(located)?;
    // Paths name files: two spellings of one file are one database.
    plan.refusals.extend(adapters::same_table(manifest, &base_dir(path)));
    plan.refusals.iter_mut().for_each(|d| manifest.locate(d));
    Ok((plan, adapters))
}

/// The one process of a manifest (or the one `--selector` names) and its
/// target, without a plan (status and the operator commands need neither
/// the interval nor the source).
pub fn prepare_for_status(path: &Path, selector: Option<&str>) -> Result<(Manifest, AnyTarget, StoreChoice), Diagnostics> {
    let loaded = load(path)?;
    let manifest = pick(&loaded, selector)?.manifest.clone();
    let located = |mut d: Diagnostic| {
        manifest.locate(&mut d);
        Diagnostics::one(d)
    };
    let target = adapters::build_target(&manifest, &base_dir(path)).map_err(located)?;
    let store = StoreChoice::of(&manifest, path).map_err(located)?;
    Ok((manifest, target, store))
}

/// The plan of one process without connecting anywhere (`--offline`):
/// the adapters are built to check their settings, but a connection whose
/// environment variable is not set here is not a problem of the plan (as
/// for `validate`): the run's environment provides it.
fn plan_offline(path: &Path, manifest: &Manifest, args: &IntervalArgs) -> Result<Plan, Diagnostics> {
    let located = |mut d: Diagnostic| {
        manifest.locate(&mut d);
        Diagnostics::one(d)
    };
    let mut plan = Plan::build(manifest, &interval(args), &crate::registry::REGISTRY).map_err(located)?;
    let base = base_dir(path);
    let built = [adapters::AnySource::build(manifest, &base).err(), adapters::build_target(manifest, &base).err()];
    if let Some(d) = built.into_iter().flatten().find(|d| !matches!(d.kind, DiagnosticKind::MissingConnectionEnv { .. })) {
        return Err(located(d));
    }
    plan.refusals.extend(adapters::same_table(manifest, &base));
    plan.refusals.iter_mut().for_each(|d| manifest.locate(d));
    Ok(plan)
}

/// Plans and probes one process.
fn plan_one(path: &Path, manifest: &Manifest, args: &IntervalArgs, offline: bool) -> Result<Plan, Diagnostics> {
    if offline {
        return plan_offline(path, manifest, args);
    }
    let (mut plan, adapters) = prepare(path, manifest, args)?;
    if plan.refusals.is_empty() {
        let probed = runtime().block_on(async {
            let (s, t) = (adapters.source.as_ref(), adapters.target.as_ref());
            // Tables recorded by this target's journal are not foreign.
            let store = match StoreChoice::of(manifest, path).ok().map(|s| s.open(false)) {
                Some(Ok(Some(store))) => Some(store),
                _ => None,
            };
            let ours = store
                .as_ref()
                .and_then(|store| dpone_engine::read_journal(store.as_ref(), &t.scope()).ok().flatten().map(|(_, j)| j.owned))
                .unwrap_or_default();
            let p = dpone_engine::probe(manifest, &plan, Some(s), t, Some(&ours)).await?;
            // An append's plan names the stored mark and the batch a run
            // would read now (read-only: the source's snapshot is a read
            // transaction, closed right after).
            let batch = match (&plan.incremental, p.cursor_kind, p.refusals.is_empty()) {
                (Some(inc), Some(kind), true) => {
                    let mark = t.peek_mark().await?;
                    s.open_snapshot().await?;
                    let max = s.cursor_max(&inc.column, kind).await;
                    let _ = s.close_snapshot().await;
                    Some(p.batch(&inc.column, kind, mark, max?))
                }
                _ => None,
            };
            // A merge's plan says whether the target finds a key's rows by an index.
            let merge = match plan.incremental.as_ref().filter(|_| p.refusals.is_empty()) {
                Some(dpone_core::plan::IncrementalPlan { unique_key: Some(unique_key), column, .. }) => {
                    t.merge_shape(&dpone_core::ports::MergeKey { unique_key: unique_key.clone(), cursor: column.clone() }).await?
                }
                _ => None,
            };
            // `delivery: changed`: what a run would decide now (read-only).
            let decisions = match plan.window.as_ref().filter(|w| w.delivery == Delivery::Changed && p.refusals.is_empty()) {
                Some(w) => {
                    let records = match &store {
                        Some(store) => dpone_engine::read_records(store.as_ref(), &dpone_engine::records_prefix(&t.scope(), &w.column))?,
                        None => Default::default(),
                    };
                    s.open_snapshot().await?;
                    let d = dpone_engine::decisions(s, t, w, &p.target_columns, plan.staging.digest, &records).await;
                    let _ = s.close_snapshot().await;
                    Some(d?)
                }
                None => None,
            };
            Ok::<_, dpone_core::ports::AdapterError>((p, batch, decisions, merge))
        });
        match probed {
            Ok((mut p, batch, decisions, merge)) => {
                if let Some(w) = plan.window.as_mut() {
                    w.decisions = decisions;
                }
                if let Some(inc) = plan.incremental.as_mut() {
                    inc.merge = merge;
                }
                if let (Some(inc), Some(b)) = (plan.incremental.as_mut(), batch) {
                    // A mark the manifest's cursor cannot continue refuses the run.
                    p.refusals.extend(b.previous.as_ref().and_then(|m| dpone_core::incremental::mark_mismatch(&inc.column, b.kind, m)));
                    inc.stored_mark = b.previous.clone();
                    inc.reads = Some(b.describe());
                    inc.batch = Some(b);
                }
                p.refusals.iter_mut().for_each(|d| manifest.locate(d));
                plan.generation = p.generation.clone();
                plan.set_access(p.access.clone(), &p.read_columns);
                plan.null_checks = p.null_checks.clone();
                plan.datetime64_range = p.datetime64_range;
                plan.add_probe(Some(p.read_columns.clone()).filter(|c| !c.is_empty()), p.refusals)
            }
            Err(e) => {
                // The plan writes nothing: a server that cannot be probed
                // is a run that could not start (exit 2, README).
                let d = Diagnostic { hint: e.hint, ..Diagnostic::new(e.code, "", format!("probing failed: {}", e.message)) };
                return Err(Diagnostics::one(d));
            }
        }
    }
    Ok(plan)
}

/// `dpone plan`: the plan of every selected process (text, or one JSON
/// document per line); exit 0 when every plan is runnable.
pub fn plan(path: &Path, args: &IntervalArgs, selection: &Selection, format: Format, offline: bool) -> u8 {
    // Refused: the diagnostics on stderr and, with --format json, one
    // document on stdout saying so (as `run` does).
    let refused = |d: &Diagnostics, process: Option<&manifest::Process>| {
        if format == Format::Json {
            let code = d.0.first().map(|d| d.code.clone());
            let mut v = serde_json::json!({"manifest": path, "runnable": false, "error_code": code, "refusals": d});
            if let Some(p) = process {
                v["process"] = serde_json::json!(p.name);
                v["selector"] = serde_json::json!(p.selector);
            }
            println!("{}", serde_json::to_string(&v).expect("JSON values serialize"));
        }
        output::print_diagnostics(path, d);
    };
    let loaded = match load(path) {
        Ok(l) => l,
        Err(d) => {
            refused(&d, None);
            return EXIT_CONFIG;
        }
    };
    let chosen = match select::select(&loaded, selection) {
        Ok(c) => c,
        Err(d) => {
            refused(&d, None);
            return EXIT_CONFIG;
        }
    };
    let many = chosen.len() > 1;
    let mut code = EXIT_OK;
    for p in chosen {
        if many && format == Format::Text {
            println!("== {} ({})", output::safe(p.label()), output::safe(&p.name));
        }
        match plan_one(path, &p.manifest, args, offline) {
            Ok(plan) => {
                if format == Format::Json {
                    let mut v = serde_json::to_value(&plan).expect("plans serialize");
                    v["process"] = serde_json::json!(p.name);
                    v["selector"] = serde_json::json!(p.selector);
                    println!("{}", serde_json::to_string(&v).expect("JSON values serialize"));
                } else {
                    output::print_plan(&plan, format);
                }
                if !plan.is_runnable() {
                    code = EXIT_CONFIG;
                }
            }
            Err(d) => {
                refused(&d, Some(p));
                code = EXIT_CONFIG;
            }
        }
        if many && format == Format::Text {
            println!();
        }
    }
    code
}

/// How this process runs: this host, this holder, SPEC's lease (and, in a
/// test build only, the environment's failpoints and lease TTL).
/// With a store shared by hosts, a lease is taken over only when it
/// expired: a holder's host name does not tell its process namespace apart
/// (two containers may share one), so "no such process here" proves nothing.
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
    let run_args = crate::RunArgs { jobs: 1, run_id: None, retry_attempts: 0, retry_backoff_seconds: 0.0, delivery: None };
    let format = if format == Format::Json { crate::RunFormat::Json } else { crate::RunFormat::Text };
    crate::run::run(&crate::run::Request {
        path: &manifest_path,
        interval: &args,
        selection: Selection::default(),
        args: &run_args,
        format,
    })
}
