use super::*;
use crate::classify::{FileClass, FileRecord};

fn plan(class: FileClass) -> Plan {
    let routes: &[&str] = if class == FileClass::RouteScoped { &["sqlite->sqlite"] } else { &[] };
    let f = FileRecord {
        reason_code: "schedule_changed".into(),
        reason: "r".into(),
        ..crate::report::tests::record("m.yaml", class, routes, &[])
    };
    report::build(&"a".repeat(40), &"b".repeat(40), vec![f])
}

fn suite_xml(name: &str, cases: &[(&str, &str)]) -> String {
    let body: String = cases.iter().map(|(n, inner)| format!(r#"<testcase name="{n}" classname="{name}">{inner}</testcase>"#)).collect();
    format!(r#"<testsuite name="{name}" tests="{}">{body}</testsuite>"#, cases.len())
}

/// JUnit files that pass every check of `plan`.
fn passing(plan: &Plan) -> Vec<(String, String)> {
    let mut by_suite: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for c in &plan.required_checks {
        for p in &c.junit {
            let e = by_suite.entry(p.suite.clone()).or_default();
            if p.cases.is_empty() {
                e.push("any::tests::case".into());
            }
            e.extend(p.cases.iter().map(|c| format!("{c}tests::case")));
        }
    }
    by_suite
        .into_iter()
        .map(|(s, cases)| {
            let cases: Vec<(&str, &str)> = cases.iter().map(|c| (c.as_str(), "")).collect();
            (format!("{s}.xml"), format!("<testsuites>{}</testsuites>", suite_xml(&s, &cases)))
        })
        .collect()
}

fn input(path: &str, xml: &str) -> ArtifactInput {
    ArtifactInput { path: path.into(), suite_override: None, content: Ok(xml.as_bytes().to_vec()) }
}

fn run(plan: &Plan, files: Vec<ArtifactInput>) -> Receipt {
    verify(plan, PlanRef { path: "plan.json".into(), sha256: "0".repeat(64) }, files)
}

fn status<'a>(r: &'a Receipt, id: &str) -> (&'a str, &'a str) {
    let c = r.checks.iter().find(|c| c.id == id).unwrap();
    (c.status.as_str(), c.reason.as_str())
}

#[test]
fn every_check_passes_with_clean_results() {
    let p = plan(FileClass::ScheduleOnly);
    let files = passing(&p).iter().map(|(n, x)| input(n, x)).collect();
    let r = run(&p, files);
    assert!(r.all_passed, "{:#?}", r.checks);
    assert_eq!(r.summary["PASS"], 7);
    assert_eq!(r.artifacts.len(), 7, "gate.fmt, gate.clippy and five libraries");
    assert!(r.artifacts.iter().all(|a| a.sha256.as_ref().is_some_and(|s| s.len() == 64)));
}

#[test]
fn skip_failure_error_zero_and_missing_never_pass() {
    let p = plan(FileClass::ScheduleOnly);
    let mut files: Vec<ArtifactInput> =
        passing(&p).iter().filter(|(n, _)| n != "dpone-core.xml" && n != "gate.fmt.xml").map(|(n, x)| input(n, x)).collect();
    files.push(input(
        "core.xml",
        &suite_xml(
            "dpone-core",
            &[
                ("yaml::tests::a", ""),
                ("manifest::tests::fingerprint_x", "<skipped/>"),
                ("cron::tests::c", "<failure message='boom'/>"),
                ("time::tests::t", "<error/>"),
                ("identity::tests::i", ""),
            ],
        ),
    ));
    let r = run(&p, files);
    assert_eq!(status(&r, "contract.parser").0, "SKIP");
    assert_eq!(status(&r, "contract.scheduling").0, "FAIL");
    assert!(status(&r, "contract.scheduling").1.contains("1 failed"));
    assert_eq!(status(&r, "contract.interval").0, "FAIL");
    assert_eq!(status(&r, "contract.serialization").0, "SKIP");
    assert_eq!(status(&r, "gate.unit").0, "FAIL");
    assert_eq!(status(&r, "gate.fmt"), ("UNVERIFIED", "`gate.fmt`: no results in the JUnit files read"));
    assert!(!r.all_passed);
    let zero = vec![input("fmt.xml", &suite_xml("gate.fmt", &[]))];
    assert_eq!(status(&run(&p, zero), "gate.fmt"), ("UNVERIFIED", "`gate.fmt`: no matching test case was executed"));
    assert_eq!(run(&p, vec![]).summary["UNVERIFIED"], 7);
}

#[test]
fn route_checks_name_their_infrastructure_when_missing() {
    let p = plan(FileClass::Broad);
    let r = run(&p, vec![]);
    let (s, why) = status(&r, "smoke.postgres-clickhouse");
    assert_eq!(s, "UNVERIFIED");
    assert!(why.contains("needs postgresql, clickhouse"), "{why}");
}

#[test]
fn case_prefixes_select_cases_and_unreadable_files_block_passes() {
    let p = plan(FileClass::ScheduleOnly);
    let mut files: Vec<ArtifactInput> = passing(&p).iter().map(|(n, x)| input(n, x)).collect();
    // A failure outside the check's cases does not fail the check, but does fail the suite-wide gate.
    files.push(input("more.xml", &suite_xml("dpone-core", &[("rowbinary::tests::x", "<failure/>")])));
    let r = run(&p, files.clone());
    assert_eq!(status(&r, "contract.parser").0, "PASS");
    assert_eq!(status(&r, "gate.unit").0, "FAIL");
    files.push(ArtifactInput { path: "lost.xml".into(), suite_override: None, content: Err("No such file".into()) });
    files.push(input("cut.xml", "<testsuite name='x'><testcase name='a'>"));
    let r = run(&p, files);
    assert_eq!(status(&r, "contract.parser").0, "UNVERIFIED");
    assert!(status(&r, "contract.parser").1.contains("`lost.xml`, `cut.xml` could not be read"));
    assert_eq!(r.artifacts[r.artifacts.len() - 1].status, "malformed");
    assert_eq!(r.artifacts[r.artifacts.len() - 2].status, "unreadable");
}

#[test]
fn suite_override_names_libtest_output() {
    let p = plan(FileClass::ScheduleOnly);
    let mut files: Vec<ArtifactInput> = passing(&p).iter().filter(|(n, _)| n != "gate.fmt.xml").map(|(n, x)| input(n, x)).collect();
    let libtest = r#"<testsuites><testsuite name="test" tests="1"><testcase classname="crate" name="fmt"/></testsuite></testsuites>"#;
    files.push(ArtifactInput { path: "fmt.xml".into(), suite_override: Some("gate.fmt".into()), content: Ok(libtest.into()) });
    let r = run(&p, files);
    assert!(r.all_passed, "{:#?}", r.checks);
    assert_eq!(r.artifacts.last().unwrap().suites, vec!["gate.fmt"]);
}

#[test]
fn unattributed_suite_failures_fail_the_check() {
    let p = plan(FileClass::ScheduleOnly);
    let mut files: Vec<ArtifactInput> = passing(&p).iter().map(|(n, x)| input(n, x)).collect();
    files.push(input("crash.xml", r#"<testsuite name="gate.clippy" failures="1"><testcase name="clippy"/></testsuite>"#));
    let r = run(&p, files);
    assert_eq!(status(&r, "gate.clippy").0, "FAIL");
}

#[test]
fn bounded_reads_refuse_more_than_the_limit_even_from_a_device() {
    let dir = std::env::temp_dir().join(format!("dpone-ci-bounded-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("f");
    std::fs::write(&path, b"12345").unwrap();
    assert_eq!(read_bounded(&path, 5).unwrap(), b"12345");
    assert!(matches!(read_bounded(&path, 4), Err(BoundedReadError::TooLarge { limit: 4 })));
    // /dev/zero's metadata length is 0 and it never ends.
    let zero = std::path::Path::new("/dev/zero");
    if zero.exists() {
        assert!(matches!(read_bounded(zero, 1 << 20), Err(BoundedReadError::TooLarge { .. })));
    }
    assert!(matches!(read_bounded(&dir.join("missing"), 4), Err(BoundedReadError::Io(_))));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn plans_are_checked_before_use() {
    let p = plan(FileClass::RouteScoped);
    let good = serde_json::to_vec(&p).unwrap();
    assert_eq!(read_plan(&good).unwrap(), p);
    let code = |v: serde_json::Value| read_plan(&serde_json::to_vec(&v).unwrap()).unwrap_err().code;
    let base = serde_json::to_value(&p).unwrap();
    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = base.clone();
        f(&mut v);
        code(v)
    };
    assert_eq!(read_plan(b"{").unwrap_err().code, "invalid_plan");
    assert_eq!(edit(&|v| v["schema_version"] = "dpone.ci.plan.v0".into()), "unsupported_plan_version");
    assert_eq!(edit(&|v| v["classifier_version"] = "x".into()), "classifier_version_mismatch");
    assert_eq!(edit(&|v| v["head_sha"] = "abc".into()), "invalid_plan");
    assert_eq!(edit(&|v| v["preserve_existing_required_checks"] = false.into()), "invalid_plan");
    assert_eq!(edit(&|v| v["required_checks"][0]["status"] = "PASS".into()), "invalid_plan");
    assert_eq!(edit(&|v| v["required_checks"][7]["junit"][0]["suite"] = "other".into()), "plan_check_mismatch");
    assert_eq!(edit(&|v| v["required_checks"][0]["id"] = "gate.none".into()), "invalid_plan");
    assert_eq!(
        edit(&|v| {
            v["required_checks"].as_array_mut().unwrap().pop();
        }),
        "invalid_plan"
    );
    assert_eq!(edit(&|v| v["classification"] = "schedule_only".into()), "invalid_plan");
}
