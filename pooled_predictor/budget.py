"""The memory budget: how many bytes one model's weights, or one Net's plan, may take.

onnxruntime caps its arena with `arena_extend_strategy` / `gpu_mem_limit` and
reports RESOURCE_EXHAUSTED when a request would pass it; we do the same before
anything is allocated:

* at load, the bytes every initializer declares (dims x element size) must fit;
* at reshape, each node's outputs (checked before its kernel is set up), then
  the whole plan (arena: activations and kernel scratch) must fit;
* folding constants and data-dependent nodes check their outputs and scratch.

The default limit is DEFAULT_FRACTION of the memory this process can have: the
smallest of physical memory, the cgroup's memory.max and RLIMIT_AS. A request
over the limit raises ResourceExhaustedError naming the bytes needed and the
limit; the Net keeps its previous shapes.

available_cpus() is the CPU counterpart, for the pool's defaults (Config.infer_slots,
active_workers): the CPUs this process may run on, capped by its cgroup's CPU quota.
"""

from __future__ import annotations

import functools
import math
import os

import numpy as np

from .errors import ResourceExhaustedError

DEFAULT_FRACTION = 0.8


@functools.lru_cache(maxsize=1)
def available_memory_bytes() -> int:
    """The memory this process may use: min(physical memory, cgroup memory.max, RLIMIT_AS).

    Read once per process (cached).
    """
    candidates = []
    try:
        candidates.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
            if text.isdigit() and int(text) < 1 << 60:
                candidates.append(int(text))
        except OSError:
            pass
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft not in (resource.RLIM_INFINITY, -1) and soft > 0:
            candidates.append(int(soft))
    except (ImportError, ValueError, OSError):
        pass
    return min(candidates) if candidates else 1 << 34


CGROUP_CPU_FILES = (("/sys/fs/cgroup/cpu.max", None),  # cgroup v2: "QUOTA PERIOD" or "max PERIOD"
                    ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"),  # v1
                    ("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us"))


def cgroup_cpu_quota(files=CGROUP_CPU_FILES) -> int | None:
    """The cgroup's CPU quota in whole CPUs, rounded up (a container's --cpus / Kubernetes' CPU limit:
    cgroup v2 cpu.max, or v1 cpu.cfs_quota_us / cpu.cfs_period_us); None where there is none."""
    for quota_path, period_path in files:
        try:
            with open(quota_path) as f:
                fields = f.read().split()
            if period_path is not None:
                with open(period_path) as f:
                    fields = fields[:1] + f.read().split()[:1]
        except OSError:
            continue
        if len(fields) < 2 or fields[0] == "max":
            return None
        try:
            quota, period = int(fields[0]), int(fields[1])
        except ValueError:
            return None
        if quota <= 0 or period <= 0:  # v1's -1: no quota
            return None
        return max(1, math.ceil(quota / period))
    return None


@functools.lru_cache(maxsize=1)
def available_cpus() -> int:
    """The CPUs this process may use: its affinity mask (os.sched_getaffinity; os.cpu_count() where
    there is none), capped by the cgroup's CPU quota (cgroup_cpu_quota). Read once per process."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return min(cpus, quota) if quota is not None else cpus


def default_memory_limit() -> int:
    """DEFAULT_FRACTION (0.8) of available_memory_bytes(), in bytes."""
    return int(available_memory_bytes() * DEFAULT_FRACTION)


def resolve_limit(limit) -> int:
    """A memory limit as given by a user: None -> the default; else a positive int.

    Raises:
        TypeError: not an integer; ValueError: not positive.
    """
    if limit is None:
        return default_memory_limit()
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)):
        raise TypeError(f"memory_limit_bytes must be an int (bytes) or None, not {type(limit).__name__}")
    if limit <= 0:
        raise ValueError(f"memory_limit_bytes must be positive, got {limit}")
    return int(limit)


def nbytes_of(shape, dtype) -> int:
    """Exact bytes of an array of this shape and dtype (Python ints: no int64 overflow)."""
    return math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize


def check(needed: int, limit: int | None, what: str) -> None:
    """Raise ResourceExhaustedError when `needed` bytes pass `limit` (None: no limit).

    Args:
        needed: bytes asked for.
        limit: the budget in bytes.
        what: what needs them, for the message (e.g. "node 'conv1' (Conv) outputs").
    """
    if limit is not None and needed > limit:
        raise ResourceExhaustedError(
            f"{what} need {needed:,} bytes, over the memory limit of {limit:,} bytes "
            f"(memory_limit_bytes; onnxruntime would report RESOURCE_EXHAUSTED)", needed, limit)
