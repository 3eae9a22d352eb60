//! The orchestrator recipes in `examples/orchestrators/` are checked, not
//! just shown: the Airflow DAG compiles and its task logic (one task per
//! process, `--interval-end` from the data interval, which exit codes are
//! retried) runs against stand-ins for Airflow and dpone (`check_dag.py`;
//! Airflow itself is too heavy for CI, see the recipe's README for the
//! manual `airflow dags test`); the Kubernetes Job parses and maps the
//! exit codes as the README's table says.

use dpone_core::yaml::{Node, Value};
use std::path::PathBuf;
use std::process::Command;

fn recipes() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/orchestrators")
}

fn python(args: &[&str]) -> std::process::Output {
    Command::new("python3")
        .args(args)
        .current_dir(recipes().join("airflow"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs (the test machine has Python 3.11)")
}

#[test]
fn the_airflow_dag_compiles_and_its_tasks_retry_what_a_retry_can_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let cfile = tmp.path().join("dag.pyc").display().to_string();
    let out = python(&["-c", &format!("import py_compile; py_compile.compile('dpone_batch_dag.py', cfile={cfile:?}, doraise=True)")]);
    assert!(out.status.success(), "the DAG does not compile:\n{}", String::from_utf8_lossy(&out.stderr));
    let out = python(&["check_dag.py"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("8 passed, 0 failed"),
        "check_dag.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn at<'a>(node: &'a Node, path: &[&str]) -> &'a Node {
    path.iter().fold(node, |n, k| n.get(k).unwrap_or_else(|| panic!("the Job has no `{}`", path.join("."))))
}

fn items(node: &Node) -> &[Node] {
    match &node.value {
        Value::Seq(items) => items,
        other => panic!("expected a list, found {}", other.kind()),
    }
}

fn ints(node: &Node) -> Vec<i64> {
    items(node)
        .iter()
        .map(|n| match n.value {
            Value::Int(i) => i as i64,
            _ => panic!("expected an exit code"),
        })
        .collect()
}

#[test]
fn the_kubernetes_job_parses_and_fails_only_what_a_retry_cannot_fix() {
    let text = std::fs::read_to_string(recipes().join("kubernetes/dpone-job.yaml")).unwrap();
    let job = dpone_core::yaml::parse(&text).unwrap_or_else(|d| panic!("the Job is not valid YAML: {d:?}"));
    assert_eq!(at(&job, &["kind"]).as_str(), Some("Job"));
    assert_eq!(at(&job, &["apiVersion"]).as_str(), Some("batch/v1"));
    let rules = items(at(&job, &["spec", "podFailurePolicy", "rules"]));
    let by_action = |action: &str| -> Vec<i64> {
        rules
            .iter()
            .filter(|r| at(r, &["action"]).as_str() == Some(action))
            .filter_map(|r| r.get("onExitCodes"))
            .flat_map(|c| ints(at(c, &["values"])))
            .collect()
    };
    assert_eq!(by_action("FailJob"), vec![3, 4], "refused and outcome_unknown fail the Job");
    assert_eq!(by_action("Count"), vec![1, 2, 130], "failed, unavailable and interrupted are retried");
    assert_eq!(at(&job, &["spec", "template", "spec", "restartPolicy"]).as_str(), Some("Never"));
    let container = &items(at(&job, &["spec", "template", "spec", "containers"]))[0];
    let script = items(at(container, &["args"]))[0].as_str().unwrap_or_default().to_string();
    for needed in ["dpone run", "--selector", "--interval-end \"$INTERVAL_END\"", "--format json", "exit 3", "exit 4", "exit $code"] {
        assert!(script.contains(needed), "the container's script lacks `{needed}`:\n{script}");
    }
    let backoff = match at(&job, &["spec", "backoffLimit"]).value {
        Value::Int(i) => i,
        _ => panic!("backoffLimit is a number"),
    };
    assert!(backoff >= 4, "a retry may meet a dead pod's lease (60 s) more than once");
}
