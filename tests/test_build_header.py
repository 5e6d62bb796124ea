"""wino_kernels.h: a C program compiled against the host cache's header and one kernel's shared
object runs the kernel without Python, and writes what the Python runtime writes; the header
says what the manifest's abi records say."""

from __future__ import annotations

import subprocess

import numpy as np

from tests import host_cache
from wino.builder.header import HEADER
from wino.kinds import kind_of
from wino.launch import stage_launch
from wino.problem import Problem
from wino.runtime.host import HostBackend
from wino.runtime.plan import KernelStep
from wino.specs import RtInputSpec

# K2, register path, no prescale: a kind with magic pairs (unsigned) and a null buffer (ts).
SPEC = RtInputSpec("F2x2", "fp32", "fp32", 1, 256, "reg", 0, 0, "none")
PROBLEM = Problem(N=2, C=8, H=9, W=7, K=4, pad_h=1, pad_w=2, dil_h=2, dtype="fp32")

_PROGRAM = """#include <stdio.h>
#include <stdlib.h>
#include "wino_kernels.h"
int main(void) {
  const struct wino_args_KIND args = { ARGS };
  float* x = malloc(sizeof(float) * NX);
  float* V = calloc(NV, sizeof(float));
  if (fread(x, sizeof(float), NX, stdin) != NX) return 2;
  NAME(&args, x, V, NULL, GX, GY);
  fwrite(V, sizeof(float), NV, stdout);
  return 0;
}
"""


def test_c_program_runs_a_kernel_through_the_header(tmp_path):
    manifest = host_cache.build([SPEC], tmp_path / "build")
    entry = manifest.kernel(SPEC.name)
    header = (manifest.directory / HEADER).read_text(encoding="utf-8")
    kind = kind_of(SPEC).kind.value
    assert f"struct wino_args_{kind} {{" in header and f"void {SPEC.name}(" in header

    launch = stage_launch(SPEC, PROBLEM)
    x = np.random.default_rng(0).standard_normal((2, 9, 7, 8)).astype(np.float32)
    V = np.zeros((SPEC.tile.bins, 1, stage_launch(SPEC, PROBLEM).kernargs["P"], 8), np.float32)
    inits = ", ".join(f".{k} = {v}" for k, v in launch.kernargs.items())  # by name, not order
    source = (
        _PROGRAM.replace("KIND", kind)
        .replace("ARGS", inits)
        .replace("NAME", SPEC.name)
        .replace("NX", str(x.size))
        .replace("NV", str(V.size))
        .replace("GX", str(launch.grid[0]))
        .replace("GY", str(launch.grid[1]))
    )
    (tmp_path / "main.c").write_text(source, encoding="utf-8")
    exe = tmp_path / "main"
    compiler = manifest.toolchain["compiler"]
    subprocess.run(
        [compiler, "-std=c11", "-Wall", "-Werror", f"-I{manifest.directory}", "main.c"]
        + [str(entry.path), f"-Wl,-rpath,{entry.path.parent}", "-o", str(exe)],
        cwd=tmp_path,
        check=True,
    )
    out = subprocess.run([str(exe)], input=x.tobytes(), capture_output=True, check=True).stdout
    from_c = np.frombuffer(out, dtype=np.float32).reshape(V.shape)

    step = KernelStep(SPEC.stage, SPEC.name, launch)
    HostBackend(manifest).launch(None, step, {"x": x, "V": V})
    assert np.abs(V).max() > 0
    np.testing.assert_array_equal(from_c, V)


def test_header_matches_the_abi_records(tmp_path):
    manifest = host_cache.build([SPEC], tmp_path / "build")
    header = (manifest.directory / HEADER).read_text(encoding="utf-8")
    abi = manifest.kernel(SPEC.name).abi
    fields = " ".join(f"{c} {n};" for c, n in abi.kernargs)
    assert f"struct wino_args_{abi.kind} {{ {fields} }};" in header
    params = ", ".join(f"{c} {n}" for c, n in abi.buffers)
    assert f"{params}, unsigned gx, unsigned gy);" in header
    assert abi.kernargs == kind_of(SPEC).kernargs
    assert [c for c, n in abi.kernargs if n.startswith(("m_", "s_"))] == ["unsigned"] * 12
