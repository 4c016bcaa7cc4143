"""Training on a CPU: keep the memory one step frees for the next step's tensors.

glibc's ``malloc`` hands a freed block of 32 MiB or more (a long sequence's activations, a vocabulary's logits)
straight back to the kernel, and gives back the free top of its heap. The next step's tensors then take fresh
pages, which the kernel maps and zeroes 4 KiB at a time on first touch: on this project's 2-core VM a third of a
rev-lsh layer's training step at 16k tokens and a sixth of a small BERT's MLM step (benchmarks/README.md, "Issue 70,
the allocator"). :func:`retain_freed_memory` keeps such blocks in the heap, where the next step reuses them, as the
jemalloc settings of PyTorch's CPU launcher (``torch.backends.xeon.run_cpu``) do. The process then holds its peak
memory until it exits, as a GPU's caching allocator does.
"""

import ctypes
import os
import platform

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's malloc.h
LARGEST_TRIM_THRESHOLD = 2 ** 31 - 1  # (mallopt takes an int)
# the variables through which a user already tunes glibc's malloc: theirs is kept
GLIBC_MALLOC_VARIABLES = ("GLIBC_TUNABLES", "MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
                          "MALLOC_TOP_PAD_")


def can_retain_freed_memory() -> bool:
    """Whether this process runs glibc's ``malloc`` (Linux), the allocator :func:`retain_freed_memory` tunes."""
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def retain_freed_memory() -> bool:
    """From now on, every block this process frees stays in its heap for the next allocation (glibc: no ``mmap`` of
    large blocks, no trimming of the heap below 2 GiB of free top). Returns False, changing nothing, where a
    ``GLIBC_TUNABLES`` or ``MALLOC_*_`` variable already tunes ``malloc`` (the user's settings stand); raises
    ``RuntimeError`` where the C library is not glibc."""
    if not can_retain_freed_memory():
        raise RuntimeError(f"retaining freed memory needs glibc's malloc (Linux); this process runs "
                           f"{platform.system()} with {platform.libc_ver()[0] or 'another C library'}")
    if any(name in os.environ for name in GLIBC_MALLOC_VARIABLES):
        return False
    libc = ctypes.CDLL(None)  # the C library this process already runs
    if not (libc.mallopt(M_MMAP_MAX, 0) and libc.mallopt(M_TRIM_THRESHOLD, LARGEST_TRIM_THRESHOLD)):
        raise RuntimeError("glibc's mallopt refused M_MMAP_MAX / M_TRIM_THRESHOLD")
    return True
