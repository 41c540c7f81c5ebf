"""FaultProxy: a real HTTP/1.1 loopback proxy that injects faults between a client and a real server.

Put it in front of the model server or the environment server (``model.base_url`` / ``environment.url``
point at :attr:`FaultProxy.url`); a ``chooser(request) -> fault | None`` decides per request. Faults:

=================  ==================================================================================
``429_retry_after`` 429 with ``Retry-After`` (:attr:`retry_after` seconds); not forwarded
``429``            429 without ``Retry-After``; not forwarded
``500`` ``503``    a server error; not forwarded
``400`` ``401``    a client error; ``401`` (a refused key) quotes the key it was sent, as some APIs do
``reset_before``   the connection is reset (TCP RST) before anything is forwarded
``reset_after``    forwarded, the server processed it, then the connection is reset: the outcome is unknown
``timeout``        forwarded and processed, then no answer for :attr:`hold_s` seconds and the connection closed
``truncated``      forwarded; the status line and headers, half of the body, then a reset
``malformed``      forwarded; the answer's body replaced by bytes that are not JSON (status kept)
=================  ==================================================================================

It runs its own event loop on a daemon thread, so synchronous code (``runner.run`` calls ``asyncio.run``)
can use it. Counters: :attr:`injected` (per fault), :attr:`forwarded`, and :attr:`log` (method, path, body,
fault) of every request. Requests are read with ``Content-Length`` (what httpx sends); the upstream is
asked to close after each answer, so answers are framed by the connection's end.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

STATUS_FAULTS = {"429_retry_after": 429, "429": 429, "500": 500, "503": 503, "400": 400, "401": 401}
FORWARDED_FAULTS = ("reset_after", "timeout", "truncated", "malformed")
FAULTS = (*STATUS_FAULTS, "reset_before", *FORWARDED_FAULTS)
REASONS = {400: "Bad Request", 401: "Unauthorized", 429: "Too Many Requests", 500: "Internal Server Error",
           503: "Service Unavailable"}


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self):
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None

    @property
    def action(self) -> str | None:
        """The shop_env ``action`` of a ``POST /api/shop_agent`` body (else None)."""
        doc = self.json()
        return doc.get("action") if isinstance(doc, dict) else None


Chooser = Callable[[Request], "str | None"]


class RandomFaults:
    """Each request matching ``match`` gets one of ``faults`` with probability ``rate`` (seeded)."""

    def __init__(self, rate: float, faults: Iterable[str] = FAULTS, seed: int = 0,
                 match: Callable[[Request], bool] | None = None):
        self.rate, self.faults, self.rng, self.match = rate, list(faults), random.Random(seed), match
        unknown = set(self.faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; choose from {FAULTS}")

    def __call__(self, req: Request) -> str | None:
        if self.match is not None and not self.match(req):
            return None
        if self.rng.random() < self.rate:
            return self.rng.choice(self.faults)
        return None


class Script:
    """Deterministic faults: ``Script([(predicate, fault), ...])``; each entry fires once, on the first
    request it matches (entries are tried in order)."""

    def __init__(self, entries: Iterable[tuple[Callable[[Request], bool], str]]):
        self.entries = list(entries)
        for _, f in self.entries:
            if f not in FAULTS:
                raise ValueError(f"unknown fault {f!r}; choose from {FAULTS}")

    def __call__(self, req: Request) -> str | None:
        for i, (pred, fault) in enumerate(self.entries):
            if pred(req):
                del self.entries[i]
                return fault
        return None


@dataclass
class LogEntry:
    method: str
    path: str
    body: bytes
    fault: str | None
    status: int | None = None  # the upstream's status, when forwarded


@dataclass
class FaultProxy:
    upstream: str
    chooser: Chooser | None = None
    hold_s: float = 2.0
    retry_after: str = "0.2"
    keep_log: bool = True
    injected: Counter = field(default_factory=Counter)
    forwarded: int = 0
    log: list[LogEntry] = field(default_factory=list)

    def __post_init__(self):
        u = urlsplit(self.upstream)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self._prefix = u.path.rstrip("/")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self.port_local: int | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The proxy's base URL, with the upstream's path (``http://127.0.0.1:PORT/v1`` for a model server)."""
        return f"http://127.0.0.1:{self.port_local}{self._prefix}"

    def start(self) -> FaultProxy:
        ready = threading.Event()

        def main():
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
            self.port_local = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()
            pending = asyncio.all_tasks(self._loop)
            for t in pending:  # connections still open (a held timeout): end them before the loop closes
                t.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._server.close()
            self._loop.run_until_complete(self._server.wait_closed())
            self._loop.close()

        self._thread = threading.Thread(target=main, name="fault-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- one client connection -----------------------------------------------------------------
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                req = Request(method, target, headers, body)
                fault = self.chooser(req) if self.chooser else None
                entry = LogEntry(method, target, body, fault)
                if self.keep_log:
                    self.log.append(entry)
                if fault:
                    self.injected[fault] += 1
                if fault in STATUS_FAULTS:
                    await self._answer(writer, STATUS_FAULTS[fault], fault, headers.get("authorization", ""))
                    continue
                if fault == "reset_before":
                    return _reset(writer)
                status, resp_head, resp_body = await self._forward(head, headers, body)
                self.forwarded += 1
                entry.status = status
                if fault == "reset_after":
                    return _reset(writer)
                if fault == "timeout":
                    await asyncio.sleep(self.hold_s)
                    return
                if fault == "truncated":
                    writer.write(resp_head + resp_body[: len(resp_body) // 2])
                    await writer.drain()
                    return _reset(writer)
                if fault == "malformed":
                    resp_body = b"<html><body>502 upstream garbled {\"choices\": [</body>"
                    resp_head = _with_length(resp_head, len(resp_body))
                writer.write(resp_head + resp_body)
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, OSError):
            return
        except asyncio.CancelledError:  # the proxy is stopping: end quietly (a cancelled handler logs noise on 3.11)
            return
        finally:
            if not writer.is_closing():
                writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, status: int, fault: str, auth: str) -> None:
        msg = f"injected {fault} by FaultProxy"
        if status == 401:  # as some APIs do: quote the key that was refused (the client must mask it)
            msg += f"; incorrect API key provided: {auth.removeprefix('Bearer ')!r}"
        body = json.dumps({"error": {"message": msg, "type": "injected"}, "result": {"error": msg}}).encode()
        extra = f"Retry-After: {self.retry_after}\r\n" if fault == "429_retry_after" else ""
        writer.write((f"HTTP/1.1 {status} {REASONS[status]}\r\ncontent-type: application/json\r\n"
                      f"content-length: {len(body)}\r\n{extra}\r\n").encode() + body)
        await writer.drain()

    async def _forward(self, head: bytes, headers: dict, body: bytes) -> tuple[int, bytes, bytes]:
        """Send the request upstream (asking it to close after answering) and read the whole answer."""
        r, w = await asyncio.open_connection(self.host, self.port)
        try:
            lines = head.decode("latin-1").split("\r\n")
            kept = [ln for ln in lines[1:] if ln and not ln.lower().startswith(("connection:", "keep-alive:"))]
            w.write(("\r\n".join([lines[0], *kept, "Connection: close"]) + "\r\n\r\n").encode("latin-1") + body)
            await w.drain()
            raw = await r.read()
        finally:
            w.close()
        cut = raw.index(b"\r\n\r\n") + 4
        resp_head, resp_body = raw[:cut], raw[cut:]
        status = int(resp_head.split(b" ", 2)[1])
        resp_lines = resp_head[:-4].split(b"\r\n")
        resp_lines = [ln for ln in resp_lines if not ln.lower().startswith(b"connection:")]
        resp_head = b"\r\n".join(resp_lines) + b"\r\n\r\n"
        if not any(ln.lower().startswith((b"content-length:", b"transfer-encoding:")) for ln in resp_lines):
            resp_head = _with_length(resp_head, len(resp_body))
        return status, resp_head, resp_body


STEP_ACTIONS = (b'"interact"', b'"terminate"')


def steps_applied_twice(log: Iterable[LogEntry]) -> int:
    """Requests that could apply a step twice, from a proxy's log: after a step on a lease was forwarded and its
    answer lost (``reset_after``, ``timeout``, ``truncated``, ``malformed``), any later request on that lease but
    its ``release_one``. Against a server without idempotency keys it must be 0 (docs/reliability.md)."""
    lost: set[bytes] = set()
    twice = 0
    for e in log:
        lease = _lease_of(e.body)
        if lease is None:
            continue
        if lease in lost and b'"release_one"' not in e.body:
            twice += 1
        if e.fault in FORWARDED_FAULTS and any(a in e.body for a in STEP_ACTIONS):
            lost.add(lease)
    return twice


def steps_forwarded(log: Iterable[LogEntry]) -> int:
    """``interact`` / ``terminate`` requests the proxy forwarded (each applied once by the server)."""
    return sum(1 for e in log if e.status is not None and any(a in e.body for a in STEP_ACTIONS))


def _lease_of(body: bytes) -> bytes | None:
    try:
        doc = json.loads(body) if body else None
    except ValueError:
        return None
    lease = doc.get("lease_id") if isinstance(doc, dict) else None
    return str(lease).encode() if lease else None


def _with_length(head: bytes, n: int) -> bytes:
    lines = [ln for ln in head[:-4].split(b"\r\n") if not ln.lower().startswith(b"content-length:")]
    return b"\r\n".join([*lines, b"content-length: " + str(n).encode()]) + b"\r\n\r\n"


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0), not a FIN: the client sees 'connection reset by peer'."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()
