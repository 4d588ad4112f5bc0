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


def test_workers_reuse_freed_frame_blocks_instead_of_faulting_new_pages():
    """A decode's frames are a fresh block of tens of MB. glibc maps such blocks anew each time, so every 4 KB of
    every decode is a page fault; `keep_freed_blocks` (set in DataLoader workers) keeps them on the heap for reuse."""
    code = """
import resource, torch
from dlbench.workers import keep_freed_blocks

def faults_once_settled():  # the allocator settles after a few rounds; count the faults of the last 10
    for _ in range(10):
        torch.empty(60 * 2**20, dtype=torch.uint8).fill_(1)  # as a sarm decode block of 480x640 frames
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        torch.empty(60 * 2**20, dtype=torch.uint8).fill_(1)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

plain = faults_once_settled()
assert keep_freed_blocks() and keep_freed_blocks()  # idempotent
print(plain, faults_once_settled())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    plain, kept = map(int, out.stdout.split())
    assert plain > 10 * 10_000  # 60 MB in 4 KB pages, faulted in again every time
    assert kept < plain / 10


def test_forked_loader_workers_inherit_the_decoder_module(v30_h264):
    """torchcodec imports torch._dynamo (over a second of CPU): dlbench's DataLoader imports it once before forking,
    so the workers of every epoch start with it instead of each importing it again."""
    code = f"""
import sys
from dlbench.loader import DataLoader, LeRobotMapDataset

def report(_):
    print("torchcodec.decoders" in sys.modules, flush=True)

if __name__ == "__main__":
    dataset = LeRobotMapDataset(root={str(v30_h264)!r})
    for epoch in range(2):  # workers are not persistent: each epoch forks new ones
        next(iter(DataLoader(dataset, batch_size=2, num_workers=1, worker_init_fn=report)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]
