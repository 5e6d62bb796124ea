"""What a published manifest says about its kernels: the ones that spill (`wino grid --spills`)."""

from __future__ import annotations

from ..cache import CachedKernel, Manifest


def spill_report(manifest: Manifest) -> list[CachedKernel]:
    """The manifest's kernels whose compiler reported spills (bytes stored plus loaded > 0),
    most spilled first. Empty where the target reports none (c, hip: spills are null)."""
    spilled = [k for k in manifest.kernels.values() if k.spills]
    return sorted(spilled, key=lambda k: (-k.spills, k.name))


def format_spill_report(manifest: Manifest) -> str:
    """A table of spill_report(manifest), one kernel a line, or a line saying none spill."""
    rows = spill_report(manifest)
    where = f"{manifest.target.value}/{manifest.flavor}"
    if not rows:
        return f"{where}: no kernel of {len(manifest.kernels)} spills"
    width = max(len(k.name) for k in rows)
    lines = [
        f"{where}: {len(rows)} of {len(manifest.kernels)} kernels spill",
        f"{'kernel':<{width}}  spill bytes  registers",
    ]
    for k in rows:
        registers = "-" if k.registers is None else k.registers
        lines.append(f"{k.name:<{width}}  {k.spills:>11}  {registers:>9}")
    return "\n".join(lines)
