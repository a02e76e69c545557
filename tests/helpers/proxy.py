"""A TCP proxy that can go silent: `pause()` stops forwarding in both directions
without closing a socket (a dead switch, a cloud network blip — no RST, no FIN);
`resume()` forwards again. New connections wait in the listen backlog meanwhile."""

from __future__ import annotations

import selectors
import socket
import threading


class SilentProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._forwarding = threading.Event()
        self._forwarding.set()
        self._stop = threading.Event()
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name="silent-proxy", daemon=True)
        self._thread.start()

    def pause(self) -> None:
        self._forwarding.clear()

    def resume(self) -> None:
        self._forwarding.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._forwarding.wait(0.05):
                continue  # silent: nothing is read, accepted or sent
            for key, _ in self._sel.select(0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if not self._forwarding.is_set():
                    break
                if sock is self._listener:
                    self._accept()
                else:
                    self._forward(sock)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        server = socket.create_connection(self.upstream)
        for s in (client, server):
            s.setblocking(False)
            self._sel.register(s, selectors.EVENT_READ)
        self._pairs[client], self._pairs[server] = server, client

    def _forward(self, sock: socket.socket) -> None:
        other = self._pairs.get(sock)
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data or other is None:
            self._drop(sock)
            return
        other.setblocking(True)
        try:
            other.sendall(data)
        except OSError:
            self._drop(sock)
        finally:
            other.setblocking(False)

    def _drop(self, sock: socket.socket) -> None:
        other = self._pairs.pop(sock, None)
        for s in (sock, other):
            if s is None:
                continue
            self._pairs.pop(s, None)
            try:
                self._sel.unregister(s)
            except (KeyError, ValueError):
                pass
            s.close()

    def close(self) -> None:
        self._stop.set()
        self._forwarding.set()
        self._thread.join(5)
        for s in list(self._pairs):
            s.close()
        self._listener.close()
