"""A short seeded chaos soak (chaos.py): the simulated cluster, the chart with two webhook replicas, the
recommended policies, Knative Serving + Kourier and Eventing, every fault for CHAOS_DURATION_S; the history
judged by chaos_check.check must hold 0 breaches. KHW_CHAOS_SEED and KHW_CHAOS_DURATION (e.g. 4m) override
the seed and the length; the history and the logs stay in the run's folder (printed).

Needs kube-scheduler and kube-controller-manager beside kube-apiserver and etcd in KUBEBUILDER_ASSETS; one
skip line otherwise.
"""

from __future__ import annotations

import os
import tempfile
import unittest
from pathlib import Path

import simcluster

SEED = 4
DURATION = "4m"


class ChaosSoak(unittest.TestCase):
    def test_short_seeded_soak_has_no_breach(self):
        if not simcluster.assets_ready():
            self.skipTest(simcluster.SKIP_LINE)
        import chaos
        import chaos_check  # the checker (tests/e2e/chaos_check.py), imported here: it is another module's
        from base import binary

        self.assertTrue(callable(getattr(chaos_check, "check", None)), "chaos_check.check is missing")
        seed = int(os.environ.get("KHW_CHAOS_SEED", SEED))
        duration = chaos.parse_duration(os.environ.get("KHW_CHAOS_DURATION", DURATION))
        parent = os.environ.get("KHW_E2E_WORKDIR") or None
        out = Path(tempfile.mkdtemp(prefix=f"chaos-seed{seed}-", dir=parent))
        run = chaos.ChaosRun(seed, duration, list(chaos.FAULTS), out, binary())
        history = run.run()
        print(f"\n  chaos seed {seed}, {duration:.0f}s: history {history}, work dir {run.workdir}")
        result, report = chaos.check(history)
        print(report)
        self.assertEqual(chaos.breaches(result), 0, f"chaos_check found breaches (history {history})")


if __name__ == "__main__":
    unittest.main()
