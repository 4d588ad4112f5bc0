"""How dlbench starts worker processes (DataLoader workers, converter workers): fork only where it is safe."""

from __future__ import annotations

import multiprocessing
import os
import threading

# imported once by the fork server, so that each worker it forks starts with the loaders and the decoder loaded
# (torchcodec imports torch._dynamo: about 1.4 s of CPU for every process that imports it itself)
DECODER_MODULE = "torchcodec.decoders"
FORKSERVER_PRELOAD = ["dlbench.loader.map", "dlbench.loader.stream", "dlbench.loader.dataloader", DECODER_MODULE]


def start_method(cuda: bool = False) -> str:
    """The multiprocessing start method for workers started now.

    - "spawn" for workers that use CUDA: CUDA cannot start in a forked process.
    - "fork" where the platform has it and no other Python thread runs in this process: a worker then starts in
      milliseconds with everything this process imported.
    - "forkserver" otherwise. A fork copies every lock as it is at that moment, and one that another thread held
      stays held in the child forever. CPython 3.11's own after-fork code can block on such a lock before any of the
      child's code runs; the child then never reports and its DataLoader waits for ever. Threads that outlive their
      use are common (fsspec's I/O loop once a remote file was read, multiprocessing's resource sharer). The fork
      server is a fresh single-threaded process (started with exec) that imports `FORKSERVER_PRELOAD` once and
      forks each worker from there.
    """
    if cuda:
        return "spawn"
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return "fork"
    if "forkserver" in methods:
        multiprocessing.set_forkserver_preload(FORKSERVER_PRELOAD)  # no effect once the server runs
        return "forkserver"
    return "spawn"


class ParentSettings:
    """This process's environment and fsspec configuration as they are now, set again in a worker as it starts.

    A worker forked from the fork server otherwise has them as they were when that server started, so S3
    credentials or an endpoint set since (`dlbench.sources.apply_env`, a notebook's `os.environ`) would not reach
    it. Use it as the worker's target or init function: called, it sets them, then calls `then` (if given) with the
    same arguments. Forked and spawned workers already have them; setting them again changes nothing there."""

    def __init__(self, then=None):
        import fsspec.config

        self.then = then
        self.env = dict(os.environ)
        # protocol -> its kwargs, copied one level down: plain values copy, objects a user put there are shared
        self.fsspec_conf = {protocol: dict(kwargs) for protocol, kwargs in fsspec.config.conf.items()}

    def __call__(self, *args, **kwargs):
        import fsspec.config

        for key in set(os.environ) - set(self.env):
            del os.environ[key]
        os.environ.update(self.env)
        fsspec.config.conf.clear()  # in place: fsspec reads this very dict
        fsspec.config.conf.update(self.fsspec_conf)
        if self.then is not None:
            return self.then(*args, **kwargs)
        return None


# bytes: blocks up to this size come from the heap and stay there once freed (a 480x640 sarm block is ~60 MB)
HEAP_BLOCK_BYTES = 256 * 2**20
_heap_kept = False


def keep_freed_blocks() -> bool:
    """In a worker process: make glibc keep freed large blocks for reuse instead of returning them to the kernel.

    Each decode allocates its frames anew. By default glibc maps every block over 32 MB fresh and unmaps it when
    freed, so every frame of every decode pays a page fault per 4 KB before a pixel is written; kept on the heap,
    the next decode reuses the same, already mapped pages. Peak memory is unchanged (the blocks were alive at the
    peak anyway). Returns False, changing nothing, where the C library is not glibc. Idempotent."""
    global _heap_kept
    if _heap_kept:
        return True
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's <malloc.h>
    _heap_kept = bool(mallopt(m_mmap_threshold, HEAP_BLOCK_BYTES) and mallopt(m_trim_threshold, 2 * HEAP_BLOCK_BYTES))
    return _heap_kept
