"""The bench's ``baked`` engine: the AOT plan of a case re-run on binaries that know its
extents (wino.builder.baked), to measure what shape-generic costs.

``baked_plan(plan)`` bakes every kernel step of ``plan`` with the kernargs that step launches
with, and dispatches the same specs and batch split from the baked cache: the same steps,
buffers and GEMMs, so the two plans' outputs are bit-identical and their times differ only by
what the compiler made of constants instead of kernargs.
"""

from __future__ import annotations

from pathlib import Path

from ..builder.baked import BakedKernel, bake
from ..runtime.plan import KernelStep, Plan, dispatch


class BakeUnsupported(ValueError):
    """A plan the baked engine cannot mirror (the message says why)."""


def baked_kernels(plan: Plan) -> list[BakedKernel]:
    """Each kernel step's spec and kernargs (K1, K2a, K2, K4 or K1, K2a, KF)."""
    if len(plan.chunk_steps) != 1:
        raise BakeUnsupported(
            f"the plan runs batch chunks of {sorted(plan.chunk_steps)} images: one baked binary "
            "per kernel name holds one chunk's extents (pass a batch split that divides N)"
        )
    return [
        BakedKernel.of(plan.specs[step.stage], step.launch.kernargs)
        for step in plan.steps
        if isinstance(step, KernelStep)
    ]


def baked_plan(plan: Plan, base: Path | None = None) -> Plan:
    """The same plan on baked binaries (compiled on first use into ``base``, default
    wino.builder.baked.default_base(); a second call with the same extents compiles nothing)."""
    root = bake(baked_kernels(plan), plan.target, base)
    return dispatch(
        plan.problem,
        target=plan.target,
        specs=plan.specs,
        batch_split=plan.batch_split,
        cache_root=root,
    )
