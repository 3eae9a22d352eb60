//! `dpone`: the command line and the composition root.
//!
//! Parses flags, loads the manifest, builds the plan, wires the adapters a
//! route needs and hands them to the engine. Exit codes: 0 success, 1 the
//! run executed and failed, 2 configuration error (before any I/O),
//! 130 interrupted. `dpone audit`: 0 equal, 1 different, 2 could not
//! compare (`audit.rs`).

mod adapters;
mod audit;
mod audit_text;
mod backfill;
mod ci;
mod commands;
mod conventions;
mod envelope;
#[cfg(feature = "failpoints")]
mod failpoints;
mod host;
mod listing;
mod mark;
mod output;
mod progress;
mod redact;
pub mod registry;
mod run;
mod state;
mod status;
mod workdir;

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "dpone", version, about = "Move typed data between databases safely and fast")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Folder for state.db, evidence and batch records; wins over DPONE_WORK_DIR and runtime.storage.work_dir.
    #[arg(long, global = true, value_name = "DIR")]
    work_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// Output of `dpone run`: text for people, JSON lines for programs (one
/// document per process), Markdown for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RunFormat {
    Text,
    Json,
    Md,
}

/// Which processes of a manifest a command acts on (batch manifests).
#[derive(clap::Args, Debug, Clone)]
pub struct SelectArgs {
    /// One process: `<schema>.<table>`, the table's `id`, or the process name.
    #[arg(long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// Processes whose selector, name or <schema>.<table> match this glob (`*`, `?`); repeatable.
    #[arg(long, value_name = "GLOB")]
    pub select: Vec<String>,
    /// Leave out processes matching this glob; repeatable.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Refuse a selection of more processes than this.
    #[arg(long, value_name = "N", default_value_t = dpone_core::manifest::select::DEFAULT_MAX_SELECTED)]
    pub max_selected: usize,
}

impl SelectArgs {
    pub fn selection(&self) -> dpone_core::manifest::select::Selection {
        dpone_core::manifest::select::Selection {
            selector: self.selector.clone(),
            select: self.select.clone(),
            exclude: self.exclude.clone(),
            max_selected: self.max_selected,
        }
    }
}

/// How `dpone run` executes the selected processes.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Processes run at the same time (each with its own lease, journal and evidence).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub jobs: u32,
    /// The operation's id (e.g. the scheduler's run id); reusing it continues that operation.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Run a failed process again this many times; a retry resumes the run, it never publishes twice.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub retry_attempts: u32,
    /// Seconds to wait before each retry.
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0, value_parser = non_negative_seconds)]
    pub retry_backoff_seconds: f64,
    /// Overrides `sink.strategy.window.delivery`: `all` transfers every chunk of the window (a run resumed keeps the
    /// decisions it journaled).
    #[arg(long, value_enum, value_name = "all|changed")]
    pub delivery: Option<DeliveryArg>,
}

/// `--delivery`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryArg {
    All,
    Changed,
}

impl DeliveryArg {
    pub fn delivery(self) -> dpone_core::delivery::Delivery {
        match self {
            DeliveryArg::All => dpone_core::delivery::Delivery::All,
            DeliveryArg::Changed => dpone_core::delivery::Delivery::Changed,
        }
    }
}

fn non_negative_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not a number of seconds from 0 to 86400")),
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct IntervalArgs {
    /// Window anchor (RFC 3339, e.g. 2026-09-09T00:00:00Z); falls back to DPONE_INTERVAL_END.
    #[arg(long, value_name = "INSTANT")]
    pub interval_end: Option<String>,
    /// Optional cross-check of the window start; falls back to DPONE_INTERVAL_START.
    #[arg(long, value_name = "INSTANT")]
    pub interval_start: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Validate a manifest or print its JSON Schema.
    Manifest {
        #[command(subcommand)]
        command: ManifestCommand,
    },
    /// Show what a run would do: window, chunks, route, staging, publication, refusals.
    Plan {
        manifest: PathBuf,
        #[command(flatten)]
        interval: IntervalArgs,
        #[command(flatten)]
        select: SelectArgs,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Skip the read-only probes of source and target.
        #[arg(long)]
        offline: bool,
    },
    /// Run the manifest's selected processes (or resume their unfinished runs).
    Run {
        manifest: PathBuf,
        #[command(flatten)]
        interval: IntervalArgs,
        #[command(flatten)]
        select: SelectArgs,
        #[command(flatten)]
        run: RunArgs,
        #[arg(long, value_enum, default_value_t = RunFormat::Text)]
        format: RunFormat,
    },
    /// Compare the window's rows on the source and the target by content, each server digesting its own (read-only).
    Audit {
        manifest: PathBuf,
        #[command(flatten)]
        interval: IntervalArgs,
        #[command(flatten)]
        select: SelectArgs,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Key columns that tell apart rows sharing one window value (comma-separated).
        #[arg(long, value_name = "C1,C2", value_delimiter = ',')]
        key: Option<Vec<String>>,
        /// Print every column's value of the differing rows (not only the key's).
        #[arg(long)]
        show_values: bool,
        /// Seconds one server query of the audit may take.
        #[arg(long, value_name = "SECONDS", default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
        query_timeout: u64,
    },
    /// Re-load a historical range window by window: each window a run of its own, resumable.
    Backfill {
        #[command(subcommand)]
        command: backfill::BackfillCommand,
    },
    /// What the run journal says about the manifest's target: state, chunks, what is visible, what to do.
    Status {
        manifest: PathBuf,
        /// The process of a batch manifest.
        #[arg(long, value_name = "SELECTOR")]
        selector: Option<String>,
        /// Show this run (a prefix is enough) instead of the target's latest.
        #[arg(long)]
        run_id: Option<String>,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Record an operator's verdict on a run whose publication outcome is unknown.
    Resolve {
        manifest: PathBuf,
        /// The process of a batch manifest.
        #[arg(long, value_name = "SELECTOR")]
        selector: Option<String>,
        /// What the operator established: `published` (the target is the run's generation) or `absent`.
        #[arg(long, value_name = "published|absent")]
        outcome: String,
    },
    /// Abandon an unfinished run (planned or staging) so that the next run starts over.
    Abandon {
        manifest: PathBuf,
        /// The process of a batch manifest.
        #[arg(long, value_name = "SELECTOR")]
        selector: Option<String>,
    },
    /// An incremental_append or incremental_merge target's high-water mark: show it, or deliberately move it.
    State {
        #[command(subcommand)]
        command: StateCommand,
    },
    /// Type mappings between systems.
    Schema {
        #[command(subcommand)]
        command: SchemaCommand,
    },
    /// Impact-aware acceptance: which checks a change needs, and whether they passed.
    Ci {
        #[command(subcommand)]
        command: ci::CiCommand,
    },
    /// Seed two SQLite databases and run the example window replace (no server needed).
    Quickstart {
        /// Folder for the example manifest, databases and evidence.
        #[arg(long, default_value = ".dpone-quickstart")]
        dir: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
}

#[derive(Subcommand, Debug)]
enum ManifestCommand {
    /// Check a manifest without connecting anywhere.
    Validate {
        manifest: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Print the manifest's JSON Schema (for editors).
    Schema,
    /// The manifest's processes: selector, name, route, strategy, tables.
    List {
        manifest: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// The expanded manifest of one process (credentials redacted).
    Render {
        manifest: PathBuf,
        /// The process (needed when the manifest has several).
        #[arg(long, value_name = "SELECTOR")]
        selector: Option<String>,
        /// text: YAML; json: JSON.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
}

#[derive(Subcommand, Debug)]
enum StateCommand {
    /// The mark stored in the target (read-only, no lease): column, type, value, the run that wrote it.
    Show {
        manifest: PathBuf,
        /// The process of a batch manifest.
        #[arg(long, value_name = "SELECTOR")]
        selector: Option<String>,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Move the mark to a value (`--to`) or clear it (`--clear`), journaled with who and why.
    Reset {
        manifest: PathBuf,
        /// The process of a batch manifest.
        #[arg(long, value_name = "SELECTOR")]
        selector: Option<String>,
        /// The new mark, a value of the cursor's type; the next run reads rows above it.
        #[arg(long, value_name = "VALUE", conflicts_with = "clear")]
        to: Option<String>,
        /// Remove the mark: the next run reads from the start (or initial_value).
        #[arg(long)]
        clear: bool,
        /// Why the mark moves (required; journaled with the operator).
        #[arg(long)]
        reason: Option<String>,
        /// The receipt `dpone state show` printed; refused if the mark moved since.
        #[arg(long, value_name = "RECEIPT")]
        expect: Option<String>,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Subcommand, Debug)]
enum SchemaCommand {
    /// Print the type mapping tables.
    TypeMatrix {
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
}

/// The `dpone` command: parses the command line, runs it, returns the exit code.
/// `dpone plan M | head`: a reader that closes stdout early ends the
/// process quietly, as SIGPIPE ends other Unix tools (Rust ignores SIGPIPE
/// so that a closed socket is an error, and printing then panics): exit 141
/// (128 + SIGPIPE), no panic text. Whatever the run journaled stays.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let text = payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied()).unwrap_or("");
        if text.starts_with("failed printing to stdout") && text.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info)
    }));
}

pub fn main() -> ExitCode {
    registry::install();
    quiet_on_closed_stdout();
    // Only panics are hidden from users by the default hook; errors are values.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("DPONE_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(progress::LogWriter)
        .with_target(false)
        .init();
    if let Some(dir) = cli.work_dir {
        workdir::set_flag(dir);
    }
    let code = match cli.command {
        Command::Manifest { command } => match command {
            ManifestCommand::Validate { manifest, format } => commands::validate(&manifest, format),
            ManifestCommand::Schema => commands::manifest_schema(),
            ManifestCommand::List { manifest, format } => listing::list(&manifest, format),
            ManifestCommand::Render { manifest, selector, format } => listing::render(&manifest, selector.as_deref(), format),
        },
        Command::Schema { command: SchemaCommand::TypeMatrix { format } } => commands::type_matrix(format),
        Command::Plan { manifest, interval, select, format, offline } => {
            commands::plan(&manifest, &interval, &select.selection(), format, offline)
        }
        Command::Run { manifest, interval, select, run, format } => {
            run::run(&run::Request { path: &manifest, interval: &interval, selection: select.selection(), args: &run, format })
        }
        Command::Audit { manifest, interval, select, format, key, show_values, query_timeout } => audit::audit(&audit::Request {
            path: &manifest,
            interval: &interval,
            selection: select.selection(),
            format,
            key,
            show_values,
            query_timeout_s: query_timeout,
        }),
        Command::Backfill { command } => backfill::main(command),
        Command::Quickstart { dir, format } => commands::quickstart(&dir, format),
        Command::Status { manifest, selector, run_id, format } => status::status(&manifest, selector.as_deref(), run_id.as_deref(), format),
        Command::Resolve { manifest, selector, outcome } => status::resolve(&manifest, selector.as_deref(), Some(&outcome)),
        Command::Abandon { manifest, selector } => status::resolve(&manifest, selector.as_deref(), None),
        Command::State { command: StateCommand::Show { manifest, selector, format } } => mark::show(&manifest, selector.as_deref(), format),
        Command::State { command: StateCommand::Reset { manifest, selector, to, clear, reason, expect, yes } } => mark::reset(
            &manifest,
            selector.as_deref(),
            &mark::ResetRequest { to: to.as_deref(), clear, reason: reason.as_deref(), expect: expect.as_deref(), yes },
        ),
        Command::Ci { command } => ci::run(command),
    };
    ExitCode::from(code)
}
