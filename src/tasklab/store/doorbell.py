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

Abstract sockets have no file permissions: any local user could send to one. So the
kernel stamps every datagram with its sender's credentials (`SO_PASSCRED`), and a
ring counts only from a user who could write the database itself (our own uid, root,
or the database file's owner); others are read and dropped. The `.bells/` directory
gets the database file's permissions for owner and group and none for others, also
under `umask 000`, so a stranger cannot add markers either.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import socket
import stat
import struct
import sys
from pathlib import Path

SUPPORTED = sys.platform.startswith("linux")


class Doorbell:
    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
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
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            sock.bind(self._address(name))
            self._make_dir()
            fd = os.open(self.dir / name, os.O_WRONLY | os.O_CREAT, 0o600)
            os.close(fd)
        except OSError:
            sock.close()
            return None
        self._own = name
        return sock

    def _make_dir(self) -> None:
        """The database's owner and group permissions, none for others (whatever the
        umask): only those who may write the database may add a marker."""
        try:
            db_mode = stat.S_IMODE(os.stat(self.db_path).st_mode)
        except OSError:
            db_mode = 0o600
        group = db_mode & 0o060
        mode = 0o700 | (group | 0o010 if group else 0)  # x: a group member may enter
        try:
            self.dir.mkdir()
        except FileExistsError:
            return
        os.chmod(self.dir, mode)  # mkdir's mode is masked by the umask; chmod is not

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


_UCRED = struct.Struct("3i")  # pid, uid, gid
_CMSG_SPACE = socket.CMSG_SPACE(_UCRED.size)


def trusted_uids(db_path: Path) -> frozenset[int]:
    """Who may ring: this process's user, root, and the database file's owner."""
    uids = {os.getuid(), 0}
    with contextlib.suppress(OSError):
        uids.add(os.stat(db_path).st_uid)
    return frozenset(uids)


def sender_uid(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            return int(_UCRED.unpack(data[: _UCRED.size])[1])
    return None


def wait_ring(sock: socket.socket, timeout: float, trusted: frozenset[int]) -> bool | None:
    """Wait up to `timeout` for rings: True if one came from a trusted user, False if
    none came, None if only datagrams from others came (read and dropped)."""
    ready, _, _ = select.select([sock], [], [], timeout)
    if not ready:
        return False
    rang = False
    with contextlib.suppress(BlockingIOError):
        while True:
            _, ancillary, _, _ = sock.recvmsg(64, _CMSG_SPACE, socket.MSG_DONTWAIT)
            rang = rang or sender_uid(ancillary) in trusted
    return True if rang else None
