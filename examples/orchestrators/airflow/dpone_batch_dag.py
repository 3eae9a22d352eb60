"""One Airflow task per process of a dpone batch manifest.

Copy this file into the DAGs folder and set MANIFEST. At parse time the DAG
asks `dpone manifest list MANIFEST --format json` for the manifest's
processes and makes one task per process; each task runs

    dpone run MANIFEST --selector <process> --interval-end <data_interval_end> --format json

so a task works on exactly one target with its own lease, journal and
evidence. The window anchor is the task's data interval end, never the
clock: a retry or a backfill of an interval replaces the same window.

The state store must be shared by every worker (a retried task may run on
another machine and must resume the journal of the attempt that died):
give the manifest a `state: {type: postgres, ...}` block, or export
DPONE_STATE_URL=postgresql://... in the workers' environment.

Exit codes (README "Exit codes") and what a task does with them:

    0    success
    1    the run wrote and failed          -> retry: the next run resumes,
         (JSON status "failed")               finishes or starts over
    1    JSON status "outcome_unknown"     -> fail, no retry: an operator
                                              runs `dpone status` / `dpone resolve`
    2    JSON status "unavailable"         -> retry: a lease held by a live
         (lease_held, target_claimed,         run, a server or the state store
          server down)                        unreachable; nothing was written
    2    JSON status "refused"             -> fail, no retry: the manifest or
                                              the plan is refused; fix it
    130  interrupted                       -> retry: the next run resumes
    <0   killed by a signal (subprocess    -> retry: SIGKILL (-9, e.g. the OOM
         return code -N: -9, -15, ...)        killer), SIGTERM (-15) or another
                                              signal stopped dpone where it was;
                                              the journal makes a plain rerun
                                              resume cleanly
    137, 143  the same through a shell     -> retry (128 + 9, 128 + 15)
    other (3, 4, ...)  not dpone's codes   -> fail, no retry: something else
                                              went wrong (e.g. a wrapper script)

`decide` holds these rules; `test_dpone_batch_dag.py` unit-tests it.

retry_delay is longer than the lease (60 s): a worker that died holding the
lease of a shared store frees it by expiry only.

Checked by `crates/dpone-cli/tests/orchestrator_recipes.rs` (syntax, and the
task logic with stand-ins for Airflow and dpone). Manual check with Airflow
installed: `python -c "import dpone_batch_dag"` in the DAGs folder, then
`airflow dags test dpone_batch <date>`.
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timedelta, timezone

DPONE = os.environ.get("DPONE_BIN", "dpone")
MANIFEST = os.environ.get("DPONE_BATCH_MANIFEST", "/opt/dpone/manifests/batch.yaml")
DAG_ID = "dpone_batch"

# JSON statuses a retry cannot fix: fail the task at once.
NO_RETRY = {"refused", "outcome_unknown"}


def list_processes(manifest: str = MANIFEST) -> list[str]:
    """The selectors of the manifest's processes (`dpone manifest list`)."""
    out = subprocess.run(
        [DPONE, "manifest", "list", manifest, "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    listed = json.loads(out)
    if isinstance(listed, dict):
        listed = listed.get("processes", [])
    return [p.get("selector") or p["id"] for p in listed]


def task_id(selector: str) -> str:
    """An Airflow task id for a process selector (`schema.table` or an id)."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in selector)


def interval_end(data_interval_end: datetime) -> str:
    """RFC 3339 in UTC, as `--interval-end` takes it."""
    return data_interval_end.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# dpone's exit codes a retry can fix (README "Exit codes"), unless the JSON
# status is one of NO_RETRY.
RETRY_EXIT_CODES = {1, 2, 130}
# A process killed by SIGKILL or SIGTERM, as a shell reports it (128 + N).
RETRY_SHELL_SIGNAL_CODES = {128 + 9, 128 + 15}


def decide(exit_code: int, report: dict) -> str:
    """`success`, `retry` or `fail` for one dpone run.

    `exit_code` is `subprocess`'s return code: negative when a signal killed
    the process (-9: SIGKILL, as the OOM killer sends; -15: SIGTERM). Such a
    run printed no report, wrote its journal as far as it got, and the next
    run resumes or finishes it: retried."""
    if exit_code == 0:
        return "success"
    if exit_code < 0 or exit_code in RETRY_SHELL_SIGNAL_CODES:
        return "retry"
    if report.get("status") in NO_RETRY:
        return "fail"
    if exit_code in RETRY_EXIT_CODES:
        return "retry"
    return "fail"


def run_process(selector: str, manifest: str = MANIFEST, **context) -> dict:
    """Runs one process for the task's data interval; raises so that Airflow
    retries (AirflowException) or fails at once (AirflowFailException)."""
    from airflow.exceptions import AirflowException, AirflowFailException

    end = interval_end(context["data_interval_end"])
    proc = subprocess.run(
        [DPONE, "run", manifest, "--selector", selector, "--interval-end", end, "--format", "json"],
        capture_output=True,
        text=True,
    )
    print(proc.stderr)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        report = {}
    if isinstance(report, list):  # a batch run prints one document per process
        report = report[0] if report else {}
    verdict = decide(proc.returncode, report)
    summary = f"dpone run {selector} --interval-end {end}: exit {proc.returncode}, {report.get('status')}: {report.get('error_code')}"
    if verdict == "fail":
        raise AirflowFailException(summary + " (not retried: see `dpone status`)")
    if verdict == "retry":
        raise AirflowException(summary + " (retried: the next attempt resumes)")
    return report


def build_dag():
    from airflow import DAG
    from airflow.operators.python import PythonOperator

    with DAG(
        dag_id=DAG_ID,
        schedule="@daily",
        start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
        catchup=False,
        max_active_runs=1,
        default_args={
            "retries": 3,
            # Longer than the lease (60 s): a dead worker's lease expires first.
            "retry_delay": timedelta(minutes=2),
            "retry_exponential_backoff": True,
        },
        tags=["dpone"],
    ) as dag:
        for selector in list_processes():
            PythonOperator(
                task_id=task_id(selector),
                python_callable=run_process,
                op_kwargs={"selector": selector},
            )
    return dag


if os.environ.get("DPONE_DAG_CHECK") != "1":
    dag = build_dag()
