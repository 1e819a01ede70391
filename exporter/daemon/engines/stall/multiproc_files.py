"""Read a few values from prometheus_client's multiprocess files, as SGLang writes them.

The format (prometheus_client 0.26 `mmap_dict.py`, read at source): a file starts with
a 4-byte int, the bytes in use, then 4 bytes of padding. Entries follow, each a 4-byte
key length, the UTF-8 key (JSON `[metric_name, sample_name, {labels}, help]`) padded so
that the value lands 8-byte aligned, then two doubles: the value and a timestamp. A
writer appends an entry in full before it moves the in-use count, and overwrites the
16 value bytes in place. Files are `counter_<pid>.db`, `histogram_<pid>.db` and
`gauge_<mode>_<pid>.db`; they grow (the writer doubles the file and maps it again),
and an engine restart leaves new pids' files beside or instead of the old ones.

SGLang names the directory with PROMETHEUS_MULTIPROC_DIR. When the user sets it,
SGLang makes an empty `tmp*` directory inside it but leaves the variable, so the files
land in the user's directory itself (`utils/common.py::set_prometheus_multiproc_dir`,
0.5.5 to 0.5.23); when it is unset they land in a fresh `/tmp/tmp*`. This reader
takes the directory's own `*.db` files, and otherwise those of its newest `tmp*`
subdirectory that has any.

Each poll costs a directory listing, one fstat per file and one pread per wanted
value: the entries are located once and then only re-read, never re-parsed.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

_INT = struct.Struct("<i")
_TWO_DOUBLES = struct.Struct("<dd")


@dataclass(frozen=True)
class FileSample:
    """One value in one file. `kind` is the file's kind: counter, histogram, gauge_<mode>."""

    kind: str
    pid: str
    name: str
    labels: dict[str, str]
    value: float
    timestamp: float


class _DbFile:
    """One .db file, opened once; entries found by scanning only what was appended."""

    def __init__(self, path: str, kind: str, pid: str, wanted: Callable[[str], bool]) -> None:
        self.kind, self.pid, self.wanted = kind, pid, wanted
        self.fd = os.open(path, os.O_RDONLY)
        self.inode = os.fstat(self.fd).st_ino
        self.scanned_to = 8
        self.entries: list[tuple[str, dict[str, str], int]] = []  # name, labels, value offset

    def close(self) -> None:
        os.close(self.fd)

    def samples(self) -> list[FileSample]:
        head = os.pread(self.fd, 4, 0)
        if len(head) == 4:
            used = _INT.unpack(head)[0]
            if used > self.scanned_to:
                self._scan(used)
        found = []
        for name, labels, offset in self.entries:
            raw = os.pread(self.fd, 16, offset)
            if len(raw) == 16:
                value, timestamp = _TWO_DOUBLES.unpack(raw)
                found.append(FileSample(self.kind, self.pid, name, labels, value, timestamp))
        return found

    def _scan(self, used: int) -> None:
        data = os.pread(self.fd, used - self.scanned_to, self.scanned_to)
        base, pos = self.scanned_to, 0
        while pos + 4 <= len(data):
            length = _INT.unpack_from(data, pos)[0]
            padded = length + (8 - (length + 4) % 8)
            end = pos + 4 + padded + 16
            if length <= 0 or end > len(data):
                break  # a torn entry: try again next poll
            key = bytes(data[pos + 4:pos + 4 + length]).decode("utf-8", "replace")
            if self.wanted(key):
                try:
                    _, name, labels, _ = json.loads(key)
                except (ValueError, TypeError):
                    name = None
                if isinstance(name, str) and isinstance(labels, dict):
                    self.entries.append((name, {str(k): str(v) for k, v in labels.items()},
                                         base + pos + 4 + padded))
            pos = end
        self.scanned_to = base + pos


class MultiprocDir:
    """The files of one multiprocess directory, followed as they come and go."""

    def __init__(self, path: str, sample_names: frozenset[str]) -> None:
        self.path = path
        self.sample_names = sample_names
        # A cheap test before any JSON is parsed: the key holds `"<sample name>"`.
        quoted = tuple(f'"{name}"' for name in sample_names)
        self._wanted = lambda key: any(q in key for q in quoted)
        self._files: dict[str, _DbFile] = {}
        #: The .db files the last read found.
        self.names: list[str] = []

    def close(self) -> None:
        for db in self._files.values():
            db.close()
        self._files.clear()

    def read(self) -> list[FileSample]:
        """Every wanted value now on disk; raises OSError when the directory is gone."""
        directory, names = self._db_files()
        self.names = names
        seen = set()
        found: list[FileSample] = []
        for name in names:
            path = os.path.join(directory, name)
            seen.add(path)
            db = self._files.get(path)
            try:
                if db is not None and os.stat(path).st_ino != db.inode:
                    db.close()  # replaced (an engine restart reusing a pid)
                    db = None
                if db is None:
                    kind, _, pid = name[:-3].rpartition("_")
                    db = self._files[path] = _DbFile(path, kind, pid, self._wanted)
                found.extend(db.samples())
            except FileNotFoundError:  # vanished between the listing and the read
                self._forget(path)
        for path in [p for p in self._files if p not in seen]:
            self._forget(path)
        return found

    def _forget(self, path: str) -> None:
        db = self._files.pop(path, None)
        if db is not None:
            db.close()

    def _db_files(self) -> tuple[str, list[str]]:
        own = [n for n in os.listdir(self.path) if n.endswith(".db")]
        if own:
            return self.path, own
        newest: tuple[float, str, list[str]] | None = None
        with os.scandir(self.path) as entries:
            for entry in entries:
                if entry.name.startswith("tmp") and entry.is_dir():
                    files = [n for n in os.listdir(entry.path) if n.endswith(".db")]
                    mtime = entry.stat().st_mtime
                    if files and (newest is None or mtime > newest[0]):
                        newest = (mtime, entry.path, files)
        return (self.path, []) if newest is None else (newest[1], newest[2])
