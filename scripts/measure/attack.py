#!/usr/bin/env python3
"""Hostile-client experiments against a running `knative-ha-webhook serve`: whether clients that hold
connections open, send slowly or send huge bodies slow the normal reviews or grow its memory.

Called by scripts/measure/attack, which starts the server. Loopback only, bounded: each experiment holds
its connections for HOLD seconds while a probe sends a normal review (a new TLS connection each
time) every 0.25 s, and prints the probe latency, how many held connections the server closed and
when, and the server's peak RSS (VmRSS sampled from /proc/PID/status every 50 ms).

Experiments (--only takes a comma list of these names; empty runs them all): raw_tcp, tls_silent,
slow_headers, h2_pings, h2_no_read, metrics_idle (held connections); declared_length (8 TLS
connections each declaring Content-Length: 2097152 and sending one byte of the body, held; its line
also gives the probes' and the held connections' answers by HTTP status); bombs (8 clients sending
7 MiB array bombs).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import ssl
import statistics
import struct
import time

HOLD = 15.0
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


class Ctx:
    def __init__(self, a):
        self.host = "127.0.0.1"
        self.port = a.port
        self.metrics_port = a.metrics_port
        self.pid = a.pid
        self.review = open(a.review, "rb").read()
        self.tls = ssl.create_default_context(cafile=a.ca)
        self.tls.set_alpn_protocols(["http/1.1"])
        self.tls_h2 = ssl.create_default_context(cafile=a.ca)
        self.tls_h2.set_alpn_protocols(["h2"])

    def rss_kib(self) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


async def one_review(ctx: Ctx) -> tuple[float, int]:
    """A normal review on a new connection: (seconds, HTTP status or 0 on failure)."""
    start = time.monotonic()
    try:
        r, w = await asyncio.wait_for(
            asyncio.open_connection(ctx.host, ctx.port, ssl=ctx.tls, server_hostname="localhost"), 10)
        head = (f"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(ctx.review)}\r\nConnection: close\r\n\r\n").encode()
        w.write(head + ctx.review)
        await w.drain()
        line = await asyncio.wait_for(r.readline(), 10)
        status = int(line.split()[1])
        w.close()
    except Exception:
        status = 0
    return time.monotonic() - start, status


async def one_probe(ctx: Ctx) -> tuple[float, int]:
    """GET /readyz on the metrics port, new connection."""
    start = time.monotonic()
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(ctx.host, ctx.metrics_port), 10)
        w.write(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await w.drain()
        line = await asyncio.wait_for(r.readline(), 10)
        status = int(line.split()[1])
        w.close()
    except Exception:
        status = 0
    return time.monotonic() - start, status


async def hold(ctx: Ctx, kind: str, closed: list, t0: float, answers: list | None = None) -> None:
    """Opens one hostile connection of `kind` and holds it; records when the server closed it
    (and, given `answers`, the HTTP status of what the server answered on it)."""
    port = ctx.metrics_port if kind == "metrics_idle" else ctx.port
    try:
        if kind in ("raw_tcp", "metrics_idle"):
            r, w = await asyncio.open_connection(ctx.host, port)
        elif kind.startswith("h2"):
            r, w = await asyncio.open_connection(ctx.host, port, ssl=ctx.tls_h2, server_hostname="localhost")
        else:
            r, w = await asyncio.open_connection(ctx.host, port, ssl=ctx.tls, server_hostname="localhost")
    except Exception:
        closed.append(("refused", time.monotonic() - t0))
        return
    try:
        if kind == "slow_headers":
            w.write(b"POST /mutate HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        elif kind == "declared_length":
            # Declares a 2 MiB body, sends one byte of it, then nothing.
            w.write(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 2097152\r\n\r\n{")
        elif kind == "h2_pings":
            w.write(PREFACE + frame(0x4, 0, 0))
        elif kind == "h2_no_read":
            # Window 0 (SETTINGS_INITIAL_WINDOW_SIZE), 20 requests, then never read or ACK a PING.
            w.write(PREFACE + frame(0x4, 0, 0, struct.pack(">HI", 0x4, 0)))
            for i in range(20):
                body = b"{" + b"x" * 16000
                w.write(frame(0x1, 0x4, 2 * i + 1, bytes([0x83, 0x87, 0x44, 0x07]) + b"/mutate"))
                w.write(frame(0x0, 0x1, 2 * i + 1, body))
        await w.drain()
        deadline = t0 + HOLD + 5
        while time.monotonic() < deadline:
            if kind == "h2_no_read":
                # Never read (asyncio buffers what arrives; nothing is answered or ACKed).
                await asyncio.sleep(0.5)
                if r.at_eof() or w.transport.is_closing():
                    break
                continue
            try:
                data = await asyncio.wait_for(r.read(4096), 1 if kind in ("slow_headers", "h2_pings") else 5)
                if not data:
                    break
                if answers is not None and data.startswith(b"HTTP/1.1 "):
                    answers.append(int(data.split()[1]))
            except asyncio.TimeoutError:
                pass
            if kind == "slow_headers":
                w.write(b"b")
            elif kind == "h2_pings" and int(time.monotonic() - t0) % 2 == 0:
                w.write(frame(0x6, 0, 0, b"\0" * 8))
            await w.drain()
        else:
            closed.append(("held", None))
            w.close()
            return
    except Exception:
        pass
    finally:
        w.close()   # also when cancelled: no held connection outlives its experiment
    closed.append(("closed", time.monotonic() - t0))


async def sample_rss(ctx: Ctx, stop: asyncio.Event, peak: list) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], ctx.rss_kib())
        await asyncio.sleep(0.05)


async def probe_loop(ctx: Ctx, stop: asyncio.Event, lat: list, metrics: bool) -> None:
    while not stop.is_set():
        lat.append(await (one_probe(ctx) if metrics else one_review(ctx)))
        await asyncio.sleep(0.25)


def by_status(codes) -> dict:
    codes = list(codes)
    return {str(c): sum(1 for x in codes if x == c) for c in sorted(set(codes))}


def summary(name: str, lat: list, closed: list | None, peak_kib: int, n: int,
            extra: dict | None = None) -> dict:
    ok = [t for t, s in lat if s == 200]
    out = {
        "experiment": name,
        "probe_ok": f"{len(ok)}/{len(lat)}",
        "probe_p50_ms": round(statistics.median(ok) * 1000, 1) if ok else None,
        "probe_max_ms": round(max(ok) * 1000, 1) if ok else None,
        "peak_rss_mib": round(peak_kib / 1024, 1),
    }
    if closed is not None:
        times = [t for k, t in closed if k == "closed"]
        out["held"] = n
        out["closed_by_server"] = len(times)
        out["refused"] = sum(1 for k, _ in closed if k == "refused")
        out["still_open_at_end"] = sum(1 for k, _ in closed if k == "held")
        out["last_close_s"] = round(max(times), 1) if times else None
    out.update(extra or {})
    print(json.dumps(out), flush=True)
    return out


async def held_experiment(ctx: Ctx, kind: str, n: int, settle_s: float = 0.0) -> dict:
    """n hostile connections of `kind` (opened 200 at a time), held for HOLD s while the probe runs;
    `settle_s` lets their requests in before the first probe. For `declared_length` the line also gives
    the probes' and the held connections' answers by HTTP status."""
    stop, peak, lat, closed, answers = asyncio.Event(), [0], [], [], []
    t0 = time.monotonic()
    rss = asyncio.create_task(sample_rss(ctx, stop, peak))
    holders = []
    for i in range(0, n, 200):
        holders += [asyncio.create_task(hold(ctx, kind, closed, t0, answers)) for _ in range(min(200, n - i))]
        await asyncio.sleep(0.05)
    await asyncio.sleep(settle_s)
    probe = asyncio.create_task(probe_loop(ctx, stop, lat, kind == "metrics_idle"))
    await asyncio.sleep(HOLD)
    stop.set()
    await probe
    await asyncio.wait(holders, timeout=10)
    for h in holders:
        h.cancel()
    await asyncio.gather(*holders, return_exceptions=True)
    await rss
    extra = None
    if kind == "declared_length":
        extra = {"probe_answers": by_status(s for _, s in lat), "held_answers": by_status(answers)}
    return summary(kind, lat, closed, peak[0], n, extra)


async def bomb(ctx: Ctx, stop: asyncio.Event, codes: list) -> None:
    n = 2_440_000
    body = (b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"kind":'
            b'{"group":"apps","version":"v1","kind":"Deployment"},"operation":"CREATE",'
            b'"namespace":"knative-serving","object":[' + b"[]," * (n - 1) + b"[]]}}")
    while not stop.is_set():
        try:
            r, w = await asyncio.open_connection(ctx.host, ctx.port, ssl=ctx.tls, server_hostname="localhost")
            w.write((f"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                     f"Connection: close\r\n\r\n").encode() + body)
            await w.drain()
            line = await asyncio.wait_for(r.readline(), 30)
            codes.append(int(line.split()[1]))
            w.close()
        except Exception:
            codes.append(0)


async def bomb_experiment(ctx: Ctx) -> dict:
    stop, peak, lat, codes = asyncio.Event(), [0], [], []
    rss = asyncio.create_task(sample_rss(ctx, stop, peak))
    bombs = [asyncio.create_task(bomb(ctx, stop, codes)) for _ in range(8)]
    probe = asyncio.create_task(probe_loop(ctx, stop, lat, False))
    await asyncio.sleep(HOLD)
    stop.set()
    await probe
    await asyncio.wait(bombs, timeout=30)
    await rss
    out = summary("array_bombs_8x7MiB", lat, None, peak[0], 8)
    print(json.dumps({"bomb_answers": {str(c): codes.count(c) for c in sorted(set(codes))}}), flush=True)
    return out


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--metrics-port", type=int, required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--review", required=True)
    p.add_argument("--held", type=int, default=2000)
    p.add_argument("--only", default="")
    a = p.parse_args()
    # asyncio logs every write to a socket the server closed; those closes are the point.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    ctx = Ctx(a)
    kinds = ["raw_tcp", "tls_silent", "slow_headers", "h2_pings", "h2_no_read", "metrics_idle"]
    for kind in kinds:
        if not a.only or kind in a.only.split(","):
            await held_experiment(ctx, kind, 20 if kind == "h2_no_read" else a.held)
    if not a.only or "declared_length" in a.only.split(","):
        # 8 connections declaring 2 MiB and sending one byte of it: a server charging its body
        # budget from the declared length would be spent.
        await held_experiment(ctx, "declared_length", 8, settle_s=0.5)
    if not a.only or "bombs" in a.only.split(","):
        await bomb_experiment(ctx)
    with open(f"/proc/{ctx.pid}/status") as f:
        hwm = next(l for l in f if l.startswith("VmHWM:"))
    print(json.dumps({"server_VmHWM_mib": round(int(hwm.split()[1]) / 1024, 1)}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
