"""How dlbench starts worker processes (DataLoader workers, converter workers): fork only where it is safe."""

from __future__ import annotations

import multiprocessing
import threading

# imported once by the fork server, so that each worker it forks starts with the loaders already loaded
FORKSERVER_PRELOAD = ["dlbench.loader.map", "dlbench.loader.stream", "dlbench.loader.collate"]


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
