import subprocess
import sys


def test_workers_fork_only_while_no_other_thread_runs():
    """A fork beside a running thread can leave the child stuck on a lock that thread held: dlbench forks only
    while it is alone, and starts workers from the fork server otherwise (spawn for CUDA)."""
    code = """
import threading
from dlbench.workers import start_method
alone = start_method()
stop = threading.Event()
thread = threading.Thread(target=stop.wait)
thread.start()
beside = start_method()
stop.set()
thread.join()
print(alone, beside, start_method(), start_method(cuda=True))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["fork", "forkserver", "fork", "spawn"]
