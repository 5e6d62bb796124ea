"""A host (c target) cache for the runtime tests, built once per session into a temp folder.

It compiles exactly the kernels the tests ask for, through the build package when present."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from wino import cache, config
from wino.vocab import Target

FLAVOR = "tests"


def build(specs, root: Path, jobs: int | None = None) -> cache.Manifest:
    """Compile ``specs`` for the c target into ``root`` (skipping binaries already there) and
    publish the manifest. Rendering is serial; compiles run ``jobs`` at a time (the cores)."""
    from wino.codegen.render import render

    target = config.declared("targets")["targets"]["c"]
    compiler = shutil.which(target["compiler"])
    directory = cache.flavor_dir(Target.C, FLAVOR, root)
    (directory / "bin").mkdir(parents=True, exist_ok=True)
    (directory / "src").mkdir(parents=True, exist_ok=True)
    specs = sorted(set(specs), key=lambda s: s.name)
    sources = [render(spec, Target.C) for spec in specs]

    def compile_one(item) -> dict:
        spec, source = item
        digest = hashlib.sha256(source.encode()).hexdigest()
        binary = directory / "bin" / f"{spec.name}-{digest[:16]}.so"
        if not binary.exists():
            src = directory / "src" / f"{spec.name}.c"
            src.write_text(source)
            result = subprocess.run([compiler, *target["flags"], "-o", str(binary), str(src)],
                                    capture_output=True, text=True, check=False)
            assert result.returncode == 0 and not result.stderr, result.stderr
        return dict(stage=spec.stage.short, spec=spec.fields_dict(), symbol=spec.name,
                    binary=f"bin/{binary.name}", sha256=cache.sha256_file(binary),
                    source_sha256=digest, registers=None, spills=None)

    with ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
        entries = list(pool.map(compile_one, zip(specs, sources, strict=True)))
    kernels = {spec.name: entry for spec, entry in zip(specs, entries, strict=True)}
    toolchain = dict(compiler=target["compiler"], version="tests", flags=target["flags"],
                     arch="host")
    path = cache.write_manifest(directory, dict(format=1, target="c", flavor=FLAVOR,
                                                toolchain=toolchain, kernels=kernels))
    return cache.read_manifest(path)
