#!/usr/bin/env python3
"""Runs the real server the way the chart's Deployment runs it, with certs/generate.sh output.

Takes the container args from a `helm template` rendering, swaps in local paths and free loopback
ports (and, since there is no cluster here, `--policy-file`), starts `knative-ha-webhook`, and checks:
the chart's flags exist in `serve --help`; /healthz, /readyz and /metrics answer on the
--metrics-listen port (the probes' paths); POST /mutate over TLS verifies against ca.crt under each of
the four Service DNS names the certificate carries (the names the API server and cert-manager use);
SIGTERM makes /readyz fail and the process exit 0. Waits are bounded; nothing asserts a duration.

Prints `PASS`/`FAIL`/`SKIP` lines like check_rendered.py.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, str(Path(__file__).parent))
from check_rendered import Rendered, Report, eq, expect, load_docs  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")
    finally:
        conn.close()


def wait_for(pred, what: str, limit_s: float) -> None:
    """Bounded poll: at most limit_s seconds, 0.1 s apart."""
    deadline = time.monotonic() + limit_s
    last = None
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except OSError as e:
            last = e
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting for {what} after {limit_s:.0f}s (last error: {last})")


def review_for(obj: dict) -> dict:
    md = obj["metadata"]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "requestKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "requestResource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": md["name"],
            "namespace": md["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:e2e"},
            "object": obj,
            "oldObject": None,
            "dryRun": True,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin", required=True, type=Path, help="the knative-ha-webhook binary")
    ap.add_argument("--rendered", required=True, type=Path, help="helm template output (cert-manager mode)")
    ap.add_argument("--release", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--certs", required=True, type=Path, help="certs/generate.sh output for that Service")
    ap.add_argument("--policy", required=True, type=Path)
    ap.add_argument("--manifests", required=True, type=Path, help="Knative manifests (a Deployment to admit)")
    ap.add_argument("--server-source", type=Path, default=Path("src/server/mod.rs"))
    args = ap.parse_args()

    rep = Report()
    if "serve: not implemented yet" in args.server_source.read_text(errors="replace"):
        print("SKIP serve e2e: `knative-ha-webhook serve` is still the skeleton stub (not implemented in this source)")
        print(f"serve-e2e: {rep.passed} passed, {rep.failed} failed")
        return 0

    r = Rendered(args.rendered.read_text(), args.release, args.namespace, {})
    chart_args = r.args()
    svc = r.service["metadata"]["name"]
    ns = args.namespace
    names = [svc, f"{svc}.{ns}", f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local"]

    help_text = subprocess.run([str(args.bin), "serve", "--help"], capture_output=True, text=True,
                               check=False).stdout

    def flags():
        missing = [f for f in chart_args if f not in help_text]
        expect(not missing, f"flags the chart passes that `serve --help` does not know: {missing}")
        expect("POD_NAMESPACE" in help_text, "`serve --help` does not mention POD_NAMESPACE (--namespace)")
    rep.check("serve e2e: every flag in the chart's container args is a `serve` flag", flags)

    port, mport = free_port(), free_port()
    argv = [str(args.bin), "serve"]
    replace = {
        "--tls-cert": str(args.certs / "tls.crt"),
        "--tls-key": str(args.certs / "tls.key"),
        "--listen": f"127.0.0.1:{port}",
        "--metrics-listen": f"127.0.0.1:{mport}",
        "--shutdown-delay": "1s",  # the chart's value is checked statically; keep the test short
    }
    for flag, value in chart_args.items():
        argv += [flag, replace.get(flag, value)]
    argv += ["--policy-file", str(args.policy)]  # no cluster here
    env = dict(os.environ, POD_NAMESPACE=ns)
    log = open(args.certs / "serve.log", "w+")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        def probes():
            def ready():
                expect(proc.poll() is None, f"the server exited with {proc.returncode} (log below)")
                return http_get(mport, "/readyz")[0] == 200
            wait_for(ready, "/readyz 200", 60)
            eq(http_get(mport, "/healthz")[0], 200, "/healthz status")
            status, body = http_get(mport, "/metrics")
            eq(status, 200, "/metrics status")
            expect("knative_ha_webhook_" in body, "/metrics has no knative_ha_webhook_ series")
        rep.check("serve e2e: chart args start the server; /healthz, /readyz, /metrics on --metrics-listen", probes)

        docs = load_docs(args.manifests.read_text())
        deployment = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "controller"][0]

        def mutate():
            ctx = ssl.create_default_context(cafile=str(args.certs / "ca.crt"))
            for name in names:
                review = review_for(deployment)
                conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
                # Connect to loopback but verify the certificate for the Service DNS name (SNI + hostname).
                conn.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                            server_hostname=name)
                conn.request("POST", "/mutate", body=json.dumps(review),
                             headers={"Content-Type": "application/json", "Host": f"{name}:443"})
                resp = conn.getresponse()
                body = resp.read()
                conn.close()
                eq(resp.status, 200, f"/mutate status via {name}")
                out = json.loads(body)["response"]
                eq(out["uid"], review["request"]["uid"], "response uid")
                eq(out["allowed"], True, "allowed")
                eq(out.get("patchType"), "JSONPatch", "patchType")
                patch = json.loads(base64.b64decode(out["patch"]))
                expect(any(op["path"] == "/spec/replicas" for op in patch),
                       f"no /spec/replicas operation for controller in {patch}")
        rep.check("serve e2e: POST /mutate over TLS verified against ca.crt for all 4 Service DNS names", mutate)

        def sigterm():
            proc.send_signal(signal.SIGTERM)
            wait_for(lambda: proc.poll() is not None or http_get(mport, "/readyz")[0] != 200,
                     "/readyz to fail after SIGTERM", 30)
            rc = proc.wait(timeout=60)
            eq(rc, 0, "exit code after SIGTERM")
        rep.check("serve e2e: SIGTERM fails /readyz, then the server exits 0", sigterm)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if rep.failed:
            log.seek(0)
            print("--- serve log (tail)")
            print("".join(log.readlines()[-30:]), end="")
        log.close()

    print(f"serve-e2e: {rep.passed} passed, {rep.failed} failed")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
