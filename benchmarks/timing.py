"""The one timing helper of the cost scripts: median seconds of calls, interleaved."""

from __future__ import annotations

import statistics
import time
from typing import Callable, Dict, List

import torch


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA kernels are asynchronous)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(
    calls: Dict[str, Callable[[], object]], repeats: int, device: torch.device, warmup: int = 1
) -> Dict[str, List[float]]:
    """Seconds of each call over ``repeats`` rounds, the calls interleaved round-robin (a slow
    phase of the machine then hits all of them alike), after ``warmup`` untimed rounds."""
    names = list(calls)
    for _ in range(warmup):  # allocator, lazy init, kernel selection
        for name in names:
            calls[name]()
    sync(device)
    samples: Dict[str, List[float]] = {name: [] for name in names}
    for rep in range(repeats):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            sync(device)
            start = time.perf_counter()
            calls[name]()
            sync(device)
            samples[name].append(time.perf_counter() - start)
    return samples


def median(samples: List[float]) -> float:
    return statistics.median(samples)
