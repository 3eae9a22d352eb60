//! `dpone`: the command line and the composition root.
//!
//! Parses flags, loads the manifest, builds the plan, wires the adapters a
//! route needs and hands them to the engine. Exit codes: 0 success, 1 the
//! run executed and failed, 2 configuration error (before any I/O),
//! 130 interrupted.

mod adapters;
mod ci;
mod commands;
#[cfg(feature = "failpoints")]
mod failpoints;
mod host;
mod output;
mod progress;
mod redact;
mod state;
mod status;

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "dpone", version, about = "Move typed data between databases safely and fast")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
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
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Skip the read-only probes of source and target.
        #[arg(long)]
        offline: bool,
    },
    /// Run a manifest.
    Run {
        manifest: PathBuf,
        #[command(flatten)]
        interval: IntervalArgs,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// What the run journal says about the manifest's target: state, chunks, what is visible, what to do.
    Status {
        manifest: PathBuf,
        /// Show this run (a prefix is enough) instead of the target's latest.
        #[arg(long)]
        run_id: Option<String>,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Record an operator's verdict on a run whose publication outcome is unknown.
    Resolve {
        manifest: PathBuf,
        /// What the operator established: `published` (the target is the run's generation) or `absent`.
        #[arg(long, value_name = "published|absent")]
        outcome: String,
    },
    /// Abandon an unfinished run (planned or staging) so that the next run starts over.
    Abandon { manifest: PathBuf },
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
pub fn main() -> ExitCode {
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
    let code = match cli.command {
        Command::Manifest { command } => match command {
            ManifestCommand::Validate { manifest, format } => commands::validate(&manifest, format),
            ManifestCommand::Schema => commands::manifest_schema(),
        },
        Command::Schema { command: SchemaCommand::TypeMatrix { format } } => commands::type_matrix(format),
        Command::Plan { manifest, interval, format, offline } => commands::plan(&manifest, &interval, format, offline),
        Command::Run { manifest, interval, format } => commands::run(&manifest, &interval, format),
        Command::Quickstart { dir, format } => commands::quickstart(&dir, format),
        Command::Status { manifest, run_id, format } => status::status(&manifest, run_id.as_deref(), format),
        Command::Resolve { manifest, outcome } => status::resolve(&manifest, Some(&outcome)),
        Command::Abandon { manifest } => status::resolve(&manifest, None),
        Command::Ci { command } => ci::run(command),
    };
    ExitCode::from(code)
}
