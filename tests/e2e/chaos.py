"""A seeded chaos soak of the product on the simulated cluster (issue 50): the runner half.

The cluster is simcluster's: a real etcd, kube-apiserver, kube-scheduler and kube-controller-manager
(deployment, replicaset, disruption, HPA, statefulset, garbage-collector and namespace controllers) from
KUBEBUILDER_ASSETS, and fake kubelets (kubelet.py) for 6 nodes over 3 zones. On it:

- the chart, installed as the suite installs it (install.py: helm with the loopback post-renderer), governing
  knative-serving, kourier-system and knative-eventing, with a short `reconcile.interval` (--interval);
- the product as the chart runs it with TWO replicas: the built binary started twice with the rendered
  Deployment's args (each also runs the leader-elected reconciler), behind a small TCP proxy on the one
  loopback URL the API server calls (it stands for the Service's endpoints: each connection goes to a
  replica whose /readyz answered 200 at the last check, every 0.5 s; TLS passes through);
- examples/priorityclass.yaml and the recommended policies (examples/policy.yaml,
  examples/policies/kourier-system.yaml, examples/policies/knative-eventing.yaml), then Knative Serving +
  Kourier and Eventing (core, in-memory channel, MT channel broker) v1.20 from tests/fixtures, applied
  through the webhook (kubectl apply; Knative's own webhook configurations, and the objects only Knative's
  webhook could admit, left out: no process answers them).

Then a nemesis (random.Random(seed)) starts a fault every U(10, 40) s for `duration` seconds; faults may
overlap, each picks its target at random and ends by itself, giving back what it took:

  drain            kubectl drain's way: cordon, one Eviction per pod, 429 tried again 5 s later, 60 s at most, uncordon
  node_loss        one node NotReady and tainted unreachable, its pods deleted (as lose_zone); back after 30-90 s
  zone_loss        both nodes of a zone, the same; back after 30-90 s
  webhook_kill     SIGKILL of one replica, started again 5-30 s later
  leader_kill      the same, of the replica holding the reconcile Lease
  apiserver_restart  kube-apiserver stopped and started again (same port, certificates, etcd)
  policy_edit      a valid change of a recommended policy (replicas 3<->4, the PDB, the buckets), back 30-90 s later
  policy_invalid   an invalid version applied (expected refused, or admitted and reported invalid while the
                   last valid one stays in force), the valid one applied again 10-30 s later
  policy_recreate  a policy deleted, created again 5-20 s later
  upgrade/downgrade  Serving+Kourier, or Eventing, 1.20 <-> 1.23, client-side or server-side apply at random
  hpa_min          an HPA's minReplicas raised by 1-2, lowered back 30-90 s later
  priority_burst   pods of a higher PriorityClass than ordinary workloads (sim-burst, 1000: below the control
                   plane's) that fill the nodes, removed after 30 s
  eviction_storm   Evictions of every pod of one component at once, again every second for 20 s

TODO: the Knative Operator variant (Knative installed by the Operator's KnativeServing/KnativeEventing) is not
built.

A recorder writes the history (history.jsonl; /work/notes/chaos-history-schema.md, tests/e2e/chaos_check.py
reads it): samples twice a second, the API server's admission counters for the webhook every 2 s, `audit`
every 10 s, config-leader-election and the governed specs on change, the replicas' RSS every 5 s. After the
faults everything is given up to 3 min to settle, a final audit is recorded, and `chaos_check.check` runs
when that module exists (else a short summary of the history is printed).

The parts, each depending only on those after it: this module (the command line and the run's phases),
chaos_faults.py (the nemesis: chaos_faults_nodes.py, chaos_faults_process.py, chaos_faults_config.py over
chaos_nemesis.py), chaos_record.py (the history and the recorder), chaos_stage.py (the cluster and the
product on it) and chaos_webhooks.py (the replicas and the proxy).

    scripts/measure/chaos --seed 1 --duration 30m [--faults drain,zone_loss] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import threading
import time
from pathlib import Path

import cluster
import simcluster
from chaos_faults import FAULT_ALIASES, FAULTS, Nemesis
from chaos_record import History, Recorder, go_duration
from chaos_stage import FIRST_RELEASE, Stage
from simcluster import NODES

SETTLE_S = 180


def parse_duration(text: str) -> float:
    """`30m`, `90s`, `1h30m`, `2m30s` or plain seconds -> seconds."""
    if re.fullmatch(r"[0-9.]+", text):
        return float(text)
    v = go_duration(text)
    if v is None or v <= 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30m, 90s, 1h)")
    return v


# -- the run ---------------------------------------------------------------------------------------------
class ChaosRun:
    """One soak: the stage set up, the history opened, the recorder and the nemesis run for `duration_s`,
    everything given `settle_s` to settle, a final audit recorded, everything stopped."""

    def __init__(self, seed: int, duration_s: float, faults: list[str], out: Path, binary: str,
                 interval_s: int = 30, start_s: float = 2.0, terminating_s: float = 2.0, settle_s: float = SETTLE_S):
        self.seed = seed
        self.duration_s = duration_s
        self.faults = faults
        self.out = out
        self.settle_s = settle_s
        self.out.mkdir(parents=True, exist_ok=True)
        self.workdir = self.out / "work"
        self.workdir.mkdir(exist_ok=True)
        self.history_path = self.out / "history.jsonl"
        self.logf = open(self.out / "chaos.log", "a")
        self.loglock = threading.Lock()
        self.stage = Stage(self.workdir, binary, interval_s, start_s, terminating_s, self.log)
        self.recorder: Recorder | None = None
        self.nemesis: Nemesis | None = None
        self.history: History | None = None

    def log(self, text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}"
        with self.loglock:
            print(line, flush=True)
            self.logf.write(line + "\n")
            self.logf.flush()

    def deleted_by_losses(self) -> dict[str, int]:
        """The nemesis's pods deleted from nodes still lost (for the samples' on_lost); none before it starts."""
        return self.nemesis.deleted_by_losses() if self.nemesis is not None else {}

    def run(self) -> Path:
        try:
            self.log(f"chaos: seed {self.seed}, {self.duration_s:.0f}s of faults {','.join(self.faults)}; work dir {self.workdir}")
            self.stage.start()
            self.history = self.stage.history = History(self.history_path)
            components = {k: v for k, v in sorted(self.stage.status()["want"].items())}
            self.history.write("run", seed=self.seed, duration_s=self.duration_s, faults=self.faults, binary=self.stage.binary,
                               started=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                               components=components, interval_s=self.stage.interval_s, replicas=self.stage.replicas.names,
                               nodes=dict(NODES), releases={"serving": FIRST_RELEASE, "eventing": FIRST_RELEASE},
                               workdir=str(self.workdir), install_s=round(self.stage.install_s, 1))
            self.recorder = Recorder(self.stage, self.history, self.log, self.deleted_by_losses)
            self.recorder.start()
            self.nemesis = Nemesis(self.stage, self.history, self.log, self.seed, self.faults, self.duration_s)
            self.nemesis.run_schedule()
            self.log(f"faults over ({self.nemesis.next_id} started); waiting for the running ones to end")
            stuck = self.nemesis.join(600)
            if stuck:
                self.history.write("note", text=f"faults still running after 600 s: {stuck}")
            self.settle()
            self.recorder.stop()
            proxy = self.stage.proxy
            self.history.write("note", text="end", phase="end", proxy={"forwarded": proxy.forwarded, "refused": proxy.refused},
                               recorder_errors=self.recorder.errors)
        finally:
            self.teardown()
        return self.history_path

    def settle(self) -> None:
        """After the faults: everything settled (or `settle_s` passed), the reconciler's next pass awaited, and
        the final audit recorded."""
        self.history.write("note", text="faults over", phase="settle")
        t = time.monotonic()
        settled = cluster.wait_for_bool(self.stage.settled, self.settle_s, 2)
        self.history.write("note", text=f"settled={settled} after {time.monotonic() - t:.1f}s", phase="settle",
                           settled=settled, settle_s=round(time.monotonic() - t, 1))
        self.log(f"settled={settled} in {time.monotonic() - t:.0f}s")
        # the reconciler's next pass: an audit in line (exit 0) after the settle, or interval + 45 s
        since = self.history.t()
        in_line = cluster.wait_for_bool(lambda: self.recorder.last_audit is not None and self.recorder.last_audit[0] > since
                                        and self.recorder.last_audit[1] == 0, self.stage.interval_s + 45, 1)
        self.log(f"audit in line after the settle: {in_line}")
        self.recorder.audit(final=True)

    def teardown(self) -> None:
        for part in (self.recorder, self.nemesis):
            if part is not None:
                part.stop()
        if self.history is not None:
            self.history.close()
        self.stage.stop()


# -- after the run ------------------------------------------------------------------------------------
def summary(history_path: Path) -> str:
    """A short summary of a history (without chaos_check)."""
    lines = [json.loads(ln) for ln in history_path.read_text().splitlines() if ln.strip()]
    run = next((ln for ln in lines if ln["type"] == "run"), {})
    out = [f"history {history_path}: {len(lines)} lines, seed {run.get('seed')}, {run.get('duration_s')}s"]
    starts = [ln for ln in lines if ln["type"] == "fault_start"]
    ends = {ln["id"]: ln for ln in lines if ln["type"] == "fault_end"}
    out.append(f"faults: {len(starts)}")
    for s in starts:
        e = ends.get(s["id"], {})
        out.append(f"  {s['t']:7.1f}-{e.get('t', float('nan')):7.1f}s #{s['id']:<3} {s['fault']:<18} {s['target']:<34} ok={e.get('ok')}")
    minimum: dict[str, int] = {}
    for ln in lines:
        if ln["type"] == "sample":
            for k, v in ln["ready"].items():
                minimum[k] = min(minimum.get(k, v), v)
    comps = run.get("components", {})
    out.append("fewest ready: " + ", ".join(f"{k.split('/')[1]} {minimum.get(k)}/{w}" for k, w in comps.items()))
    codes: dict[int, int] = {}
    for ln in lines:
        if ln["type"] == "eviction":
            codes[ln["code"]] = codes.get(ln["code"], 0) + 1
    out.append(f"evictions by code: {dict(sorted(codes.items()))}")
    bad_applies = [ln for ln in lines if ln["type"] == "apply" and ln["rc"] != 0 and not ln.get("expect_refused")]
    out.append(f"applies failed: {len(bad_applies)}" + "".join(f"\n  {a['t']}s {a['what']}: {a['stderr'][-200:]!r}" for a in bad_applies))
    adm = [ln for ln in lines if ln["type"] == "admission"]
    fo = rej = 0.0
    prev = None
    for a in adm:  # counters restart with the API server
        if prev is not None and a.get("apiserver_epoch") == prev.get("apiserver_epoch"):
            fo += max(0.0, a["fail_open"] - prev["fail_open"])
            rej += max(0.0, a["rejections"] - prev["rejections"])
        elif prev is not None:
            fo += a["fail_open"]
            rej += a["rejections"]
        prev = a
    out.append(f"admission: fail_open +{fo:.0f}, rejections +{rej:.0f}")
    audits = [ln for ln in lines if ln["type"] == "audit"]
    out.append(f"audits: {len(audits)}, rc counts {dict(sorted({a['rc']: sum(1 for b in audits if b['rc'] == a['rc']) for a in audits}.items()))}, "
               f"final rc {audits[-1]['rc'] if audits else None}")
    le_bad = [ln for ln in lines if ln["type"] == "leader_election_config" and not ln["valid"]]
    out.append(f"config-leader-election invalid: {len(le_bad)}")
    return "\n".join(out)


def check(history_path: Path):
    """chaos_check.check(history) when that module exists: (its result, its report text); else (None, None)."""
    try:
        import chaos_check  # noqa: PLC0415 - another engineer's module, optional
    except ImportError:
        return None, None
    result = chaos_check.check(str(history_path))
    return result, report_text(result)


def report_text(result) -> str:
    for attr in ("report", "text"):
        v = getattr(result, attr, None)
        if isinstance(v, str):
            return v
        if callable(v):
            try:
                out = v()
                if isinstance(out, str):
                    return out
            except TypeError:
                pass
    if isinstance(result, dict):
        return result.get("report") or json.dumps(result, indent=1, default=str)
    if isinstance(result, (tuple, list)) and result and isinstance(result[-1], str):
        return result[-1]
    return str(result)


def breaches(result) -> int:
    """How many breaches chaos_check's result holds (its `breaches` list or count, a dict's, a list's length)."""
    for b in (getattr(result, "breaches", None), result.get("breaches") if isinstance(result, dict) else None):
        if b is not None:
            return b if isinstance(b, int) else len(b)
    if isinstance(result, int):
        return result
    if isinstance(result, (list, tuple)):
        first = result[0] if result else []
        return first if isinstance(first, int) else len(first) if isinstance(first, (list, tuple)) else len(result)
    raise AssertionError(f"cannot read the breaches of chaos_check's result: {result!r}"[:300])


def faults_arg(text: str) -> list[str]:
    names = [FAULT_ALIASES.get(f.strip(), f.strip()) for f in text.split(",") if f.strip()]
    unknown = [f for f in names if f not in FAULTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown faults {unknown} (known: {', '.join(FAULTS)}, downgrade)")
    return list(dict.fromkeys(names))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/measure/chaos", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--duration", type=parse_duration, default=parse_duration("30m"), help="how long faults are injected (30m, 90s)")
    ap.add_argument("--faults", type=faults_arg, default=list(FAULTS), help=f"comma-separated subset of {','.join(FAULTS)}")
    ap.add_argument("--out", type=Path, default=None, help="where history.jsonl, chaos.log and work/ go (default: a new temp dir)")
    ap.add_argument("--interval", type=int, default=30, help="the chart's reconcile.interval in seconds (default 30)")
    args = ap.parse_args(argv)
    if not simcluster.assets_ready():
        print(simcluster.SKIP_LINE)
        return 0
    from base import binary  # noqa: PLC0415 - KHW_E2E_BINARY or target/debug
    out = args.out or Path(os.environ.get("KHW_E2E_WORKDIR") or "/tmp") / f"khw-chaos-seed{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    run = ChaosRun(args.seed, args.duration, args.faults, out.resolve(), binary(), interval_s=args.interval)
    path = run.run()
    print(f"\nhistory: {path}\nwork dir: {run.workdir}", flush=True)
    result, text = check(path)
    if text is None:
        print(summary(path))
        return 0
    print(text)
    try:
        return 1 if breaches(result) else 0
    except AssertionError as e:
        print(e)
        return 0


if __name__ == "__main__":
    sys.exit(main())
