"""Reading kernel files (sysfs, /proc) under a size limit.

A sysfs attribute's `show()` writes into one page (Documentation/filesystems/sysfs.rst:
"sysfs allocates a buffer of size (PAGE_SIZE)"), and /proc/meminfo, vmstat and
pressure/* are a few KiB. A file longer than its limit is no kernel file (a fixture
gone wrong, a link to /dev/zero): that is the file's error, and it is read no further,
so it cannot take the exporter's memory (docs/gpu.md#file-reads).
"""

from __future__ import annotations

import errno
import os

#: Text attributes and /proc files: one page is 4 KiB on x86-64 and up to 64 KiB on
#: arm64 and ppc64 kernels.
TEXT_MAX_BYTES = 64 * 1024
#: amdgpu's `gpu_metrics`: at most a page less a byte in the text attribute, 128 KiB
#: as the binary attribute (AMDGPU_GPU_METRICS_BIN_ATTR_MAX_SZ, amdgpu_pm.c).
GPU_METRICS_MAX_BYTES = 128 * 1024
_CHUNK_BYTES = 64 * 1024


def read_capped(path: str | os.PathLike[str], max_bytes: int = TEXT_MAX_BYTES) -> bytes:
    """The whole file, read with plain syscalls until EOF (gpu_metrics may come in
    short reads, amdgpu_pm.c); OSError(EFBIG) past `max_bytes`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks, size = [], 0
        while chunk := os.read(fd, min(_CHUNK_BYTES, max_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise OSError(errno.EFBIG, f"longer than {max_bytes} bytes, not a kernel "
                                           "file: not read further", str(path))
        return b"".join(chunks)
    finally:
        os.close(fd)
