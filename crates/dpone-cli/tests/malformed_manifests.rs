//! Malformed manifests and bad invocations are configuration errors: the
//! real `dpone` binary exits 2 with a stable code, the manifest path and
//! (for `manifest validate`) the file position, prints one JSON refusal for
//! `run --format json`, never panics, and touches no database.
//!
//! Every SQLite connection points into an empty folder: after each command
//! that folder must still be empty (no database, no work dir, no evidence).
//! PostgreSQL and ClickHouse connections point at 127.0.0.1:9 (discard), so
//! a connection attempt could not succeed silently.

#[path = "malformed_manifests/batch.rs"]
mod batch;
#[path = "malformed_manifests/cases.rs"]
mod cases;
#[path = "malformed_manifests/check.rs"]
mod check;
mod common;
#[path = "malformed_manifests/doc.rs"]
mod doc;
mod harness;
#[path = "malformed_manifests/invocations.rs"]
mod invocations;

use cases::{Case, WIN, case, manifest_cases};
use check::*;
use common::{INTERVAL_END, Run, dpone};
use doc::*;
use invocations::{Cmd, invocation_cases};

#[test]
fn templates_are_valid_manifests() {
    let env = discard_env();
    let templates = [
        ("WINDOW", Doc::of(WINDOW)),
        ("FULL", full()),
        ("PG_TO_CH", Doc::of(PG_TO_CH)),
        ("CH_TO_PG", Doc::of(CH_TO_PG)),
        ("BATCH", Doc::of(batch::BATCH)),
        ("BATCH_PG_CH", Doc::of(batch::BATCH_PG_CH)),
    ];
    for (name, template) in templates {
        let sandbox = Sandbox::new();
        let file = sandbox.write(&template);
        let run = dpone(&sandbox.manifest_dir, &["manifest", "validate", &file.display().to_string()], &env_refs(&env));
        assert_eq!(
            run.code,
            Some(0),
            "template {name} must be valid so that each case fails only because of its edit:\n{}",
            run.describe()
        );
        assert!(sandbox.untouched(&file).is_empty(), "validating template {name} must not create files: {:?}", sandbox.untouched(&file));
    }
}

#[test]
fn malformed_manifests_are_refused_before_any_io() {
    check_refusals(&manifest_cases(), 45, "malformed manifests", &[], json_refusal_problems);
}

#[test]
fn malformed_batch_manifests_are_refused_before_any_io() {
    check_refusals(&batch::cases(), 30, "malformed batch manifests", &["--jobs", "2"], batch_json_problems);
}

/// Every case through `manifest validate` (exit 2, code, path, position,
/// hint) and `run --format json <run_args>` (exit 2, code, path, the JSON
/// refusal `json` checks), none creating a file.
fn check_refusals(cases: &[Case], at_least: usize, what: &str, run_args: &[&str], json: fn(&Run, &str, &str) -> Vec<String>) {
    assert!(cases.len() >= at_least, "expected at least {at_least} {what}, have {}", cases.len());
    let mut names: Vec<&str> = cases.iter().map(|c| c.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "case names must be unique");

    let env = discard_env();
    let env = env_refs(&env);
    let mut failures = Vec::new();
    for case in cases {
        let sandbox = Sandbox::new();
        let file = sandbox.write(&case.yaml);
        let file_arg = file.display().to_string();

        let validate = dpone(&sandbox.manifest_dir, &["manifest", "validate", &file_arg], &env);
        let mut problems = common_problems(&validate, &file, case.code, case.path);
        problems.extend(position_problems(&validate, &file, case.code, case.yaml.marked_line()));
        if let Some(hint) = case.hint
            && !validate.stderr.contains(&format!("hint: {hint}"))
        {
            problems.push(format!("expected the hint `{hint}`"));
        }
        problems.extend(sandbox.untouched(&file));
        report(&mut failures, case.name, &validate, problems);

        let mut args = vec!["run", &file_arg, "--interval-end", INTERVAL_END, "--format", "json"];
        args.extend(run_args);
        let run = dpone(&sandbox.manifest_dir, &args, &env);
        let mut problems = common_problems(&run, &file, case.code, case.path);
        problems.extend(json(&run, case.code, case.path));
        problems.extend(sandbox.untouched(&file));
        report(&mut failures, case.name, &run, problems);
    }
    assert!(failures.is_empty(), "{} of {} cases misbehaved:\n\n{}", failures.len(), cases.len(), failures.join("\n\n"));
}

// ---------------------------------------------------------------------------
// Invocation-level configuration errors (valid manifests)
// ---------------------------------------------------------------------------

#[test]
fn invocation_errors_exit_2_before_any_io() {
    let cases = invocation_cases();
    let mut failures = Vec::new();
    for case in &cases {
        let sandbox = Sandbox::new();
        let file = match &case.yaml {
            Some(doc) => sandbox.write(doc),
            None => sandbox.missing_manifest(),
        };
        let file_arg = file.display().to_string();
        let env = env_refs(&case.env);
        for cmd in &case.commands {
            let mut args: Vec<&str> = match cmd {
                Cmd::Run => vec!["run", &file_arg],
                Cmd::Plan => vec!["plan", &file_arg],
                Cmd::Validate => vec!["manifest", "validate", &file_arg],
            };
            if *cmd != Cmd::Validate {
                args.extend(case.args.iter().copied());
            }
            if *cmd == Cmd::Run {
                args.extend(["--format", "json"]);
            }
            let run = dpone(&sandbox.manifest_dir, &args, &env);
            let mut problems = common_problems(&run, &file, case.code, case.path);
            if *cmd == Cmd::Run {
                problems.extend(json_refusal_problems(&run, case.code, case.path));
            }
            problems.extend(sandbox.untouched(&file));
            report(&mut failures, case.name, &run, problems);
        }
    }
    assert!(failures.is_empty(), "{} invocation(s) misbehaved:\n\n{}", failures.len(), failures.join("\n\n"));
}

// ---------------------------------------------------------------------------
// Messages and false positives
// ---------------------------------------------------------------------------

/// `&` and `*` inside a plain scalar are text, not anchors or aliases (YAML
/// only reads them as such at the start of a node).
#[test]
fn ampersands_and_asterisks_inside_plain_scalars_are_not_aliases() {
    let doc = Doc::of(WINDOW).insert("", "vars:\n  note: fish &chips\n  glob: logs *old");
    let sandbox = Sandbox::new();
    let file = sandbox.write(&doc);
    let run = dpone(&sandbox.manifest_dir, &["manifest", "validate", &file.display().to_string()], &[]);
    assert_eq!(run.code, Some(0), "expected plain scalars containing ` &x` / ` *x` to be accepted as text:\n{}", run.describe());
}

/// Parser errors are shown to manifest authors: they must not carry advice
/// meant for programmers of the YAML library.
#[test]
fn yaml_errors_do_not_leak_parser_api_advice() {
    let w = Doc::of(WINDOW);
    for (name, doc) in
        [("duplicate_key", w.insert(WIN, "lookback: P3D")), ("multiple_documents", w.insert("", "---\nkind: dpone.batch.v1"))]
    {
        let sandbox = Sandbox::new();
        let file = sandbox.write(&doc);
        let run = dpone(&sandbox.manifest_dir, &["manifest", "validate", &file.display().to_string()], &[]);
        assert_eq!(run.code, Some(2), "{name}: expected exit 2:\n{}", run.describe());
        for leak in ["DuplicateKeyPolicy", "Options", "from_str_multiple"] {
            assert!(
                !run.stderr.contains(leak),
                "{name}: expected a message for manifest authors, but it mentions the parser API `{leak}`:\n{}",
                run.describe()
            );
        }
    }
}

/// Refusals the plan knows without a connection stop `run` before any probe:
/// the JSON lists exactly the plan's refusals (no `source_missing` from
/// probing the database), and stderr names the manifest file.
#[test]
fn plan_refusals_stop_run_before_any_probe() {
    let doc = Doc::of(WINDOW).set("source.options.native_transfer.wire.mode", "typed_raw");
    let sandbox = Sandbox::new();
    let file = sandbox.write(&doc);
    let file_arg = file.display().to_string();
    let code = "unsupported_route_option:wire.mode";

    let plan = dpone(&sandbox.manifest_dir, &["plan", &file_arg, "--interval-end", INTERVAL_END, "--format", "json"], &[]);
    assert_eq!(plan.code, Some(2), "expected `plan` to exit 2 on a refused plan:\n{}", plan.describe());
    let plan_doc = plan.single_json().unwrap_or_else(|e| panic!("{e}:\n{}", plan.describe()));
    let plan_codes: Vec<&str> = plan_doc["refusals"].as_array().expect("refusals").iter().filter_map(|r| r["code"].as_str()).collect();
    assert_eq!(plan_codes, vec![code], "expected the plan to refuse the wire mode");
    assert_eq!(sandbox.untouched(&file), Vec::<String>::new(), "expected `plan` to touch nothing");

    let run = dpone(&sandbox.manifest_dir, &["run", &file_arg, "--interval-end", INTERVAL_END, "--format", "json"], &[]);
    let mut problems = common_problems(&run, &file, code, "source.options.native_transfer.wire.mode");
    problems.extend(json_refusal_problems(&run, code, "source.options.native_transfer.wire.mode"));
    if let Ok(doc) = run.single_json() {
        let codes: Vec<&str> = doc["errors"].as_array().map(|e| e.iter().filter_map(|x| x["code"].as_str()).collect()).unwrap_or_default();
        if codes != plan_codes {
            problems
                .push(format!("expected exactly the plan's refusals {plan_codes:?} (nothing from probing the databases), got {codes:?}"));
        }
    }
    problems.extend(sandbox.untouched(&file));
    assert!(problems.is_empty(), "{}\n{}", problems.join("\n"), run.describe());
}
