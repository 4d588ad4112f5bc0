"""The GPU side of a bench run: moving batches to the consumer's device and a training step as a GPU kernel."""

from __future__ import annotations

import torch


def to_device(batch, device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def host_bytes(batch) -> int:
    """Bytes of the batch's tensors in host memory (what a copy to the GPU moves)."""
    if isinstance(batch, torch.Tensor):
        return batch.nbytes if batch.device.type == "cpu" else 0
    if isinstance(batch, dict):
        return sum(host_bytes(v) for v in batch.values())
    if isinstance(batch, (list, tuple)):
        return sum(host_bytes(v) for v in batch)
    return 0


def cuda_unavailable_reason(decode_device: str) -> str | None:
    if decode_device.startswith("cuda") and not torch.cuda.is_available():
        return "decode_device cuda was asked for but torch sees no CUDA device on this machine"
    return None


class GpuStep:
    """A training step of `step_ms` on the GPU: a kernel spinning that long on the consumer's stream, queued after
    the batch's copy. The next batch is fetched, and its copy queued, while it runs, as in training; the CPU stays
    at most one step ahead (as a loss read back each step keeps it), and each batch is held until its step is done,
    so its pinned ring slot is not reused under its copy."""

    def __init__(self, step_ms: float):
        self.per_ms = gpu_cycles_per_ms()
        self.cycles = max(1, int(step_ms * self.per_ms))
        self.previous: tuple | None = None  # (event after the previous step, its batch)

    def run(self, batch, step_ms: float | None = None) -> None:
        """One step: of `step_ms` where given (a step drawn from a distribution), else the constructor's."""
        torch.cuda._sleep(self.cycles if step_ms is None else max(1, int(step_ms * self.per_ms)))
        done = torch.cuda.Event()
        done.record()
        if self.previous is not None:
            self.previous[0].synchronize()
        self.previous = (done, batch)

    def finish(self) -> None:
        if self.previous is not None:
            self.previous[0].synchronize()
        self.previous = None


def gpu_cycles_per_ms() -> float:
    """Clock cycles `torch.cuda._sleep` spins per millisecond, measured on this GPU as it runs now."""
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 20_000_000
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / start.elapsed_time(end)
