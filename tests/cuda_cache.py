"""A cuda-target cache for the GPU tests, compiled with nvcc into a temp folder (sm_90)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from wino import cache, config
from wino.vocab import Target

FLAVOR = "tests-sm_90"


def _compile(spec, directory: Path, nvcc: str, flags: list[str]) -> dict:
    from wino.codegen.render import render

    source = render(spec, Target.CUDA)
    digest = hashlib.sha256(source.encode()).hexdigest()
    binary = directory / "bin" / f"{spec.name}-{digest[:16]}.cubin"
    if not binary.exists():
        src = directory / "src" / f"{spec.name}.cu"
        src.write_text(source)
        result = subprocess.run([nvcc, *flags, "-arch=sm_90", "-cubin", "-o", str(binary),
                                 str(src)], capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr
    return dict(stage=spec.stage.short, spec=spec.fields_dict(), symbol=spec.name,
                binary=f"bin/{binary.name}", sha256=cache.sha256_file(binary),
                source_sha256=digest, registers=None, spills=None)


def build(specs, root: Path, jobs: int = 8) -> cache.Manifest:
    target = config.declared("targets")["targets"]["cuda"]
    nvcc = shutil.which(target["compiler"])
    directory = cache.flavor_dir(Target.CUDA, FLAVOR, root)
    for sub in ("bin", "src"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    specs = sorted(set(specs), key=lambda s: s.name)
    with ThreadPoolExecutor(jobs) as pool:
        entries = list(pool.map(lambda s: _compile(s, directory, nvcc, target["flags"]), specs))
    kernels = {s.name: e for s, e in zip(specs, entries, strict=True)}
    toolchain = dict(compiler=target["compiler"], version="tests", flags=target["flags"],
                     arch="sm_90")
    path = cache.write_manifest(directory, dict(format=1, target="cuda", flavor=FLAVOR,
                                                toolchain=toolchain, kernels=kernels))
    return cache.read_manifest(path)
