"""Linux inotify through ctypes (the C library's inotify_init1/add_watch/rm_watch): no dependency.

Directory creation on cgroupfs is an ordinary mkdir(2) (systemd, the kubelet), which the VFS
reports to inotify as IN_CREATE|IN_ISDIR on the parent, as on any file system.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from dataclasses import dataclass

IN_CLOSE_WRITE = 0x00000008
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name


@dataclass(frozen=True)
class Event:
    wd: int
    mask: int
    name: str


def _libc() -> ctypes.CDLL:
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name, use_errno=True)
    for function in ("inotify_init1", "inotify_add_watch", "inotify_rm_watch"):
        if not hasattr(libc, function):
            raise OSError(f"the C library {name} has no {function}")
    libc.inotify_add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
    return libc


def parse_events(buffer: bytes) -> list[Event]:
    events, offset = [], 0
    while offset + _HEADER.size <= len(buffer):
        wd, mask, _cookie, length = _HEADER.unpack_from(buffer, offset)
        start = offset + _HEADER.size
        name = buffer[start : start + length].split(b"\0", 1)[0].decode(errors="replace")
        events.append(Event(wd, mask, name))
        offset = start + length
    return events


class Inotify:
    """One non-blocking inotify instance; raises OSError where the kernel or libc has none."""

    def __init__(self) -> None:
        self._libc = _libc()
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            number = ctypes.get_errno()
            raise OSError(number, f"inotify_init1: {os.strerror(number)}")
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def add_watch(self, path: str, mask: int) -> int:
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            number = ctypes.get_errno()
            raise OSError(number, os.strerror(number), path)
        return int(wd)

    def read(self) -> list[Event]:
        """Every event queued now (none: an empty list)."""
        chunks = []
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return parse_events(b"".join(chunks))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
