"""Cross-process wake-ups for one SQLite database, without polling.

SQLite has no LISTEN/NOTIFY. Each process that waits for changes binds a datagram
socket in Linux's abstract namespace (nothing on disk to clean up; the kernel drops it
with the process) and leaves a marker file named after it in `<db>.bells/`. A process
that commits a change sends one byte to every marked socket. Markers of dead processes
are removed by the first writer whose send is refused. The directory listing is cached
and re-read only when the directory's mtime changes (a `stat` per ring).

A ring is a hint, not a message: the waiter re-reads the database. Lost rings (a full
socket buffer means the waiter is already awake) cost nothing; writers that do not
ring (the sqlite3 shell) are caught by the watcher's slow `data_version` check.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import socket
import sys
from pathlib import Path

SUPPORTED = sys.platform.startswith("linux")


class Doorbell:
    def __init__(self, db_path: Path) -> None:
        self.dir = db_path.with_name(db_path.name + ".bells")
        self._own: str | None = None
        self._sender = (
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)
            if SUPPORTED
            else None
        )
        self._peers: list[str] = []
        self._seen: int | None = None

    # ---- the waiting side ----------------------------------------------------------
    def listen(self) -> socket.socket | None:
        """A socket that receives this database's rings, or None where rings cannot be
        had (not Linux, a read-only directory): the caller then polls."""
        if not SUPPORTED:
            return None
        name = f"{os.getpid()}-{secrets.token_hex(8)}"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(self._address(name))
            self.dir.mkdir(exist_ok=True)
            (self.dir / name).touch()
        except OSError:
            sock.close()
            return None
        self._own = name
        return sock

    def unlisten(self, sock: socket.socket | None) -> None:
        if sock is not None:
            sock.close()
        if self._own is not None:
            with contextlib.suppress(OSError):
                (self.dir / self._own).unlink()
            self._own = None

    # ---- the committing side -------------------------------------------------------
    def ring(self) -> None:
        """Wake every other waiting process (best effort, never blocks)."""
        sender = self._sender
        if sender is None:
            return
        try:
            mtime = os.stat(self.dir).st_mtime_ns
        except OSError:
            return  # nobody has ever waited on this database
        if mtime != self._seen:
            self._seen = mtime
            try:
                self._peers = [e.name for e in os.scandir(self.dir) if e.name != self._own]
            except OSError:
                self._peers = []
        for name in self._peers:
            try:
                sender.sendto(b"!", self._address(name))
            except BlockingIOError:
                pass  # its buffer is full: it has rings to read already
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(OSError):  # a dead process's marker
                    (self.dir / name).unlink()
            except OSError:
                pass

    def interrupt(self) -> None:
        """Wake this process's own listener (so that it can see it should stop)."""
        if self._sender is not None and self._own is not None:
            with contextlib.suppress(OSError):
                self._sender.sendto(b"!", self._address(self._own))

    def close(self) -> None:
        if self._sender is not None:
            self._sender.close()
            self._sender = None

    def _address(self, name: str) -> str:
        return f"\0tasklab-bell-{name}"


def wait_ring(sock: socket.socket, timeout: float) -> bool:
    """Wait up to `timeout` for rings; True if any came (all pending ones are read)."""
    ready, _, _ = select.select([sock], [], [], timeout)
    if not ready:
        return False
    with contextlib.suppress(BlockingIOError):
        while True:
            sock.recv(64, socket.MSG_DONTWAIT)
    return True
