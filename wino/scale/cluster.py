"""A Dask client for ``--dask SCHEDULER``: ``local`` starts a LocalCluster on this machine (CPU
workers, or one worker per visible GPU with the resource GPU=1), anything else is a scheduler
address (``tcp://host:8786``) whose workers were started elsewhere (docs/BUILD.md says how).

Local workers listen on the loopback address only; the dashboard is off.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from . import require_distributed

LOCAL = "local"
GPU = "GPU"  # the worker resource a GPU task asks for (one per GPU)
LOOPBACK = "127.0.0.1"
QUIET = logging.WARNING  # the local cluster logs warnings and errors only
WAIT_S = 60  # seconds to wait for a scheduler and its first worker


def visible_gpus() -> list[str]:
    """The GPUs a local cluster spreads over: CUDA_VISIBLE_DEVICES when set, else the
    indices `nvidia-smi -L` lists; [] without either."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip()]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    listing = subprocess.run([smi, "-L"], capture_output=True, text=True).stdout
    return [str(i) for i, line in enumerate(listing.splitlines()) if line.startswith("GPU ")]


def local_cluster(workers: dict[str, dict]):
    """A cluster on this machine: a scheduler and one worker process (a Nanny) per entry of
    ``workers`` (name -> the Nanny's options), all on the loopback address, no dashboard."""
    distributed = require_distributed()
    nannies = {
        name: {
            "cls": distributed.Nanny,
            "options": {"nthreads": 1, "host": LOOPBACK, "silence_logs": QUIET, **options},
        }
        for name, options in workers.items()
    }
    scheduler = {
        "cls": distributed.Scheduler,
        "options": {"host": LOOPBACK, "dashboard": False, "dashboard_address": ":0"},
    }
    return distributed.SpecCluster(
        workers=nannies, scheduler=scheduler, silence_logs=QUIET, name="wino"
    )


def gpu_cluster(devices: list[str]):
    """One single-threaded worker per GPU, each seeing only its GPU (CUDA_VISIBLE_DEVICES set
    before the worker process starts) and offering the resource GPU=1."""
    if not devices:
        raise ValueError(
            "--dask local with the cuda target: no GPU is visible (CUDA_VISIBLE_DEVICES is "
            "empty or nvidia-smi is missing); use --target c, or a scheduler whose workers "
            "have GPUs"
        )
    return local_cluster(
        {
            f"gpu{device}": {"resources": {GPU: 1}, "env": {"CUDA_VISIBLE_DEVICES": device}}
            for device in devices
        }
    )


def cpu_cluster(workers: int | None = None):
    """``workers`` single-threaded worker processes (default: one per core)."""
    count = os.cpu_count() or 1 if workers is None else workers
    if count < 1:
        raise ValueError(f"--workers {count}: expected N >= 1")
    return local_cluster({f"cpu{i}": {} for i in range(count)})


@contextmanager
def connect(scheduler: str, gpus: bool = False, workers: int | None = None) -> Iterator:
    """A Client: ``local`` -> a LocalCluster (one worker per visible GPU when ``gpus``, else
    ``workers`` CPU workers) closed on exit; otherwise the scheduler at that address."""
    distributed = require_distributed()
    if scheduler != LOCAL:
        with distributed.Client(scheduler, timeout=WAIT_S) as client:
            _wait_for_a_worker(client, scheduler)
            yield client
        return
    cluster = gpu_cluster(visible_gpus()) if gpus else cpu_cluster(workers)
    with cluster, distributed.Client(cluster) as client:
        client.wait_for_workers(len(cluster.workers))
        yield client


def _wait_for_a_worker(client, scheduler: str) -> None:
    try:
        client.wait_for_workers(1, timeout=WAIT_S)
    except TimeoutError:
        raise ValueError(
            f"--dask {scheduler}: no worker joined the scheduler in {WAIT_S} s; start some "
            f"with `dask worker {scheduler} --nthreads 1` (docs/BUILD.md)"
        ) from None


def _resources(dask_scheduler) -> dict[str, dict[str, float]]:
    return {addr: dict(ws.resources) for addr, ws in dask_scheduler.workers.items()}


def slots(client, resource: str | None = None) -> int:
    """How many tasks can run at once: the workers' threads, or with ``resource`` the sum of
    what the workers offer of it (0: no worker can run such a task)."""
    if resource is None:
        return sum(client.nthreads().values())
    offered = client.run_on_scheduler(_resources)
    return int(sum(r.get(resource, 0) for r in offered.values()))
