"""scripts/gpu_sanitize.py's summary of compute-sanitizer logs: counts from each tool's summary
line, reports inside wino's kernels fail, reports inside library kernels (cuBLAS) are listed
apart, and a log without a summary or without the run's last line did not finish."""

from __future__ import annotations

import pytest

RAN = "ran 30 plans, 62 distinct kernels\n"
CUBLAS_RACE = (
    "========= Error: Race reported between Read access at nvjet_sm90_hss_8x64_TNN+0xb00\n"
    "=========     and Write access at nvjet_sm90_hss_8x64_TNN+0x2770 [288 hazards]\n"
)
WINO_READ = (
    "========= Uninitialized __global__ memory read of size 4 bytes\n"
    "=========     at k4_f2x2_ifp16_afp32_v8_b256+0x3f0\n"
)


@pytest.fixture(scope="module")
def sanitize(load_script):
    return load_script("gpu_sanitize")


@pytest.mark.parametrize(
    "tool, text, code, shown",
    [
        ("memcheck", RAN + "========= ERROR SUMMARY: 0 errors\n", 0, "0 errors over 30 plans"),
        (
            "racecheck",
            CUBLAS_RACE
            + RAN
            + "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n",
            0,
            "wino: none; library: nvjet_sm90_hss_8x64_TNN: 1",
        ),
        (
            "initcheck",
            WINO_READ + RAN + "========= ERROR SUMMARY: 1 error\n",
            1,
            "wino: k4_f2x2_ifp16_afp32_v8_b256: 1",
        ),
        ("initcheck", WINO_READ + "========= ERROR SUMMARY: 1 error\n", 1, "DID NOT FINISH"),
        ("racecheck", RAN, 1, "DID NOT FINISH"),
    ],
)
def test_summary(sanitize, tmp_path, capsys, tool, text, code, shown):
    log = tmp_path / f"{tool}.log"
    log.write_text(text)
    assert sanitize.summarize(tool, log) == code
    assert shown in capsys.readouterr().out


def test_only_keeps_the_cases_whose_label_holds_the_text(sanitize, monkeypatch):
    every = sanitize.cases()
    monkeypatch.setenv("WINO_SANITIZE_ONLY", "ldsrow")
    rows = sanitize.cases()
    assert rows and len(rows) < len(every)
    assert all("ldsrow" in label for label, _, _ in rows)
    assert {label for label, _, _ in every if "ldsrow" in label} == {label for label, _, _ in rows}
    assert any("_s1" in label for label, _, _ in rows) and any(
        "_s1" not in label for label, _, _ in rows
    )  # held and streamed
