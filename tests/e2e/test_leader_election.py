"""knative.dev/pkg's real leader election, run on the `config-leader-election` ConfigMap the engine writes.

Replicas of a knative.dev/pkg `sharedmain` controller (`KHW_KNATIVE_LEADER`, see `knleader.py`) run on
this machine against a local kube-apiserver (`KUBEBUILDER_ASSETS`); each scenario has its own
namespace, which is the replicas' SYSTEM_NAMESPACE and the policy's targetNamespace. What is shown:

- the ConfigMap `preview` makes of the release's own one is what Knative elects by: one Lease per
  bucket, each held by one running replica, with the policy's lease duration;
- a SIGKILLed leader's bucket passes to another replica once the Lease expires (not before), a
  SIGTERMed one's at once (ReleaseOnCancel);
- `--disable-ha` writes no Lease;
- a lease-duration under a second, which Knative's parser and client-go accept, is refused by the
  Lease API on every attempt: the replicas run and nobody ever leads (why `check` refuses it);
- while replicas started with different bucket counts run side by side (a rolling restart after a
  bucket change), every key has two leaders.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

import yaml

import cluster
import knleader
from base import binary as khw_binary
from base import load_yaml
from cluster import wait_for
from install import SERVING_CORE
from knleader import Replica, lease_names, leases

LEASE_S, RENEW_S, RETRY_S = 15, 10, 2
# client-go's candidates poll a Lease every retryPeriod x (1 + rand x 1.2) (wait.JitterUntil, JitterFactor).
POLL_MAX_S = RETRY_S * 2.2


class RealLeaderElection(unittest.TestCase):
    """One local control plane for the class, a fresh namespace and fresh replicas for each scenario."""

    api: cluster.LocalControlPlane
    workdir: str
    leader_binary: str

    @classmethod
    def setUpClass(cls):
        leader, assets = knleader.binary(), knleader.assets()
        if leader is None or assets is None:
            raise unittest.SkipTest(knleader.SKIP_LINE)
        cls.leader_binary = leader
        parent = os.environ.get("KHW_E2E_WORKDIR") or None
        cls.workdir = tempfile.mkdtemp(prefix="test_leader_election-", dir=parent)
        # The namespace controller only: nothing here has owners for the garbage collector.
        cls.api = cluster.LocalControlPlane(assets, f"{cls.workdir}/control-plane", controllers="namespace")
        try:
            cls.api.start()
        except BaseException:
            cls.api.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.api.stop()
        print(f"\n  leader election: logs kept in {cls.workdir}")

    def setUp(self):
        self.kubectl = self.api.kubectl
        self.ns = self._testMethodName.removeprefix("test_").replace("_", "-")[:63]
        self.dir = Path(self.workdir) / self.ns
        self.dir.mkdir()
        self.kubectl.run("create", "namespace", self.ns)
        self.replicas: list[Replica] = []
        self.addCleanup(knleader.stop_all, self.replicas)

    # -- steps ---------------------------------------------------------------------------------
    def start(self, count: int, disable_ha: bool = False) -> list[Replica]:
        """`count` more replicas (r0, r1, ... across calls); with leader election, their identities read
        from their logs."""
        args = ["--disable-ha"] if disable_ha else []
        new = [Replica(self.leader_binary, f"r{len(self.replicas) + i}", self.ns, self.api.kubeconfig,
                       str(self.dir), *args) for i in range(count)]
        self.replicas.extend(new)
        if not disable_ha:
            for r in new:
                r.identity()
        return new

    def policy(self, buckets: int = 3, lease: str = f"{LEASE_S}s", renew: str = f"{RENEW_S}s",
               retry: str = f"{RETRY_S}s", name: str = "policy.yaml") -> Path:
        """A HighAvailabilityPolicy for this namespace, written to `name`."""
        path = self.dir / name
        election = {"buckets": buckets, "leaseDuration": lease, "renewDeadline": renew, "retryPeriod": retry}
        spec = {"targetNamespace": self.ns, "replicas": 3, "leaderElection": election}
        doc = {"apiVersion": "knativeha.dev/v1alpha1", "kind": "HighAvailabilityPolicy",
               "metadata": {"name": "ha"}, "spec": spec}
        path.write_text(yaml.safe_dump(doc))
        return path

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([khw_binary(), *args], capture_output=True, text=True, timeout=60)

    def engine_configmap(self, buckets: int) -> dict:
        """The release's `config-leader-election`, moved to this namespace, through `preview` with a
        policy of `buckets` buckets and 15s/10s/2s, applied; its stored data."""
        release = next(d for d in load_yaml(SERVING_CORE)
                       if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "config-leader-election")
        self.assertNotIn("buckets", release["data"], "the release sets no bucket count of its own")
        release["metadata"]["namespace"] = self.ns
        src = self.dir / f"config-leader-election-{buckets}.yaml"
        src.write_text(yaml.safe_dump(release))
        policy = self.policy(buckets, name=f"policy-{buckets}.yaml")
        r = self.cli("preview", "--policy-file", str(policy), "-o", "yaml", str(src))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.kubectl.apply(r.stdout)
        return self.kubectl.json("-n", self.ns, "configmap", "config-leader-election")["data"]

    def holders(self, names: list[str], candidates: list[Replica]) -> dict[str, Replica] | None:
        """Lease name -> the running replica among `candidates` holding it, when every one of `names` is
        so held in one listing of the namespace's Leases; else None."""
        by_id = {r.identity(): r for r in candidates if r.running()}
        specs = leases(self.kubectl, self.ns)
        out = {n: by_id.get(specs.get(n, {}).get("holderIdentity", "")) for n in names}
        return out if all(out.values()) else None

    def wait_held(self, names: list[str], candidates: list[Replica], limit_s: float = 20,
                  every_s: float = 0.25) -> dict[str, Replica]:
        return wait_for(lambda: self.holders(names, candidates), f"{names} each held by one of {candidates}",
                        limit_s, every_s)

    def no_lease_until(self, t0: float, limit_s: float = 10) -> list[str]:
        """The Lease names seen in the namespace, listed every 0.5 s until `limit_s` after `t0`."""
        seen = []
        while time.monotonic() - t0 < limit_s:
            seen.extend(leases(self.kubectl, self.ns))
            time.sleep(0.5)
        return seen

    def say(self, line: str) -> None:
        print(f"\n  {self._testMethodName}: {line}")

    # -- scenarios -----------------------------------------------------------------------------
    def test_engine_configmap_elects_one_leader_per_bucket(self):
        """The engine's ConfigMap is what Knative elects by: 3 buckets, 3 Leases of 15 s, each held by a
        running replica that logged leading it, and by no other."""
        data = self.engine_configmap(3)
        want = {"buckets": "3", "lease-duration": f"{LEASE_S}s", "renew-deadline": f"{RENEW_S}s",
                "retry-period": f"{RETRY_S}s"}
        self.assertEqual({k: data.get(k) for k in want}, want, "the applied ConfigMap")
        t0 = time.monotonic()
        replicas = self.start(3)
        names = lease_names(3)
        owners = self.wait_held(names, replicas)
        elapsed = time.monotonic() - t0
        specs = leases(self.kubectl, self.ns)
        self.assertEqual(sorted(specs), names, "exactly the three bucket Leases")
        for name in names:
            self.assertEqual(specs[name].get("leaseDurationSeconds"), LEASE_S, name)
            owner = owners[name]
            wait_for(lambda: name in owner.started_leading() and name in owner.promoted(),
                     f"{owner} to log `has started leading` and `promoted bucket` for {name}", 5)
            leaders = [r for r in replicas if name in r.started_leading()]
            self.assertEqual(leaders, [owner], f"{name}: the replicas that logged leading it")
        spread = ", ".join(f"{n.removeprefix('knleader.noop.')} by {owners[n]}" for n in names)
        self.say(f"3 Leases held {elapsed:.1f} s after 3 replicas started: {spread} "
                 f"(leaseDurationSeconds {LEASE_S})")

    def test_sigkilled_leader_handed_over_after_the_lease_expires(self):
        """A SIGKILLed leader's bucket passes to a live replica within leaseDuration + 2 retryPeriods + 5 s,
        and not before the Lease has expired: its last renewal was at most one retryPeriod before the kill.

        client-go's own worst case is leaseDuration + 2 x POLL_MAX_S (23.8 s): a candidate may see the last
        renewal one poll late and the expiry one poll late. Two candidates make it unlikely."""
        self.engine_configmap(3)
        replicas = self.start(3)
        lease = lease_names(3)[0]
        victim = self.wait_held([lease], replicas)[lease]
        others = [r for r in replicas if r is not victim]
        victim.signal(signal.SIGKILL)
        t0 = time.monotonic()
        bound = LEASE_S + 2 * RETRY_S + 5
        successor = self.wait_held([lease], others, bound + 10, every_s=0.1)[lease]
        elapsed = time.monotonic() - t0
        self.assertLessEqual(elapsed, bound, "handover after SIGKILL")
        self.assertGreaterEqual(elapsed, LEASE_S - RETRY_S - 1, "taken over before the Lease expired")
        wait_for(lambda: lease in successor.started_leading(), f"{successor} to log leading {lease}", 5)
        self.assertGreaterEqual(leases(self.kubectl, self.ns)[lease].get("leaseTransitions", 0), 1)
        self.say(f"SIGKILL of {victim}: {lease} held by {successor} after {elapsed:.1f} s "
                 f"(leaseDuration {LEASE_S}s, retryPeriod {RETRY_S}s, bound {bound} s)")

    def test_sigtermed_leader_releases_the_lease(self):
        """A SIGTERMed leader gives its Lease up within retryPeriod + 5 s (ReleaseOnCancel: holderIdentity
        emptied), a live replica takes it at its next poll (an empty holder is not waited out) and the leader
        exits 0."""
        self.engine_configmap(3)
        replicas = self.start(3)
        lease = lease_names(3)[0]
        victim = self.wait_held([lease], replicas)[lease]
        others = [r for r in replicas if r is not victim]
        gone = victim.identity()

        def given_up() -> tuple[str] | None:
            h = knleader.holder(self.kubectl, self.ns, lease)
            return (h,) if h != gone else None

        victim.signal(signal.SIGTERM)
        t0 = time.monotonic()
        (after,) = wait_for(given_up, f"{victim} to give up {lease}", RETRY_S + 5, every_s=0.05)
        released = time.monotonic() - t0
        bound = released + POLL_MAX_S + 3
        successor = self.wait_held([lease], others, bound + 10, every_s=0.1)[lease]
        taken = time.monotonic() - t0
        self.assertLessEqual(taken, bound, "handover after SIGTERM: a live replica's next poll")
        self.assertEqual(victim.wait(10), 0, f"{victim}: exit code after SIGTERM")
        self.say(f"SIGTERM of {victim}: {lease} given up after {released:.1f} s (holderIdentity {after!r}), "
                 f"held by {successor} after {taken:.1f} s (bound {bound:.1f} s); exit 0")

    def test_disable_ha_writes_no_lease(self):
        """With `--disable-ha` (and the engine's ConfigMap of 3 buckets there) the controller runs its
        workers, builds no elector and writes no Lease."""
        self.engine_configmap(3)
        t0 = time.monotonic()
        (replica,) = self.start(1, disable_ha=True)
        wait_for(lambda: "Started workers" in replica.messages(), f"{replica}'s workers to start", 10)
        started = time.monotonic() - t0
        self.assertEqual(self.no_lease_until(t0), [], "Leases written with --disable-ha")
        self.assertTrue(replica.running(), f"{replica} exited: {replica.log()[-2000:]}")
        electors = [m for m in replica.messages() if "leader-elected mode" in m]
        self.assertEqual(electors, [], "an elector was built")
        self.say(f"--disable-ha with buckets 3: workers started after {started:.1f} s, no Lease in 10 s, "
                 "still running")

    def test_sub_second_lease_duration_is_refused_by_the_lease_api(self):
        """Written by hand, lease-duration 900ms passes Knative's parser and client-go's own checks
        (900ms > 800ms > 1.2 x 100ms), but client-go writes leaseDurationSeconds as whole seconds, 0, which
        the API refuses on every attempt: the replicas run and nobody ever leads. `check` refuses it."""
        self.kubectl.run("-n", self.ns, "create", "configmap", "config-leader-election",
                         "--from-literal=lease-duration=900ms", "--from-literal=renew-deadline=800ms",
                         "--from-literal=retry-period=100ms")
        t0 = time.monotonic()
        replicas = self.start(2)

        def refusals(r: Replica) -> list[str]:
            return [line for line in r.log().splitlines() if "leaseDurationSeconds" in line]

        wait_for(lambda: all(refusals(r) for r in replicas), "the API's refusal in each replica's log", 10)
        self.assertEqual(self.no_lease_until(t0), [], "a Lease was written")
        for r in replicas:
            self.assertTrue(r.running(), f"{r} exited: {r.log()[-2000:]}")
            self.assertEqual(r.started_leading(), [], f"{r} led")
        error = json.loads(refusals(replicas[0])[0]).get("error", "")
        self.assertIn("spec.leaseDurationSeconds", error)
        counts = ", ".join(f"{r} {len(refusals(r))}" for r in replicas)
        policy = self.policy(lease="900ms", renew="800ms", retry="100ms", name="sub-second.yaml")
        r = self.cli("check", str(policy))
        self.assertEqual(r.returncode, 1, f"check accepted the sub-second policy: {r.stdout}{r.stderr}")
        self.assertIn("whole number of seconds", r.stderr)
        self.say(f"lease-duration 900ms: no Lease in 10 s, both replicas running, refusals logged "
                 f"({counts}): {error!r}; `check` exits 1")

    def test_bucket_count_change_gives_every_key_two_leaders(self):
        """A rolling restart after a bucket change: the old replicas (which read the ConfigMap at start)
        keep `00-of-01`, which covers every key, while the new ones take the `NN-of-03` buckets."""
        self.assertEqual(self.engine_configmap(1)["buckets"], "1")
        old = self.start(2)
        (single,) = lease_names(1)
        self.wait_held([single], old)
        self.assertEqual(self.engine_configmap(3)["buckets"], "3")
        new = self.start(2)

        def both() -> dict[str, Replica] | None:
            held = self.holders([single, *lease_names(3)], old + new)
            if held and held[single] in old and all(held[n] in new for n in lease_names(3)):
                return held
            return None

        held = wait_for(both, f"{single} held by an old replica and every NN-of-03 by a new one", 20)
        for r in old:
            self.assertEqual([m for m in r.messages() if "-of-03" in m], [], f"{r} saw the new bucket count")
        buckets = ", ".join(f"{n.removeprefix('knleader.noop.')} by {held[n]}" for n in lease_names(3))
        short = single.removeprefix("knleader.noop.")
        self.say(f"at one listing: {short} held by {held[single]} (buckets 1) and {buckets}: "
                 "every key has two leaders")
