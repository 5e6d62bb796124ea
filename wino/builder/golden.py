"""The golden shard: a representative dozen specs whose rendered sources (every target), PTX (per
nvcc flavor) and LLVM IR (per clang flavor) are hashed into tests/golden/. A refactor must change
no hash unless it says so and re-records (`doit golden_record`; docs/BUILD.md).

Files:
  sources.json              {label: {stage, spec, baked, sha256: {c, cuda, hip}}}
  ptx-<nvcc flavor>.json    {toolchain, sha256: {label: hash}}   e.g. ptx-nvcc-13.0-sm_90a.json
  llvmir-<clang flavor>.json  likewise per HIP arch   e.g. llvmir-clang-19.1.7-gfx1100.json
"""

from __future__ import annotations

import json
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .. import config
from ..codegen.render import render
from ..problem import Problem
from ..specs import (
    RtFilterSpec,
    RtFusedSpec,
    RtInputSpec,
    RtOutputSpec,
    RtPrescaleSpec,
    StageSpec,
)
from ..vocab import DType, Epilogue, K2Path, Prescale, Target, Tile
from .cache_writer import sha256_text
from .toolchains import KITS, Toolchain, compile_ir, resolve

GOLDEN = config.ROOT / "tests" / "golden"
_F16, _BF16, _F32 = DType.FP16, DType.BF16, DType.FP32
_REG, _LDS, _ROWS = K2Path.REGISTER, K2Path.LDS, K2Path.LDS_ROWS
_S1 = {"stream": 1}  # the streamed transform (a declared axis: wino.axes)
_X16 = {"xbits": 16}  # the input transform on fp16 pairs (a declared axis)


@dataclass(frozen=True)
class GoldenKernel:
    spec: StageSpec
    baked: Problem | None = None

    @property
    def label(self) -> str:
        return f"{self.spec.name}_baked" if self.baked else self.spec.name

    def source(self, target: Target) -> str:
        return render(self.spec, target, baked=self.baked)


#: The held fused kernel of the default fp16 pick (F4x4, 32 tiles x 64 channels, 18 warps, its
#: input transform on fp16 pairs); its bf16 twin in the shard runs the transforms on the MMA
#: and the fp32 pair transform where C is odd.
_HELD_EXTRA = {"hold": 64, "kpass": 32, "xbits": 16}
_HELD = RtFusedSpec(Tile(4, 4), _F16, _F16, 32, 64, 32, 18, 1, Prescale.FUSED, extra=_HELD_EXTRA)

#: Every stage, every K2 path and prescale mode, tiles square and not, every dtype, one baked;
#: the fused kernel at each grid tile and each MMA dtype pairing.
SHARD: tuple[GoldenKernel, ...] = (
    GoldenKernel(RtFilterSpec(Tile(4, 4), _F16, _F16, 8, 256, 1)),
    GoldenKernel(RtFilterSpec(Tile(6, 6), _F32, _F32, 1, 256, 1)),
    GoldenKernel(RtPrescaleSpec(Tile(4, 4), _BF16, 8, 256)),
    GoldenKernel(RtInputSpec(Tile(2, 2), _F32, _F32, 4, 256, _REG, 0, 0, Prescale.FUSED)),
    GoldenKernel(RtInputSpec(Tile(2, 6), _BF16, _BF16, 1, 256, _REG, 0, 0, Prescale.SPLIT)),
    GoldenKernel(RtInputSpec(Tile(4, 4), _F16, _F16, 4, 256, _REG, 0, 0, Prescale.FUSED)),
    GoldenKernel(RtInputSpec(Tile(6, 2), _BF16, _F16, 2, 512, _REG, 0, 0, Prescale.FUSED)),
    GoldenKernel(RtInputSpec(Tile(4, 4), _BF16, _F16, 2, 256, _REG, 0, 0, Prescale.SPLIT)),
    GoldenKernel(RtInputSpec(Tile(4, 4), _F16, _F16, 4, 64, _LDS, 16, 4, Prescale.SPLIT)),
    GoldenKernel(RtInputSpec(Tile(2, 4), _F32, _F32, 4, 64, _LDS, 16, 4, Prescale.SPLIT)),
    # the fp16 default K2: the LDS-rows held window on fp16 pairs (xbits 16)
    GoldenKernel(RtInputSpec(Tile(4, 4), _F16, _F16, 2, 128, _ROWS, 32, 8, Prescale.FUSED, _X16)),
    GoldenKernel(RtInputSpec(Tile(2, 2), _BF16, _F16, 8, 64, _ROWS, 64, 1, Prescale.FUSED, _S1)),
    GoldenKernel(RtOutputSpec(Tile(4, 4), _F16, _F32, 8, 256, Epilogue.BIAS_RELU)),
    GoldenKernel(RtOutputSpec(Tile(6, 2), _BF16, _F32, 1, 256)),
    GoldenKernel(
        RtInputSpec(Tile(4, 4), _F16, _F16, 4, 256, _REG, 0, 0, Prescale.FUSED),
        baked=Problem(N=2, C=64, H=14, W=14, K=64, pad_h=1, pad_w=1, dtype=_F16),
    ),
    GoldenKernel(
        RtFusedSpec(Tile(2, 2), _F16, _F16, 32, 32, 32, 8, 1, Prescale.SPLIT, Epilogue.BIAS)
    ),
    GoldenKernel(RtFusedSpec(Tile(4, 4), _BF16, _F16, 32, 16, 32, 12, 1, Prescale.SPLIT)),
    GoldenKernel(_HELD),
    # the held kernel's transforms on the MMA, bf16 io (its input MMA in bf16)
    GoldenKernel(_HELD.replace(io=_BF16, tcx=1, xbits=32)),
    # the pipelined held schedule (several tile blocks a workgroup)
    GoldenKernel(_HELD.replace(chain=12)),
    GoldenKernel(RtFusedSpec(Tile(4, 6), _BF16, _BF16, 16, 16, 16, 4, 1, Prescale.NONE)),
)


# Hashes ------------------------------------------------------------------------------------------
def source_hashes(shard: tuple[GoldenKernel, ...] = SHARD) -> dict[str, dict]:
    """{label: {stage, spec, baked, sha256: {target: hash}}}: what sources.json holds."""
    out = {}
    for kernel in shard:
        out[kernel.label] = {
            "stage": kernel.spec.stage.short,
            "spec": kernel.spec.fields_dict(),
            "baked": kernel.baked.to_miopen() if kernel.baked else None,
            "sha256": {t.value: sha256_text(kernel.source(t)) for t in Target},
        }
    return out


def _ir_hash(tc: Toolchain, kernel: GoldenKernel, folder: Path) -> str:
    src = folder / f"{kernel.label}.{tc.kit.source_ext}"
    out = folder / f"{kernel.label}.{tc.arch}.ir"
    src.write_text(kernel.source(tc.target), encoding="utf-8")
    compile_ir(tc, src, kernel.spec.name, out)
    return sha256_text(out.read_text(encoding="utf-8"))


def ir_hashes(tc: Toolchain, shard: tuple[GoldenKernel, ...] = SHARD) -> dict[str, str]:
    """{label: sha256 of the PTX (cuda) or LLVM IR (hip)} for one toolchain flavor."""
    with tempfile.TemporaryDirectory(prefix="wino-golden-") as tmp:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            hashes = pool.map(lambda k: _ir_hash(tc, k, Path(tmp)), shard)
            return dict(zip((k.label for k in shard), hashes, strict=True))


def ir_file(tc: Toolchain, folder: Path = GOLDEN) -> Path:
    return Path(folder) / f"{tc.kit.ir_kind}-{tc.flavor}.json"


def ir_toolchains() -> list[Toolchain]:
    """The toolchains present here that emit an IR (nvcc, clang per known HIP arch)."""
    return [tc for t, kit in KITS.items() if kit.ir_kind for tc in resolve(t).toolchains]


# Record and check --------------------------------------------------------------------------------
def _dump(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def record(folder: Path = GOLDEN, toolchains: list[Toolchain] | None = None) -> list[Path]:
    """Re-record sources.json and the IR files of the toolchains present; the paths written."""
    folder = Path(folder)
    written = [folder / "sources.json"]
    _dump(written[0], {"format": 1, "kernels": source_hashes()})
    for tc in ir_toolchains() if toolchains is None else toolchains:
        path = ir_file(tc, folder)
        _dump(path, {"toolchain": tc.manifest_toolchain(), "sha256": ir_hashes(tc)})
        written.append(path)
    return written


def compare(expected: dict[str, str], actual: dict[str, str], what: str) -> list[str]:
    """Lines naming each label whose hash changed, went missing or is new."""
    lines = []
    for label in sorted(set(expected) | set(actual)):
        if label not in actual:
            lines.append(f"{what}: {label} is recorded but no longer in the shard")
        elif label not in expected:
            lines.append(f"{what}: {label} is in the shard but not recorded")
        elif expected[label] != actual[label]:
            lines.append(
                f"{what}: {label} changed ({expected[label][:12]} -> {actual[label][:12]})"
            )
    return lines


def check_sources(folder: Path = GOLDEN) -> list[str]:
    recorded = json.loads((Path(folder) / "sources.json").read_text(encoding="utf-8"))
    lines = []
    actual = source_hashes()
    for target in Target:
        lines += compare(
            {k: v["sha256"][target.value] for k, v in recorded["kernels"].items()},
            {k: v["sha256"][target.value] for k, v in actual.items()},
            f"source {target.value}",
        )
    return lines


def check_ir(tc: Toolchain, folder: Path = GOLDEN) -> list[str]:
    recorded = json.loads(ir_file(tc, folder).read_text(encoding="utf-8"))
    return compare(recorded["sha256"], ir_hashes(tc), f"{tc.kit.ir_kind} {tc.flavor}")


def check(folder: Path = GOLDEN) -> tuple[list[str], list[str]]:
    """(mismatch lines, skip notes) over sources and every IR flavor present here."""
    mismatches, notes = check_sources(folder), []
    for tc in ir_toolchains():
        if ir_file(tc, folder).is_file():
            mismatches += check_ir(tc, folder)
        else:
            notes.append(
                f"no golden {ir_file(tc, folder).name} for this {tc.flavor}; "
                "`doit golden_record` records it"
            )
    return mismatches, notes
