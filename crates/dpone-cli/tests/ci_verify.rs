//! `dpone ci verify`: a plan made from a real git repository, bound to JUnit
//! files. A check passes only from executed cases without failure, error or
//! skip; missing results never pass.

mod ci_common;

use ci_common::{PG_CH_MANIFEST, Repo, SQLITE_MANIFEST, dpone, junit, stderr, suite, write_file};
use serde_json::Value;
use std::path::{Path, PathBuf};

const M: &str = "manifests/events.yaml";
const CH: &str = "manifests/events_ch.yaml";

/// A repository with a schedule-only change and its plan written to plan.json.
fn schedule_only_plan() -> (Repo, PathBuf) {
    let (r, base) = Repo::with(&[(M, SQLITE_MANIFEST), (CH, PG_CH_MANIFEST)]);
    r.edit(M, |t| t.replace("0 3 * * *", "0 4 * * *"));
    let head = r.commit("schedule");
    let o = dpone(r.path(), &["ci", "plan", "--base", &base, "--head", &head, "--out", "plan.json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let p = r.path().join("plan.json");
    (r, p)
}

/// A [`schedule_only_plan`] with [`clean_suites`] in `results.xml`.
fn clean_plan() -> (Repo, PathBuf) {
    let (r, plan_path) = schedule_only_plan();
    write_file(r.path(), "results.xml", &junit(&clean_suites()));
    (r, plan_path)
}

/// Asserts that `ci verify <args>` exits 2 with `error[code]`; the receipt.
fn assert_verify_refused(dir: &Path, args: &[&str], code: &str) -> Value {
    let (status, receipt, err) = verify(dir, args);
    assert_eq!(status, Some(2), "{err}");
    assert!(err.contains(&format!("error[{code}]")), "{err}");
    receipt
}

/// JUnit suites that prove every check of a schedule-only plan, in nextest's naming.
fn clean_suites() -> Vec<String> {
    vec![
        suite("gate.fmt", &[("cargo fmt --check", "")]),
        suite("gate.clippy", &[("cargo clippy", "")]),
        suite(
            "dpone-core",
            &[
                ("yaml::tests::parses_with_positions", ""),
                ("manifest::tests::fingerprint_ignores_credentials_and_schedule", ""),
                ("identity::tests::ids_are_stable_and_sensitive", ""),
                ("time::tests::durations", ""),
                ("window::tests::spec_example", ""),
                ("plan::tests::interval_errors", ""),
                ("cron::tests::cron", ""),
            ],
        ),
        suite(
            "dpone-ci",
            &[
                ("schedules::tests::valid_file_loads_with_normalized_cron", ""),
                ("normalize::tests::rejections", ""),
                ("report::tests::no_changes_keeps_only_the_gates", ""),
                ("classify::tests::a_schedule_change_is_schedule_only", ""),
            ],
        ),
        suite("dpone-sqlite", &[("tests::a", "")]),
        suite("dpone-postgres", &[("tests::a", "")]),
        suite("dpone-clickhouse", &[("tests::a", "")]),
    ]
}

fn verify(dir: &Path, args: &[&str]) -> (Option<i32>, Value, String) {
    let mut all = vec!["ci", "verify", "--plan", "plan.json", "--out", "receipt.json"];
    all.extend_from_slice(args);
    let o = dpone(dir, &all);
    let receipt = std::fs::read_to_string(dir.join("receipt.json")).map(|t| serde_json::from_str(&t).unwrap()).unwrap_or(Value::Null);
    let _ = std::fs::remove_file(dir.join("receipt.json"));
    (o.status.code(), receipt, stderr(&o))
}

fn check<'a>(receipt: &'a Value, id: &str) -> &'a Value {
    receipt["checks"].as_array().unwrap().iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("{id} not in {receipt:#}"))
}

#[test]
fn clean_results_pass_and_the_receipt_records_commits_and_artifacts() {
    let (r, plan_path) = clean_plan();
    let plan: Value = serde_json::from_str(&std::fs::read_to_string(&plan_path).unwrap()).unwrap();
    let o = dpone(
        r.path(),
        &["ci", "verify", "--plan", "plan.json", "--junit", "results.xml", "--out", "receipt.json", "--markdown", "receipt.md"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "passed: 7 PASS, 0 FAIL, 0 SKIP, 0 UNVERIFIED");
    let receipt: Value = serde_json::from_str(&r.read("receipt.json")).unwrap();
    assert_eq!(receipt["schema_version"], "dpone.ci.receipt.v1");
    assert_eq!(receipt["base_sha"], plan["base_sha"]);
    assert_eq!(receipt["head_sha"], plan["head_sha"]);
    assert_eq!(receipt["classifier_version"], "dpone-ci-classifier/3");
    assert_eq!(receipt["classification"], "schedule_only");
    assert_eq!(receipt["all_passed"], true);
    assert_eq!(receipt["plan"]["path"], "plan.json");
    let artifact = &receipt["artifacts"][0];
    assert_eq!(artifact["path"], "results.xml");
    assert_eq!(artifact["status"], "read");
    let sha = artifact["sha256"].as_str().unwrap();
    assert_eq!(sha.len(), 64);
    assert_eq!(artifact["cases"], 16);
    assert_eq!(check(&receipt, "contract.scheduling")["status"], "PASS");
    assert!(check(&receipt, "contract.scheduling")["reason"].as_str().unwrap().contains("2 cases executed"));
    let md = r.read("receipt.md");
    assert!(md.contains("every required check passed") && md.contains(sha), "{md}");
    // Without --out, the receipt is printed.
    let o = dpone(r.path(), &["ci", "verify", "--plan", "plan.json", "--junit", "results.xml"]);
    let printed: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(printed["checks"], receipt["checks"]);
}

#[test]
fn a_skip_a_failure_and_zero_executed_tests_never_pass() {
    let (r, _) = schedule_only_plan();
    let mut suites = clean_suites();
    // dpone-ci: one skipped case in the parser contract's cases.
    suites[3] = suite(
        "dpone-ci",
        &[
            ("schedules::tests::valid_file_loads_with_normalized_cron", "<skipped message=\"ignored\"/>"),
            ("normalize::tests::rejections", ""),
            ("report::tests::no_changes_keeps_only_the_gates", ""),
            ("classify::tests::a_schedule_change_is_schedule_only", ""),
        ],
    );
    // dpone-core: a failure in the interval contract's cases.
    suites[2] = suites[2].replace(
        "<testcase name=\"window::tests::spec_example\" classname=\"dpone-core\" time=\"0.001\"></testcase>",
        "<testcase name=\"window::tests::spec_example\" classname=\"dpone-core\" time=\"0.001\"><failure message=\"assertion failed\">left != right</failure></testcase>",
    );
    // gate.clippy: a suite that executed nothing.
    suites[1] = suite("gate.clippy", &[]);
    write_file(r.path(), "results.xml", &junit(&suites));
    let (code, receipt, _) = verify(r.path(), &["--junit", "results.xml"]);
    assert_eq!(code, Some(1));
    assert_eq!(receipt["all_passed"], false);
    let parser = check(&receipt, "contract.parser");
    assert_eq!(parser["status"], "SKIP");
    assert!(parser["reason"].as_str().unwrap().contains("1 skipped; a skipped case is not a pass"), "{parser}");
    let interval = check(&receipt, "contract.interval");
    assert_eq!(interval["status"], "FAIL");
    assert!(interval["reason"].as_str().unwrap().contains("1 failed"), "{interval}");
    let clippy = check(&receipt, "gate.clippy");
    assert_eq!(clippy["status"], "UNVERIFIED");
    assert!(clippy["reason"].as_str().unwrap().contains("no matching test case was executed"), "{clippy}");
    assert_eq!(check(&receipt, "gate.unit")["status"], "FAIL", "the unit gate sees the failure too");
    assert_eq!(check(&receipt, "contract.scheduling")["status"], "PASS", "checks not touched by a problem still pass");
    assert_eq!(receipt["summary"], serde_json::json!({"FAIL": 2, "PASS": 3, "SKIP": 1, "UNVERIFIED": 1}));
}

#[test]
fn missing_results_and_missing_infrastructure_are_unverified() {
    let (r, base) = Repo::with(&[(CH, PG_CH_MANIFEST)]);
    r.edit(CH, |t| t.replace("block_rows: 65536", "block_rows: 4096"));
    let head = r.commit("transport");
    let o = dpone(r.path(), &["ci", "plan", "--base", &base, "--head", &head, "--out", "plan.json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    write_file(r.path(), "results.xml", &junit(&clean_suites()));
    // The route smoke needs PostgreSQL and ClickHouse; no results for it were given.
    let (code, receipt, err) = verify(r.path(), &["--junit", "results.xml", "--junit", "missing.xml"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("cannot read JUnit file missing.xml"), "{err}");
    let smoke = check(&receipt, "smoke.postgres-clickhouse");
    assert_eq!(smoke["status"], "UNVERIFIED");
    assert!(smoke["reason"].as_str().unwrap().contains("needs postgresql, clickhouse"), "{smoke}");
    // An unreadable artifact might hold failures: nothing passes while it is unread.
    assert_eq!(receipt["summary"]["PASS"], 0, "{receipt:#}");
    assert_eq!(receipt["artifacts"][1]["status"], "unreadable");
    // With the smoke's results and every file readable, the plan passes.
    let smoke_xml = write_file(r.path(), "smoke.xml", &junit(&[suite("dpone-cli::pg_clickhouse_window", &[("window_replace", "")])]));
    let (code, receipt, _) = verify(r.path(), &["--junit", "results.xml", "--junit", smoke_xml.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{receipt:#}");
    // A server-less run that skipped the smoke is SKIP, not PASS.
    write_file(r.path(), "smoke.xml", &junit(&[suite("dpone-cli::pg_clickhouse_window", &[("window_replace", "<skipped/>")])]));
    let (code, receipt, _) = verify(r.path(), &["--junit", "results.xml", "--junit", "smoke.xml"]);
    assert_eq!(code, Some(1));
    assert_eq!(check(&receipt, "smoke.postgres-clickhouse")["status"], "SKIP");
}

#[test]
fn libtest_junit_output_is_named_with_junit_suite() {
    let (r, _) = schedule_only_plan();
    let suites: Vec<String> = clean_suites().into_iter().filter(|s| !s.contains("name=\"gate.fmt\"")).collect();
    write_file(r.path(), "results.xml", &junit(&suites));
    // libtest's own JUnit format names every suite "test".
    let libtest = r#"<?xml version="1.0" encoding="UTF-8"?><testsuites><testsuite name="test" package="test" id="0" errors="0" failures="0" tests="1" skipped="0" ><testcase classname="crate" name="fmt_check" time="0"/><system-out/><system-err/></testsuite></testsuites>"#;
    write_file(r.path(), "fmt.xml", libtest);
    let (code, receipt, _) = verify(r.path(), &["--junit", "results.xml"]);
    assert_eq!((code, check(&receipt, "gate.fmt")["status"].as_str()), (Some(1), Some("UNVERIFIED")));
    let (code, receipt, err) = verify(r.path(), &["--junit", "results.xml", "--junit-suite", "gate.fmt=fmt.xml"]);
    assert_eq!(code, Some(0), "{err} {receipt:#}");
    assert_eq!(receipt["artifacts"][1]["suite_override"], "gate.fmt");
    assert_verify_refused(r.path(), &["--junit-suite", "fmt.xml"], "invalid_argument");
}

#[test]
fn malformed_junit_is_recorded_and_blocks_every_pass() {
    let (r, _) = clean_plan();
    write_file(r.path(), "cut.xml", "<testsuites><testsuite name=\"dpone-core\"><testcase name=\"x\">");
    let (code, receipt, _) = verify(r.path(), &["--junit", "results.xml", "--junit", "cut.xml"]);
    assert_eq!(code, Some(1));
    assert_eq!(receipt["artifacts"][1]["status"], "malformed");
    assert!(receipt["artifacts"][1]["error"].as_str().unwrap().contains("truncated"));
    assert_eq!(receipt["summary"]["PASS"], 0);
}

#[test]
fn an_edited_or_foreign_plan_is_refused_with_exit_2_and_no_receipt() {
    let (r, plan_path) = clean_plan();
    let original = std::fs::read_to_string(&plan_path).unwrap();
    for (from, to, code) in [
        ("\"status\": \"UNVERIFIED\"", "\"status\": \"PASS\"", "invalid_plan"),
        ("\"classification\": \"schedule_only\"", "\"classification\": \"no_changes\"", "invalid_plan"),
        ("\"suite\": \"dpone-core\"", "\"suite\": \"dpone-engine\"", "plan_check_mismatch"),
        ("dpone.ci.plan.v1", "dpone.ci.plan.v9", "unsupported_plan_version"),
        ("dpone-ci-classifier/3", "dpone-ci-classifier/0", "classifier_version_mismatch"),
        ("\"preserve_existing_required_checks\": true", "\"preserve_existing_required_checks\": false", "invalid_plan"),
    ] {
        assert!(original.contains(from), "{from}");
        std::fs::write(&plan_path, original.replacen(from, to, 1)).unwrap();
        let (status, receipt, err) = verify(r.path(), &["--junit", "results.xml"]);
        assert_eq!(status, Some(2), "{from}: {err}");
        assert!(err.contains(&format!("error[{code}]")), "{from}: {err}");
        assert_eq!(receipt, Value::Null, "no receipt is written");
    }
    std::fs::write(&plan_path, "not json").unwrap();
    assert_eq!(verify(r.path(), &[]).0, Some(2));
    std::fs::remove_file(&plan_path).unwrap();
    assert_verify_refused(r.path(), &[], "plan_unreadable");
}

#[test]
fn with_repo_the_plan_is_reclassified_and_a_changed_file_record_is_refused() {
    let (r, plan_path) = clean_plan();
    let repo = r.path().to_str().unwrap().to_string();
    let (code, _, err) = verify(r.path(), &["--junit", "results.xml", "--repo", &repo]);
    assert_eq!(code, Some(0), "{err}");
    // A consistent but false plan (the file said to be unchanged) is caught only by re-classifying.
    let mut plan: Value = serde_json::from_str(&std::fs::read_to_string(&plan_path).unwrap()).unwrap();
    plan["files"][0]["reason"] = "edited".into();
    std::fs::write(&plan_path, serde_json::to_string(&plan).unwrap()).unwrap();
    assert_eq!(verify(r.path(), &["--junit", "results.xml"]).0, Some(0));
    let receipt = assert_verify_refused(r.path(), &["--junit", "results.xml", "--repo", &repo], "plan_mismatch");
    assert_eq!(receipt, Value::Null);
}

#[test]
fn a_plan_or_junit_file_without_end_is_refused_by_a_hard_bound() {
    let (r, plan_path) = clean_plan();
    // /dev/zero's metadata length is 0: only a bounded read stops it.
    let zero = "/dev/zero";
    assert!(Path::new(zero).exists(), "this test needs {zero}");
    let o = dpone(r.path(), &["ci", "verify", "--plan", zero, "--junit", "results.xml", "--out", "receipt.json"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("error[plan_too_large]") && err.contains("--plan"), "{err}");
    assert!(!r.path().join("receipt.json").exists(), "no receipt is written");
    // A JUnit file without end is an unread artifact: nothing passes.
    let (code, receipt, err) = verify(r.path(), &["--junit", "results.xml", "--junit", zero]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot read JUnit file /dev/zero: junit_too_large"), "{err}");
    let artifact = &receipt["artifacts"][1];
    assert_eq!(artifact["status"], "unreadable", "{receipt:#}");
    assert!(artifact["error"].as_str().unwrap().starts_with("junit_too_large: the file is larger than"), "{artifact}");
    assert_eq!(receipt["summary"]["PASS"], 0, "{receipt:#}");
    assert!(plan_path.exists());
}
