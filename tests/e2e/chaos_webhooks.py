"""The chaos soak's webhook (chaos.py): the product's replicas, each the built binary started with the
rendered Deployment's args, and the TCP proxy on the one loopback URL the API server calls, standing for
the webhook Service's endpoints (a connection goes to a replica whose /readyz answered 200 at the last
check, every 0.5 s; TLS passes through).
"""

from __future__ import annotations

import signal
import socket
import threading
import urllib.error
import urllib.request

import cluster
from install import Install


class Replicas:
    """The webhook replicas: their servers, listen ports, /readyz state (checked every 0.5 s) and which
    fault holds each (killed)."""

    def __init__(self, install: Install, names: list[str]):
        self.install = install
        self.names = names
        self.servers: dict = {}
        self.ports: dict[str, int] = {}
        self.up: dict[str, bool] = {n: False for n in names}
        self.held: dict[str, int] = {}  # replica -> fault id that killed it
        self.lock = threading.Lock()
        self.restarts: dict[str, int] = {n: 0 for n in names}
        self._halt = threading.Event()
        self._rr = 0

    def start(self) -> None:
        for n in self.names:
            self.ports[n] = cluster.free_port()
            self.servers[n] = self.install.start_server(n, port=self.ports[n])
        threading.Thread(target=self._check, daemon=True, name="readyz").start()

    def _ready(self, name: str) -> bool:
        s = self.servers.get(name)
        if s is None or s.proc is None or s.proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{s.metrics_port}/readyz", timeout=0.4) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def _check(self) -> None:
        while not self._halt.is_set():
            for n in self.names:
                self.up[n] = self._ready(n)
            self._halt.wait(0.5)

    def count_up(self) -> int:
        return sum(1 for n in self.names if self.up[n])

    def backends(self) -> list[int]:
        """Ports of the replicas up, round robin."""
        ups = [self.ports[n] for n in self.names if self.up[n]]
        if not ups:
            return []
        self._rr += 1
        k = self._rr % len(ups)
        return ups[k:] + ups[:k]

    def kill(self, name: str) -> None:
        s = self.servers[name]
        if s.proc is not None and s.proc.poll() is None:
            s.proc.send_signal(signal.SIGKILL)
            s.proc.wait(10)
        self.up[name] = False

    def restart(self, name: str) -> None:
        s = self.servers[name]
        if s.proc is not None and s.proc.poll() is None:  # an earlier start that never got ready
            s.proc.kill()
            s.proc.wait(10)
        s.start(ready_s=90)
        self.restarts[name] += 1

    def stop(self) -> None:
        self._halt.set()
        for s in self.servers.values():
            s.stop()


class Proxy(threading.Thread):
    """The webhook Service's endpoints: a TCP proxy on the URL's port that sends each connection to a
    replica that is up (TLS passes through and ends at the replica); no replica up: the connection is
    closed at once (the API server then fails open, as with a Service without endpoints)."""

    def __init__(self, port: int, replicas: Replicas):
        super().__init__(daemon=True, name="webhook-proxy")
        self.replicas = replicas
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(128)
        self.sock.settimeout(0.5)
        self._halt = threading.Event()
        self.refused = 0
        self.forwarded = 0

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(None)
        upstream = None
        for port in self.replicas.backends():
            try:
                upstream = socket.create_connection(("127.0.0.1", port), 1)
                upstream.settimeout(None)
                break
            except OSError:
                upstream = None
        if upstream is None:
            self.refused += 1
            conn.close()
            return
        self.forwarded += 1

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while True:
                    data = src.recv(65536)
                    if not data:
                        break
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

        t = threading.Thread(target=pump, args=(upstream, conn), daemon=True)
        t.start()
        pump(conn, upstream)
        t.join()
        conn.close()
        upstream.close()

    def stop(self) -> None:
        self._halt.set()
        self.sock.close()

