"""Per-phase instruction and stall-sample shares of one kernel from Nsight Compute's SASS source
page: the kernel's SASS in address order, cut into phases at each BAR.SYNC (a workgroup barrier
closes a phase of the fused kernels), with each phase's share of the executed warp instructions,
of the warp stall samples and of each stall reason's samples, and its most executed opcodes.

    ncu --section SourceCounters --section WarpStateStats --import-source yes \\
        --clock-control none -k regex:kf_ --launch-skip 1 -c 1 -o /tmp/r \\
        python3 scripts/gpu_fused.py profile vgg16_conv1_2 <KF spec>
    ncu -i /tmp/r.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 scripts/ncu_phases.py sass.csv [--names table,maxima,...] [--top long_sb]

``--top REASON`` then lists the instructions with the most samples of that stall reason, each
with its phase and the instruction before it (a stall on a move right after a load says the
load's data is waited for at once: stop 41's diagnosis of the warpgroup MMA's U loads).

Runs anywhere (no GPU, no ncu): it reads the CSV only.
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys

STALLS = (
    "long_sb",
    "wait",
    "barrier",
    "not_selected",
    "selected",
    "math",
    "mio",
    "short_sb",
    "lg",
    "dispatch",
    "branch_resolving",
)
EXECUTED, SAMPLES = "Instructions Executed", "Warp Stall Sampling (All Samples)"


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def _instructions(path: str) -> list[tuple[str, str, list[str], dict[str, int]]]:
    """(sass text, opcode, row, column offsets from the row's end) per instruction row."""
    rows = list(csv.reader(open(path, encoding="utf-8")))
    at = next(i for i, row in enumerate(rows) if row and row[0] == "Address")
    head = rows[at]
    # the Source column may hold unescaped quotes: read the metrics from the row's end
    back = {name: i - len(head) for i, name in enumerate(head)}
    out = []
    for row in rows[at + 1 :]:
        if len(row) < len(head):
            continue
        text = row[1].split()
        opcode = (text[1] if text and text[0].startswith("@") else text[0]) if text else ""
        out.append((" ".join(text), opcode, row, back))
    return out


def _closes_phase(opcode: str) -> bool:
    return opcode.startswith("BAR.SYNC") or opcode == "BAR"


def _raw_phases(instructions) -> list[collections.Counter]:
    """One Counter per stretch between barriers, empty ones included (see read_phases)."""
    phases = [collections.Counter()]
    for _, opcode, row, back in instructions:
        phase = phases[-1]
        executed = _number(row[back[EXECUTED]])
        phase["executed"] += executed
        phase["samples"] += _number(row[back[SAMPLES]])
        phase["op:" + opcode.split(".")[0]] += executed
        for stall in STALLS:
            phase["stall_" + stall] += _number(row[back["stall_" + stall]])
        if _closes_phase(opcode):
            phases.append(collections.Counter())
    return phases


def _kept(phase: collections.Counter) -> bool:
    """Whether a phase is reported (it executed instructions or was sampled)."""
    return bool(phase["executed"] or phase["samples"])


def read_phases(path: str) -> list[collections.Counter]:
    """One Counter per phase: 'executed', 'samples', 'stall_<reason>', 'op:<opcode>'."""
    return [p for p in _raw_phases(_instructions(path)) if _kept(p)]


def top_stalls(path: str, reason: str, count: int = 10) -> str:
    """The ``count`` instructions with the most samples of stall ``reason``: the share of all
    samples, the phase (numbered as report's table), the instruction and the one before it."""
    if reason not in STALLS:
        raise ValueError(f"stall reason {reason!r}: use one of {', '.join(STALLS)}")
    instructions = _instructions(path)
    raw = _raw_phases(instructions)
    number = {i: n for n, i in enumerate(i for i, p in enumerate(raw) if _kept(p))}
    total = sum(p["samples"] for p in raw)
    rows, phase, previous = [], 0, ""
    for text, opcode, row, back in instructions:
        rows.append((_number(row[back["stall_" + reason]]), number.get(phase, -1), text, previous))
        previous = text
        phase += _closes_phase(opcode)
    rows.sort(key=lambda r: -r[0])
    return "\n".join(
        f"{100 * n / (total or 1.0):.1f}% {reason}, phase {ph}: {text}   (after: {before})"
        for n, ph, text, before in rows[:count]
        if n > 0
    )


def report(phases: list[collections.Counter], names: list[str]) -> str:
    executed = sum(p["executed"] for p in phases) or 1.0
    samples = sum(p["samples"] for p in phases) or 1.0
    labels = [names[i] if i < len(names) else f"phase {i}" for i in range(len(phases))]
    lines = [
        "phase | instructions % | stall samples % | "
        + " | ".join(STALLS)
        + " (each: % of all samples)",
        "|".join(["---"] * (3 + len(STALLS))),
    ]
    for label, p in zip(labels, phases, strict=True):
        stalls = " | ".join(f"{100 * p['stall_' + s] / samples:.1f}" for s in STALLS)
        lines.append(
            f"{label} | {100 * p['executed'] / executed:.1f} | {100 * p['samples'] / samples:.1f}"
            f" | {stalls}"
        )
    lines.append("")
    for label, p in zip(labels, phases, strict=True):
        ops = sorted(((v, k[3:]) for k, v in p.items() if k.startswith("op:")), reverse=True)
        shares = ", ".join(f"{op} {100 * v / executed:.1f}" for v, op in ops[:10])
        lines.append(f"{label}: {shares}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    parser.add_argument("--names", default="", help="comma-separated phase names, in order")
    parser.add_argument(
        "--top", metavar="REASON", help="then the instructions with most samples of this stall"
    )
    args = parser.parse_args()
    print(report(read_phases(args.csv), [n for n in args.names.split(",") if n]))
    if args.top:
        print()
        print(top_stalls(args.csv, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
