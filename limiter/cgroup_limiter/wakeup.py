"""What wakes the scan loop between two scans: a new pod cgroup directory (inotify), the pods
file being rewritten (inotify), or the pod source learning of a pod (a self-pipe).

Without inotify (no libc symbol, the kernel's instance limit, a file system that does not
report) the loop still finds new cgroups in the scan every interval; the log says which.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
from collections.abc import Sequence
from pathlib import Path

from cgroup_limiter.discovery import QOS_CLASSES
from cgroup_limiter.inotify import (
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_IGNORED,
    IN_ISDIR,
    IN_MOVED_TO,
    IN_ONLYDIR,
    IN_Q_OVERFLOW,
    Inotify,
)

log = logging.getLogger(__name__)
_DIRS = IN_CREATE | IN_MOVED_TO | IN_ONLYDIR
_FILES = IN_CLOSE_WRITE | IN_MOVED_TO | IN_ONLYDIR


def pod_parents(root: Path) -> list[str]:
    """The directories pod cgroups are created in (discovery.py's layouts), and their parents
    down from the root, so that a parent created later is watched as soon as it appears."""
    systemd, cgroupfs = root / "kubepods.slice", root / "kubepods"
    return [
        str(path)
        for path in (
            root,
            systemd,
            *(systemd / f"kubepods-{qos}.slice" for qos in QOS_CLASSES),
            cgroupfs,
            *(cgroupfs / qos for qos in QOS_CLASSES),
        )
    ]


class CgroupWatcher:
    """inotify watches on the pod cgroups' parent directories and the pods file's directory."""

    def __init__(self, root: Path, files: Sequence[Path] = ()) -> None:
        self.masks = dict.fromkeys(pod_parents(root), _DIRS)
        self.names: dict[str, set[str]] = {}
        for file in files:
            directory = str(file.resolve().parent)
            self.masks[directory] = self.masks.get(directory, 0) | _FILES
            self.names.setdefault(directory, set()).add(file.name)
        self.watched: dict[int, str] = {}
        self.inotify: Inotify | None = None
        try:
            self.inotify = Inotify()
        except OSError as error:
            self.reason = f"inotify unavailable ({error})"
        else:
            self.reason = "inotify"
            self.refresh()

    def fileno(self) -> int | None:
        return self.inotify.fileno() if self.inotify else None

    def refresh(self) -> None:
        """Watch every directory of interest that exists now (adding a watch twice is harmless)."""
        assert self.inotify is not None
        paths = set(self.watched.values())
        for path, mask in self.masks.items():
            if path in paths:
                continue
            try:
                self.watched[self.inotify.add_watch(path, mask)] = path
            except (FileNotFoundError, NotADirectoryError):
                continue  # not created yet: its parent's watch reports it
            except OSError as error:  # the watch limit (ENOSPC), a permission: the scan still finds pods
                log.warning("inotify: cannot watch %s (%s); the scan every interval finds what it misses", path, error)

    def drain(self) -> bool:
        """Read the queued events; True when one may mean a new pod cgroup or a new pods file."""
        assert self.inotify is not None
        relevant = False
        events = self.inotify.read()
        for event in events:
            path = self.watched.get(event.wd)
            if event.mask & IN_Q_OVERFLOW:
                relevant = True  # events were lost: look at everything
            elif event.mask & IN_IGNORED:
                self.watched.pop(event.wd, None)  # the directory went away
            elif path is None:
                continue
            elif event.mask & IN_ISDIR or event.name in self.names.get(path, ()):
                relevant = True  # a directory (a pod cgroup, a QoS slice), or the pods file
        if events:
            self.refresh()
        return relevant

    def close(self) -> None:
        if self.inotify:
            self.inotify.close()


class Wakeup:
    """wait(timeout) returns True early when something new may be there to admit."""

    def __init__(self, watcher: CgroupWatcher) -> None:
        self.watcher = watcher
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def notify(self) -> None:
        """From any thread or a signal handler."""
        with contextlib.suppress(BlockingIOError):  # a full pipe already wakes the loop
            os.write(self._write, b"!")

    def wait(self, timeout: float) -> bool:
        watched = self.watcher.fileno()
        fds = [self._read] if watched is None else [self._read, watched]
        ready, _, _ = select.select(fds, [], [], max(0.0, timeout))
        woke = False
        if self._read in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._read, 4096):
                    pass
            woke = True
        if watched is not None and watched in ready:
            woke = self.watcher.drain() or woke
        return woke

    def close(self) -> None:
        self.watcher.close()
        os.close(self._read)
        os.close(self._write)
