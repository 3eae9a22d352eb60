//! The orchestrator recipes in `examples/orchestrators/` are checked, not
//! just shown: the Airflow DAG compiles and its task logic (one task per
//! process, `--interval-end` from the data interval, which exit codes are
//! retried) runs against stand-ins for Airflow and dpone (`check_dag.py`;
//! Airflow itself is too heavy for CI, see the recipe's README for the
//! manual `airflow dags test`); the Kubernetes Job parses and maps the
//! exit codes as the README's table says, and its container's command line
//! runs, as written, with the manifest in a read-only folder.

mod common;
mod harness;

use dpone_core::yaml::{Node, Value};
use std::path::{Path, PathBuf};
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
        out.status.success() && stdout.contains("10 passed, 0 failed"),
        "check_dag.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The DAG's retry decision, unit-tested in Python (`test_dpone_batch_dag.py`):
/// killed by SIGKILL (-9, the OOM killer) or SIGTERM (-15) is retried, as are
/// exits 1 (`failed`), 2 (`unavailable`) and 130; `outcome_unknown`,
/// `refused` and codes dpone never uses (3) fail at once.
#[test]
fn the_airflow_retry_decision_retries_runs_killed_by_a_signal() {
    let out = python(&["-m", "unittest", "-v", "test_dpone_batch_dag"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.contains("Ran 10 tests") && stderr.contains("\nOK"), "the DAG's unit tests failed:\n{stderr}");
    for case in ["sigkill", "sigterm", "exit_1_failed", "exit_2_unavailable", "exit_3"] {
        assert!(stderr.contains(&format!("test_{case}")), "no unit test for `{case}`:\n{stderr}");
    }
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

/// A batch manifest on the SQLite route whose databases live outside the
/// manifest's folder (a ConfigMap holds only the manifest).
fn sqlite_batch_manifest(data: &Path) -> String {
    format!(
        r#"kind: dpone.batch.v1
defaults:
  source:
    type: sqlite
    connection_type: params
    connection_id: '{{"path": "{src}"}}'
  sink:
    type: sqlite
    connection_type: params
    connection_id: '{{"path": "{dst}"}}'
    table: {{name: "{{{{ src_table }}}}"}}
    strategy:
      mode: replace
      atomicity: target_atomic
      window: {{column: event_ts, anchor: data_interval_end, lookback: P7D, chunk_interval: P1D}}
schemas:
  main:
    tables: [events]
"#,
        src = data.join("source.db").display(),
        dst = data.join("target.db").display(),
    )
}

/// The container of the Job: its environment (`name: value`) and the
/// script its `/bin/sh -c` runs.
fn job_container() -> (Vec<(String, String)>, String, String) {
    let text = std::fs::read_to_string(recipes().join("kubernetes/dpone-job.yaml")).unwrap();
    let job = dpone_core::yaml::parse(&text).unwrap_or_else(|d| panic!("the Job is not valid YAML: {d:?}"));
    let container = &items(at(&job, &["spec", "template", "spec", "containers"]))[0];
    let command: Vec<&str> = items(at(container, &["command"])).iter().filter_map(Node::as_str).collect();
    assert_eq!(command, ["/bin/sh", "-c"], "the test runs the script as the container does");
    let env = items(at(container, &["env"]))
        .iter()
        .map(|e| (at(e, &["name"]).as_str().unwrap().to_string(), at(e, &["value"]).as_str().unwrap_or_default().to_string()))
        .collect();
    let script = items(at(container, &["args"]))[0].as_str().unwrap().to_string();
    let working_dir = at(container, &["workingDir"]).as_str().unwrap().to_string();
    (env, script, working_dir)
}

/// Runs the Job's script as written, in `cwd` (its `workingDir`), with its
/// environment where the container's paths are replaced by `overrides`,
/// no other `DPONE_*` variable and the binary under test as `dpone`.
fn run_job_script(cwd: &Path, overrides: &[(&str, String)], unset: &[&str]) -> (Option<i32>, String, String) {
    let (env, script, _) = job_container();
    let bin = PathBuf::from(common::DPONE);
    let path = format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(&script).current_dir(cwd).env("PATH", path);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("DPONE_")) {
        cmd.env_remove(k);
    }
    for (k, v) in &env {
        match overrides.iter().find(|(o, _)| o == k) {
            Some((_, v)) => cmd.env(k, v),
            None => cmd.env(k, v),
        };
    }
    for k in unset {
        cmd.env_remove(k);
    }
    let out = cmd.output().expect("/bin/sh runs");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// The Kubernetes Job's command line, as the recipe writes it, with the
/// manifest in a read-only folder (the ConfigMap's mount): the run
/// succeeds and writes its state and evidence under `DPONE_WORK_DIR`,
/// nothing next to the manifest. An unwritable work dir is refused before
/// any write (`work_dir_not_writable`, the script's exit 3: not retried).
///
/// Tests may run as root, for whom `chmod a-w` blocks nothing: the folder
/// is made read-only all the same and the test checks that nothing was
/// added to it; the refusal is made with a work dir that cannot be created
/// by anyone (a regular file stands where its parent folder should be).
/// Run as another user, the default work dir next to the read-only
/// manifest is refused too.
#[test]
fn the_kubernetes_job_command_line_runs_with_a_read_only_manifest_folder() {
    use common::{canonical, dump, expected_after_replace};
    let tmp = tempfile::tempdir().unwrap();
    let (data, config_map, work) = (tmp.path().join("data"), tmp.path().join("configmap"), tmp.path().join("work"));
    for d in [&data, &config_map, &work] {
        std::fs::create_dir(d).unwrap();
    }
    dpone_sqlite::demo::seed_quickstart(&data.join("source.db"), &data.join("target.db")).unwrap();
    let manifest = config_map.join("batch.yaml");
    std::fs::write(&manifest, sqlite_batch_manifest(&data)).unwrap();
    let read_only = |p: &Path, mode: u32| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    read_only(&manifest, 0o444);
    read_only(&config_map, 0o555);
    let (source, before) = (dump(&data.join("source.db"), "events"), dump(&data.join("target.db"), "events"));
    let (env, _, working_dir) = job_container();
    let interval_end = env.iter().find(|(k, _)| k == "INTERVAL_END").map(|(_, v)| v.clone()).expect("the Job sets INTERVAL_END");
    let job_work_dir = env.iter().find(|(k, _)| k == "DPONE_WORK_DIR").map(|(_, v)| v.clone()).expect("the Job sets DPONE_WORK_DIR");
    assert!(Path::new(&job_work_dir).starts_with(&working_dir), "the work dir {job_work_dir} is on the Job's writable volume");
    let work_dir = work.join(Path::new(&job_work_dir).strip_prefix(&working_dir).unwrap());
    let paths = |work_dir: String| {
        vec![("MANIFEST", manifest.display().to_string()), ("SELECTOR", "main.events".to_string()), ("DPONE_WORK_DIR", work_dir)]
    };

    // An unwritable work dir: refused before any write, not retried.
    let blocker = data.join("a-file");
    std::fs::write(&blocker, "not a folder").unwrap();
    let (code, stdout, stderr) = run_job_script(&work, &paths(blocker.join("dpone").display().to_string()), &[]);
    assert_eq!(code, Some(3), "refused maps to exit 3:\n{stdout}\n{stderr}");
    assert!(stdout.contains("\"error_code\":\"work_dir_not_writable\""), "{stdout}");
    assert!(stderr.contains("DPONE_WORK_DIR"), "the hint names the variable to set:\n{stderr}");
    assert_eq!(dump(&data.join("target.db"), "events"), before, "nothing was written");
    assert_eq!(entries(&config_map), ["batch.yaml"]);

    // Not root: the default work dir next to the read-only manifest is refused the same way.
    if std::fs::write(config_map.join("probe"), "x").is_err() {
        let (code, stdout, _) = run_job_script(&work, &paths(String::new()), &["DPONE_WORK_DIR"]);
        assert_eq!(code, Some(3), "{stdout}");
        assert!(stdout.contains("\"error_code\":\"work_dir_not_writable\""), "{stdout}");
    } else {
        std::fs::remove_file(config_map.join("probe")).unwrap();
    }

    // As the recipe is written: exit 0, state and evidence under the work dir.
    let (code, stdout, stderr) = run_job_script(&work, &paths(work_dir.display().to_string()), &[]);
    assert_eq!(code, Some(0), "the Job's command fails:\n{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(work.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["status"], "succeeded", "{report}");
    let evidence = PathBuf::from(report["evidence_path"].as_str().expect("an evidence path"));
    assert!(evidence.starts_with(&work_dir) && evidence.is_file(), "evidence under the work dir: {}", evidence.display());
    assert!(work_dir.join("state.db").is_file(), "the SQLite state store lives in the work dir");
    assert_eq!(entries(&config_map), ["batch.yaml"], "nothing was written next to the manifest");
    let start = dpone_core::time::Timestamp::parse_rfc3339(&interval_end).unwrap().0 - 7 * 86_400_000_000;
    let start = dpone_core::time::Timestamp(start).to_canonical();
    let want = expected_after_replace(&before, &source, 1, &start, &canonical(&interval_end));
    assert_eq!(dump(&data.join("target.db"), "events"), want, "the target holds the window's rows");
    read_only(&config_map, 0o755);
}
