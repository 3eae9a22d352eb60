//! `dpone ci`: impact-aware acceptance (see docs/ci.md).
//!
//! - `dpone ci plan --base REV --head REV` classifies the change between two
//!   commits and writes the plan (JSON, optionally Markdown).
//! - `dpone ci verify --plan plan.json --junit results.xml...` binds the plan
//!   to real JUnit results and writes the receipt.
//! - `dpone ci schema` prints the JSON Schema of the schedules file.
//!
//! Exit codes: plan 0 written, 2 bad revision / repository / arguments (no
//! plan written); verify 0 every required check PASS, 1 otherwise, 2 the plan
//! or the arguments are invalid (no receipt written).

use crate::commands::{EXIT_CONFIG, EXIT_FAILED, EXIT_OK};
use crate::output;
use clap::Subcommand;
use dpone_ci::classify::{self, Content, FileRecord, Side};
use dpone_ci::git::Repo;
use dpone_ci::report::{self, Plan};
use dpone_ci::verify::{self, ArtifactInput, PlanRef};
use dpone_core::Diagnostic;
use std::path::{Path, PathBuf};

#[derive(Subcommand, Debug)]
pub enum CiCommand {
    /// Classify the change between two commits and list the checks it needs, with reasons.
    Plan {
        /// Base revision (commit, branch or tag), e.g. the merge base of a pull request.
        #[arg(long, value_name = "REV")]
        base: String,
        /// Head revision.
        #[arg(long, value_name = "REV")]
        head: String,
        /// The git repository (default: the current directory). Only committed objects are read.
        #[arg(long, value_name = "DIR", default_value = ".")]
        repo: PathBuf,
        /// Write the plan JSON here instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Also write the plan as Markdown here.
        #[arg(long, value_name = "FILE")]
        markdown: Option<PathBuf>,
    },
    /// Bind a plan to JUnit results: PASS only from executed cases without failure, error or skip.
    Verify {
        /// The plan written by `dpone ci plan`.
        #[arg(long, value_name = "FILE")]
        plan: PathBuf,
        /// A JUnit XML file (repeatable); suites are named by their `name` attribute.
        #[arg(long, value_name = "FILE")]
        junit: Vec<PathBuf>,
        /// A JUnit XML file whose suites all count as SUITE, e.g. libtest output (repeatable).
        #[arg(long, value_name = "SUITE=FILE")]
        junit_suite: Vec<String>,
        /// Re-classify the plan's commits in this repository and refuse a plan that differs.
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
        /// Write the receipt JSON here instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Also write the receipt as Markdown here.
        #[arg(long, value_name = "FILE")]
        markdown: Option<PathBuf>,
    },
    /// Print the JSON Schema of the schedules file (kind dpone.schedules.v1).
    Schema,
}

pub fn run(command: CiCommand) -> u8 {
    match command {
        CiCommand::Plan { base, head, repo, out, markdown } => plan(&repo, &base, &head, out.as_deref(), markdown.as_deref()),
        CiCommand::Verify { plan, junit, junit_suite, repo, out, markdown } => {
            verify(&plan, &junit, &junit_suite, repo.as_deref(), out.as_deref(), markdown.as_deref())
        }
        CiCommand::Schema => {
            output::print_json(&dpone_ci::schedules::json_schema());
            EXIT_OK
        }
    }
}

fn fail(d: &Diagnostic) -> u8 {
    eprintln!("{d}");
    EXIT_CONFIG
}

/// Classifies `base..head` of the repository into a plan.
fn make_plan(repo: &Repo, base: &str, head: &str) -> Result<Plan, Diagnostic> {
    let base_sha = repo.resolve(base, "--base")?;
    let head_sha = repo.resolve(head, "--head")?;
    let mut files: Vec<FileRecord> = Vec::new();
    for change in repo.changes(&base_sha, &head_sha)? {
        let read = |blob: &str| {
            let b = repo.blob(blob, classify::MAX_FILE_BYTES)?;
            Ok(Content::from_blob(b.size, b.bytes))
        };
        // A manifest's convention presets are read from the same commit.
        let file_at = |side: Side, path: &str| {
            let commit = if side == Side::Base { &base_sha } else { &head_sha };
            Ok(repo.file_at(commit, path, classify::MAX_FILE_BYTES)?.map(|b| Content::from_blob(b.size, b.bytes)))
        };
        files.push(classify::classify_change_with(&change, read, file_at)?);
    }
    Ok(report::build(&base_sha, &head_sha, files))
}

fn plan(repo: &Path, base: &str, head: &str, out: Option<&Path>, markdown: Option<&Path>) -> u8 {
    let plan = match Repo::open(repo).and_then(|r| make_plan(&r, base, head)) {
        Ok(p) => p,
        Err(d) => return fail(&d),
    };
    let json = serde_json::to_value(&plan).expect("plans serialize");
    if let Err(d) = write_outputs(&json, out, markdown.map(|m| (m, report::markdown(&plan)))) {
        return fail(&d);
    }
    if out.is_some() {
        println!(
            "{}: {} file(s) changed, {} required check(s){}",
            plan.basis.classification.as_str(),
            plan.files.len(),
            plan.required_checks.len(),
            if plan.routes.is_empty() { String::new() } else { format!(", routes {}", plan.routes.join(", ")) }
        );
    }
    EXIT_OK
}

/// Writes the JSON (to `out`, else stdout) and the Markdown: every file is
/// first written next to its destination, and renamed into place only when
/// all were written, so a failed write changes no output. Should a rename
/// itself fail, the files renamed before it stay replaced; no temporary
/// file is left.
fn write_outputs(json: &serde_json::Value, out: Option<&Path>, markdown: Option<(&Path, String)>) -> Result<(), Diagnostic> {
    let text = format!("{}\n", serde_json::to_string_pretty(json).expect("JSON values serialize"));
    let mut files: Vec<(&Path, &str)> = Vec::new();
    if let Some(path) = out {
        files.push((path, &text));
    }
    if let Some((path, md)) = &markdown {
        files.push((path, md));
    }
    let unwritable = |path: &Path, e: std::io::Error| {
        Diagnostic::new("output_unwritable", "", format!("cannot write {}: {e}", path.display()))
            .hint("check that the folder exists and is writable")
    };
    let mut staged: Vec<(PathBuf, &Path)> = Vec::new();
    for (path, content) in &files {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "out".into());
        let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
        if let Err(e) = std::fs::write(&tmp, content) {
            let _ = std::fs::remove_file(&tmp);
            staged.iter().for_each(|(t, _)| drop(std::fs::remove_file(t)));
            return Err(unwritable(path, e));
        }
        staged.push((tmp, path));
    }
    for (i, (tmp, path)) in staged.iter().enumerate() {
        if let Err(e) = std::fs::rename(tmp, path) {
            staged[i..].iter().for_each(|(t, _)| drop(std::fs::remove_file(t)));
            return Err(unwritable(path, e));
        }
    }
    if out.is_none() {
        print!("{text}");
    }
    Ok(())
}

fn verify(
    plan_path: &Path,
    junit: &[PathBuf],
    junit_suite: &[String],
    repo: Option<&Path>,
    out: Option<&Path>,
    markdown: Option<&Path>,
) -> u8 {
    let bytes = match verify::read_bounded(plan_path, verify::MAX_PLAN_BYTES) {
        Ok(b) => b,
        Err(e @ verify::BoundedReadError::TooLarge { .. }) => {
            return fail(
                &Diagnostic::new("plan_too_large", "--plan", format!("refusing {}: {e}", plan_path.display()))
                    .hint("pass the file written by `dpone ci plan --out` (a few kilobytes), not a device or another file"),
            );
        }
        Err(e) => {
            return fail(
                &Diagnostic::new("plan_unreadable", "--plan", format!("cannot read {}: {e}", plan_path.display()))
                    .hint("pass the file written by `dpone ci plan --out`"),
            );
        }
    };
    let plan = match verify::read_plan(&bytes) {
        Ok(p) => p,
        Err(d) => return fail(&d),
    };
    if let Some(dir) = repo {
        match Repo::open(dir).and_then(|r| make_plan(&r, &plan.basis.base_sha, &plan.basis.head_sha)) {
            Ok(fresh) if fresh == plan => {}
            Ok(_) => {
                return fail(
                    &Diagnostic::new(
                        "plan_mismatch",
                        "--plan",
                        format!(
                            "the plan is not what classifying {}..{} in {} gives",
                            plan.basis.base_sha,
                            plan.basis.head_sha,
                            dir.display()
                        ),
                    )
                    .hint("make the plan again with `dpone ci plan` and verify the new one"),
                );
            }
            Err(d) => return fail(&d),
        }
    }
    let mut inputs: Vec<ArtifactInput> = Vec::new();
    // A hard bound, not the metadata's length (0 for a device or a pipe).
    let read = |p: &Path| {
        verify::read_bounded(p, verify::MAX_JUNIT_BYTES).map_err(|e| match e {
            verify::BoundedReadError::TooLarge { .. } => format!("junit_too_large: {e}"),
            verify::BoundedReadError::Io(_) => e.to_string(),
        })
    };
    for p in junit {
        inputs.push(ArtifactInput { path: p.display().to_string(), suite_override: None, content: read(p) });
    }
    for spec in junit_suite {
        let Some((suite, path)) = spec.split_once('=').filter(|(s, p)| !s.is_empty() && !p.is_empty()) else {
            return fail(
                &Diagnostic::new("invalid_argument", "--junit-suite", format!("`{spec}` is not SUITE=FILE"))
                    .hint("e.g. --junit-suite dpone-cli::sqlite_window=target/junit/sqlite_window.xml"),
            );
        };
        inputs.push(ArtifactInput { path: path.to_string(), suite_override: Some(suite.to_string()), content: read(Path::new(path)) });
    }
    for i in &inputs {
        if let Err(e) = &i.content {
            eprintln!("warning: cannot read JUnit file {}: {e}; no check can pass while it is unread", i.path);
        }
    }
    let plan_ref = PlanRef { path: plan_path.display().to_string(), sha256: dpone_ci::sha256_hex(&bytes) };
    let receipt = verify::verify(&plan, plan_ref, inputs);
    let json = serde_json::to_value(&receipt).expect("receipts serialize");
    if let Err(d) = write_outputs(&json, out, markdown.map(|m| (m, verify::markdown(&receipt)))) {
        return fail(&d);
    }
    if out.is_some() {
        let s = &receipt.summary;
        println!(
            "{}: {} PASS, {} FAIL, {} SKIP, {} UNVERIFIED",
            if receipt.all_passed { "passed" } else { "not passed" },
            s["PASS"],
            s["FAIL"],
            s["SKIP"],
            s["UNVERIFIED"]
        );
    }
    if receipt.all_passed { EXIT_OK } else { EXIT_FAILED }
}
