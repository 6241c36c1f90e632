"""Give memory of large responses back to the OS after each request.

glibc's malloc raises its mmap threshold after a large block is freed (up to 32 MiB), so once a
1M-token response (tens of MB) has been served, later blocks of that size come from the heap and stay
resident: a server that answered one huge request keeps ~100 MB it no longer uses. Pinning the
threshold (``mallopt(M_MMAP_THRESHOLD, 1 MiB)``) makes every block of 1 MiB or more its own mapping,
returned to the OS when freed. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 1 << 20


def pin_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes; True when it took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))
