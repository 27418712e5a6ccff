"""The faults a real network makes, between a client and a real etcd: the nemesis.

Two relays on 127.0.0.1, each started and stopped by its test (or a fixture):

- :class:`HttpNemesis` stands in front of one member's client port and decides each HTTP
  request by a policy: forward it, forward it and lose the answer (``drop-after``: the
  write lands, the client never hears), or keep it unsent and deliver it later
  (``hold``, then :meth:`HttpNemesis.deliver`: a proposal that commits after the client
  gave up), or never answer it (``stall``: a member stopped, its sockets open).
  Streamed answers (a watch) are relayed as they come.
- :func:`not_etcd` answers every request with one status and body, as a proxy's page
  or a member with its gateway off does.
- :class:`PeerCut` stands in front of each member's peer port (the cluster advertises the
  relays, :func:`~harness.services.etcd.running_etcd_cluster`'s ``peer_relay``). Its
  :meth:`PeerCut.cut` cuts one member from the others while clients still reach it: a
  real partition, as raft sees it.

Rules: loopback only; every socket has a timeout (``timeout``), so a relay never blocks a
test past it; :meth:`close` shuts every connection and joins the threads. A fault is what
the network does, never a change to the product's code.
"""

from __future__ import annotations

import http.client
import http.server
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass
from typing import BinaryIO, Literal

from typing_extensions import Self

from .etcd import EtcdMember

__all__ = ["Action", "HttpNemesis", "Once", "PeerCut", "Request", "not_etcd"]

#: What :class:`HttpNemesis` does with one request.
Action = Literal["forward", "drop-after", "hold", "stall"]
#: Seconds a relay's socket waits at most for one read or write.
TIMEOUT = 60.0
_LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Request:
    """One HTTP request a client sent: method, path, headers (names lowercased), body."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class Once:
    """A policy: ``action`` for the first request that ``matches`` once armed, then
    ``forward`` again. Arm it with :attr:`armed`; :attr:`hit` tells it acted."""

    def __init__(self, matches: Callable[[Request], bool], action: Action = "hold") -> None:
        self._matches = matches
        self._action: Action = action
        self.armed = False
        self.hit = False

    def __call__(self, request: Request) -> Action:
        if self.armed and self._matches(request):
            self.armed, self.hit = False, True
            return self._action
        return "forward"


class _Relay:
    """A listener on 127.0.0.1 whose connections each get a thread; closed as a whole."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._listener = socket.create_server((_LOOPBACK, 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._closing = threading.Event()
        self._spawn(self._accept)

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _track(self, sock: socket.socket) -> bool:
        """Remember ``sock`` to shut it at :meth:`close`; False once closed."""
        with self._lock:
            if not self._closed:
                self._sockets.add(sock)
                return True
        sock.close()
        return False

    def _forget(self, *socks: socket.socket) -> None:
        for sock in socks:
            with self._lock:
                self._sockets.discard(sock)
            _shut(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            client.settimeout(self.timeout)
            if self._track(client):
                self._spawn(self._serve, client)

    def _serve(self, client: socket.socket) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop listening, shut every connection, join every thread (bounded)."""
        self._closing.set()
        with self._lock:
            self._closed = True
            socks, self._sockets = [*self._sockets], set()
            threads = [*self._threads]
        _shut(self._listener)
        for sock in socks:
            _shut(sock)
        for thread in threads:
            thread.join(timeout=self.timeout)


class HttpNemesis(_Relay):
    """An HTTP relay in front of one etcd member's client port; see the module docs.

    Args:
        upstream: the member's ``host:port``; may be set later (:attr:`upstream`), before
            the first request.
        policy: what to do with each request (``forward`` when ``None``).
        timeout: seconds any socket of the relay waits at most.
    """

    def __init__(
        self,
        upstream: str = "",
        policy: Callable[[Request], Action] | None = None,
        *,
        timeout: float = TIMEOUT,
    ) -> None:
        self.upstream = upstream
        self.policy: Callable[[Request], Action] = policy or (lambda request: "forward")
        self.held: list[Request] = []
        self.seen: list[tuple[Request, Action]] = []
        super().__init__(timeout)

    @property
    def endpoint(self) -> str:
        """Where a client reaches the member through it: ``127.0.0.1:port``."""
        return f"{_LOOPBACK}:{self.port}"

    @property
    def url(self) -> str:
        """Its URL, for a member to tell its clients: ``http://127.0.0.1:port``."""
        return f"http://{self.endpoint}"

    def deliver(self) -> list[int]:
        """Send every held request to the member now, each once; their HTTP statuses."""
        with self._lock:
            held, self.held = self.held, []
        statuses = []
        for request in held:
            connection, response = self._send(request)
            with closing(connection):
                response.read()
            statuses.append(response.status)
        return statuses

    def _send(
        self, request: Request
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        host, _, port = self.upstream.rpartition(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=self.timeout)
        skip = ("connection", "host", "content-length", "transfer-encoding")
        headers = {name: value for name, value in request.headers.items() if name not in skip}
        connection.request(request.method, request.path, request.body, headers)
        return connection, connection.getresponse()

    def _serve(self, client: socket.socket) -> None:
        reader = client.makefile("rb")
        try:
            for request in _requests(reader):
                action = self.policy(request)
                with self._lock:
                    self.seen.append((request, action))
                    if action == "hold":
                        self.held.append(request)
                if action == "hold":
                    return  # the client sees its connection end, unanswered
                if action == "stall":
                    self._closing.wait(self.timeout)  # open and silent, as a stopped member
                    return
                connection, response = self._send(request)
                with closing(connection):
                    if action == "drop-after":
                        response.read()  # etcd answered: the client never hears it
                        return
                    _relay_answer(client, response)
        except (OSError, http.client.HTTPException, ValueError):
            pass  # either side went away: so does the connection
        finally:
            reader.close()
            self._forget(client)


class PeerCut(_Relay):
    """TCP relays in front of the members' peer ports, one per member; see the module docs.

    :meth:`relay` starts the relay of one member (the cluster advertises its port);
    :meth:`cut` then refuses every peer connection to that member and from it (etcd's
    ``X-Server-From`` header names the dialing member) and ends the live ones.
    """

    def __init__(self, timeout: float = TIMEOUT) -> None:
        self._relays: list[_PeerRelay] = []
        self._cut: tuple[str, str] | None = None  # (name, member id in hex)
        super().__init__(timeout)

    def relay(self, name: str, port: int) -> int:
        """Start the relay of member ``name`` whose peer port is ``port``; its own port."""
        relay = _PeerRelay(self, name, port)
        self._relays.append(relay)
        return relay.port

    def blocked(self, sender: str, target: str) -> bool:
        """Whether a peer connection from member id ``sender`` to ``target`` is refused."""
        cut = self._cut
        return cut is not None and (target == cut[0] or sender == cut[1])

    def cut(self, member: EtcdMember) -> None:
        """Cut ``member`` from the others; its live peer connections end."""
        status = member.server.gateway("/v3/maintenance/status", {}, timeout=10)
        self._cut = (member.name, format(int(status["header"]["member_id"]), "x"))
        for relay in self._relays:
            relay.drop_blocked()

    def heal(self) -> None:
        """Let every member reach the others again."""
        self._cut = None

    def _serve(self, client: socket.socket) -> None:  # the parent listens for nothing
        client.close()

    def close(self) -> None:
        for relay in self._relays:
            relay.close()
        super().close()


class _PeerRelay(_Relay):
    """One member's peer relay: a TCP pipe, refused or ended when :class:`PeerCut` says."""

    def __init__(self, cut: PeerCut, name: str, port: int) -> None:
        self._cut = cut
        self._name = name
        self._upstream = port
        self._live: list[tuple[str, socket.socket, socket.socket]] = []
        super().__init__(cut.timeout)

    def _serve(self, client: socket.socket) -> None:
        head = b""
        try:
            while b"\r\n\r\n" not in head and len(head) < 65536:
                data = client.recv(65536)
                if not data:
                    break
                head += data
        except OSError:
            head = b""
        sender = _header(head, "x-server-from")
        if not head or self._cut.blocked(sender, self._name):
            self._forget(client)
            return
        try:
            upstream = socket.create_connection((_LOOPBACK, self._upstream), timeout=5)
        except OSError:
            self._forget(client)
            return
        if not self._track(upstream):
            self._forget(client)
            return
        client.settimeout(None)  # raft's streams idle for long; close() shuts them
        upstream.settimeout(None)
        with self._lock:
            self._live.append((sender, client, upstream))
        self._spawn(_pump, upstream, client)
        try:
            upstream.sendall(head)
            _pump(client, upstream)
        except OSError:
            pass
        finally:
            self._forget(client, upstream)

    def drop_blocked(self) -> None:
        """End the live connections :class:`PeerCut` now refuses."""
        with self._lock:
            ended = [pair for pair in self._live if self._cut.blocked(pair[0], self._name)]
            self._live = [pair for pair in self._live if pair not in ended]
        for _, client, upstream in ended:
            self._forget(client, upstream)


@contextmanager
def not_etcd(status: int, body: bytes) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 that answers every request ``status`` and ``body`` (a
    proxy's page, a member with its gateway off); yields its ``host:port``."""

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass  # quiet

    server = http.server.ThreadingHTTPServer((_LOOPBACK, 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{_LOOPBACK}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT)


def _requests(reader: BinaryIO) -> Iterator[Request]:
    """The HTTP/1.1 requests a client sends on one connection, each read whole."""
    while True:
        line = reader.readline(65537)
        if not line.strip():
            return
        method, path, _ = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while (field := reader.readline(65537)) not in (b"\r\n", b"\n", b""):
            name, _, value = field.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0") or 0)
        yield Request(method, path, headers, reader.read(length) if length else b"")


def _relay_answer(client: socket.socket, response: http.client.HTTPResponse) -> None:
    """Send ``response`` to ``client``: whole, or chunk by chunk as it streams."""
    kind = response.getheader("content-type", "application/json")
    head = f"HTTP/1.1 {response.status} {response.reason}\r\nContent-Type: {kind}\r\n"
    if response.chunked:
        client.sendall(f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
        while chunk := response.read1(65536):
            client.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        client.sendall(b"0\r\n\r\n")
        return
    body = response.read()
    client.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)


def _header(head: bytes, name: str) -> str:
    for line in head.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        key, _, value = line.decode("latin-1").partition(":")
        if key.strip().lower() == name:
            return value.strip()
    return ""


def _pump(source: socket.socket, target: socket.socket) -> None:
    """Copy ``source`` to ``target`` until either ends; then shut both."""
    with suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    _shut(source)
    _shut(target)


def _shut(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
