"""scripts/ncu_phases.py: ncu's SASS source-page CSV cut into phases at each BAR.SYNC, each
phase's share of the executed instructions, of the stall samples and of each stall reason, and
its opcodes (predicated ones by their opcode); a Source column with an unescaped quote does not
shift the metrics."""

from __future__ import annotations

import csv
import io

import pytest


@pytest.fixture(scope="module")
def phases(load_script):
    return load_script("ncu_phases")


def _csv(tmp_path, module, instructions) -> str:
    """A source-page CSV: (sass text, executed, samples, long_sb samples) per instruction."""
    stalls = ["stall_" + s for s in module.STALLS]
    head = ["Address", "Source", module.SAMPLES, module.EXECUTED, *stalls]
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL)
    writer.writerow(["Kernel Name", "kf_test"])
    writer.writerow(head)
    for i, (text, executed, samples, long_sb) in enumerate(instructions):
        writer.writerow(
            [hex(16 * i), text, samples, f"{executed:,}", long_sb, *["0"] * (len(stalls) - 1)]
        )
    path = tmp_path / "sass.csv"
    path.write_text(out.getvalue(), encoding="utf-8")
    return str(path)


def test_phases_are_cut_at_barriers_and_shared_out(phases, tmp_path):
    path = _csv(
        tmp_path,
        phases,
        [
            ("LDG.E.128 R4, [R2.64]", 3000, 10, 8),
            ("BAR.SYNC.DEFER_BLOCKING 0x0", 1000, 10, 0),
            ("@!P0 HMMA.16816.F32 R8, R12, R4, R8", 4000, 60, 50),
            ("FADD R1, R2, R3", 2000, 20, 2),
        ],
    )
    read = phases.read_phases(path)
    assert [p["executed"] for p in read] == [4000, 6000]
    assert [p["samples"] for p in read] == [20, 80]
    assert [p["stall_long_sb"] for p in read] == [8, 52]
    assert read[1]["op:HMMA"] == 4000 and read[0]["op:BAR"] == 1000
    text = phases.report(read, ["load", "multiply"])
    assert "load | 40.0 | 20.0 | 8.0 |" in text
    assert "multiply | 60.0 | 80.0 | 52.0 |" in text
    assert "multiply: HMMA 40.0, FADD 20.0" in text


def test_a_quote_inside_the_source_keeps_the_metrics(phases, tmp_path):
    head = ["Address", "Source", phases.SAMPLES, phases.EXECUTED]
    head += ["stall_" + s for s in phases.STALLS]
    stalls = ",".join('"0"' for _ in phases.STALLS)
    text = (
        ",".join(f'"{h}"' for h in head)
        + "\n"
        + f'"0x0","      asm("max" : "=r"(o));","7","9",{stalls}\n'
    )
    path = tmp_path / "quoted.csv"
    path.write_text(text, encoding="utf-8")
    (only,) = phases.read_phases(str(path))
    assert (only["samples"], only["executed"]) == (7, 9)


def test_top_names_the_instructions_a_stall_reason_waits_on(phases, tmp_path):
    """--top long_sb: the instructions by their long-scoreboard samples, each with its phase
    (numbered as the table is: an empty phase between two barriers is left out) and the
    instruction before it; an unknown reason is refused by name; none without samples."""
    path = _csv(
        tmp_path,
        phases,
        [
            ("LDG.E.128 R4, [R2.64]", 3000, 10, 0),
            ("BAR.SYNC.DEFER_BLOCKING 0x0", 1000, 10, 0),
            ("BAR.SYNC.DEFER_BLOCKING 0x0", 0, 0, 0),
            ("LDG.E.128 R8, [R6.64]", 1000, 5, 0),
            ("@P5 MOV R66, R8", 1000, 45, 40),
            ("HMMA.16816.F32 R12, R16, R4, R12", 4000, 30, 10),
        ],
    )
    assert len(phases.read_phases(path)) == 2
    lines = phases.top_stalls(path, "long_sb").splitlines()
    assert lines == [
        "40.0% long_sb, phase 1: @P5 MOV R66, R8   (after: LDG.E.128 R8, [R6.64])",
        "10.0% long_sb, phase 1: HMMA.16816.F32 R12, R16, R4, R12   (after: @P5 MOV R66, R8)",
    ]
    with pytest.raises(ValueError, match="stall reason 'long': use one of long_sb"):
        phases.top_stalls(path, "long")
