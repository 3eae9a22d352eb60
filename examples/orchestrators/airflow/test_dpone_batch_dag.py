"""Unit tests of the DAG's retry decision (`decide`), without Airflow.

Run: python3 -m unittest test_dpone_batch_dag (from this folder); run by
`crates/dpone-cli/tests/orchestrator_recipes.rs`.
"""

import importlib.util
import os
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def load_dag_module():
    """Imports dpone_batch_dag.py without building the DAG (no Airflow, no dpone)."""
    os.environ["DPONE_DAG_CHECK"] = "1"
    spec = importlib.util.spec_from_file_location("dpone_batch_dag", os.path.join(HERE, "dpone_batch_dag.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dag = load_dag_module()


class Decide(unittest.TestCase):
    def test_success(self):
        self.assertEqual(dag.decide(0, {"status": "succeeded"}), "success")

    def test_sigkill_is_retried(self):
        # SIGKILL (the OOM killer): no report at all; a rerun resumes.
        self.assertEqual(dag.decide(-9, {}), "retry")

    def test_sigterm_is_retried(self):
        self.assertEqual(dag.decide(-15, {}), "retry")

    def test_a_signal_through_a_shell_is_retried(self):
        self.assertEqual(dag.decide(137, {}), "retry")
        self.assertEqual(dag.decide(143, {}), "retry")

    def test_exit_1_failed_is_retried(self):
        self.assertEqual(dag.decide(1, {"status": "failed"}), "retry")

    def test_exit_1_outcome_unknown_fails(self):
        self.assertEqual(dag.decide(1, {"status": "outcome_unknown"}), "fail")

    def test_exit_2_unavailable_is_retried(self):
        self.assertEqual(dag.decide(2, {"status": "unavailable", "error_code": "lease_held"}), "retry")

    def test_exit_2_refused_fails(self):
        self.assertEqual(dag.decide(2, {"status": "refused"}), "fail")

    def test_exit_3_is_not_a_dpone_code_and_fails(self):
        self.assertEqual(dag.decide(3, {}), "fail")

    def test_exit_130_interrupted_is_retried(self):
        self.assertEqual(dag.decide(130, {"status": "interrupted"}), "retry")


if __name__ == "__main__":
    unittest.main()
