"""Checks dpone_batch_dag.py without Airflow: stand-ins for the `airflow`
modules and for the `dpone` binary (a script that prints what a real run
prints for a chosen outcome). Run: python3 check_dag.py (exit 0 = passed).
"""

import importlib.util
import json
import os
import stat
import sys
import tempfile
import types
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))


class AirflowException(Exception):
    pass


class AirflowFailException(AirflowException):
    pass


created = []


class DAG:
    def __init__(self, **kw):
        self.kw = kw

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


class PythonOperator:
    def __init__(self, **kw):
        created.append(kw)


def install_stand_ins():
    airflow = types.ModuleType("airflow")
    airflow.DAG = DAG
    exceptions = types.ModuleType("airflow.exceptions")
    exceptions.AirflowException = AirflowException
    exceptions.AirflowFailException = AirflowFailException
    operators = types.ModuleType("airflow.operators")
    python = types.ModuleType("airflow.operators.python")
    python.PythonOperator = PythonOperator
    sys.modules.update(
        {"airflow": airflow, "airflow.exceptions": exceptions, "airflow.operators": operators, "airflow.operators.python": python}
    )


def fake_dpone(folder):
    """A `dpone` that lists two processes and answers `run` as FAKE_OUTCOME says."""
    path = os.path.join(folder, "dpone")
    with open(path, "w") as f:
        f.write(
            """#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
if args[:2] == ["manifest", "list"]:
    print(json.dumps([{"selector": "public.orders", "id": "orders"}, {"id": "users"}]))
    sys.exit(0)
code, status = os.environ["FAKE_OUTCOME"].split(":")
if int(code) < 0:  # killed by a signal (SIGKILL: the OOM killer), no report
    os.kill(os.getpid(), -int(code))
print(json.dumps({"status": status, "passed": code == "0", "error_code": None if code == "0" else "x"}))
sys.exit(int(code))
"""
        )
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return path


def main():
    install_stand_ins()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DPONE_BIN"] = fake_dpone(tmp)
        os.environ["FAKE_LOG"] = os.path.join(tmp, "log")
        os.environ["DPONE_BATCH_MANIFEST"] = "/m/batch.yaml"
        spec = importlib.util.spec_from_file_location("dpone_batch_dag", os.path.join(HERE, "dpone_batch_dag.py"))
        dag = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(dag)

        assert [t["task_id"] for t in created] == ["public_orders", "users"], created
        assert [t["op_kwargs"]["selector"] for t in created] == ["public.orders", "users"], created

        end = datetime(2026, 9, 9, tzinfo=timezone.utc)
        expectations = {
            "0:succeeded": None,
            "1:failed": AirflowException,
            "1:outcome_unknown": AirflowFailException,
            "2:unavailable": AirflowException,
            "2:refused": AirflowFailException,
            "130:interrupted": AirflowException,
            "-9:killed": AirflowException,
            "-15:terminated": AirflowException,
        }
        for outcome, raised in expectations.items():
            os.environ["FAKE_OUTCOME"] = outcome
            try:
                dag.run_process("public.orders", data_interval_end=end)
                got = None
            except AirflowException as e:
                got = type(e)
            assert got is raised, f"{outcome}: expected {raised}, got {got}"
        with open(os.environ["FAKE_LOG"]) as log:
            runs = [line.split() for line in log if line.startswith("run")]
        assert runs[0] == [
            "run", "/m/batch.yaml", "--selector", "public.orders", "--interval-end", "2026-09-09T00:00:00Z", "--format", "json",
        ], runs[0]
    print("check_dag: 10 passed, 0 failed")


if __name__ == "__main__":
    main()
