"""Toolchains: the compiler of each target (grids/targets.yaml), its identity and flavor, and the
compile commands.

A toolchain is one (target, arch) configuration. Its identity (the compiler's version line), its
flags and its arch are what a binary's content hash covers besides the source; the path it was
found at is not (STYLE 8). A target whose compiler is absent is skipped with a message naming the
compiler and how to get it; a HIP arch this clang does not know is skipped likewise.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .. import config
from ..cache import atomic_write, build_folder
from ..vocab import Target

_FLAVOR_BAD = re.compile(r"[^A-Za-z0-9_.+-]")
_VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)?)")
#: Version of the compile commands below: bump it when they change what a binary holds (it is
#: part of every binary's address, so the next build recompiles everything).
RECIPE = 2
_HIP_PROBE = 'extern "C" __attribute__((global)) void wino_probe(void) {}\n'


class CompileError(RuntimeError):
    """A compiler exited non-zero: the message holds the command and its output."""


@dataclass(frozen=True)
class Toolchain:
    """One (target, arch) build configuration."""

    target: Target
    compiler: str  # the command grids/targets.yaml declares (cc, nvcc, clang-19)
    path: str  # where it was found on PATH (never hashed)
    identity: str  # the compiler's version line (hashed into every binary)
    family: str  # gcc, clang, nvcc
    version: str  # 12.2.0, 13.0, 19.1.7
    flags: tuple[str, ...]
    arch: str  # host, sm_90, gfx1100
    code_object: bool = True  # hip: lld present; else the LLVM IR is the binary

    @property
    def flavor(self) -> str:
        """gcc-12.2.0, nvcc-13.0-sm_90, clang-19.1.7-gfx1100: the cache folder's name."""
        parts = [self.family, self.version] + ([] if self.arch == "host" else [self.arch])
        return _FLAVOR_BAD.sub("_", "-".join(parts))

    @property
    def kit(self) -> Kit:
        return KITS[self.target]

    @property
    def binary_ext(self) -> str:
        return self.kit.binary_ext if self.code_object else self.kit.ir_ext

    def fingerprint(self) -> dict:
        """Everything about the toolchain that changes a binary (paths excluded)."""
        return {
            "recipe": RECIPE,
            "target": self.target.value,
            "identity": self.identity,
            "flags": list(self.flags),
            "arch": self.arch,
            "code_object": self.code_object,
        }

    def manifest_toolchain(self) -> dict:
        """The manifest's ``toolchain`` object."""
        return {
            "compiler": self.compiler,
            "version": self.identity,
            "flags": list(self.flags),
            "arch": self.arch,
        }


@dataclass(frozen=True)
class Resolved:
    """A target's usable toolchains (one per arch) and why anything was skipped."""

    target: Target
    toolchains: tuple[Toolchain, ...]
    messages: tuple[str, ...]


# Identity ----------------------------------------------------------------------------------------
@cache
def identity_line(path: str, target: Target) -> str:
    """The compiler's version line (the kit picks it from `<compiler> --version`)."""
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout
    return KITS[target].identity([line.strip() for line in out.splitlines() if line.strip()])


def _cc_family_version(line: str) -> tuple[str, str]:
    """('gcc' | 'clang', '12.2.0') from a `cc --version` or `clang --version` first line."""
    match = _VERSION.search(line)
    return "clang" if "clang" in line.lower() else "gcc", match.group(1) if match else "unknown"


# HIP arch probes (cached per clang identity and flags) -------------------------------------------
def _probe_cache(root) -> Path:
    return build_folder(root) / "toolchains.json"


def _hip_compiles(path: str, flags: tuple[str, ...], arch: str, code_object: bool) -> bool:
    with tempfile.TemporaryDirectory(prefix="wino-probe-") as tmp:
        src = Path(tmp) / "probe.hip"
        src.write_text(_HIP_PROBE, encoding="utf-8")
        mode = ["--no-gpu-bundle-output", "-c"] if code_object else ["-S", "-emit-llvm"]
        cmd = [
            path,
            *flags,
            f"--offload-arch={arch}",
            "-cuid=probe",
            *mode,
            "-o",
            str(Path(tmp) / "probe.out"),
            str(src),
        ]
        return subprocess.run(cmd, capture_output=True).returncode == 0


def hip_probes(
    path: str, identity: str, flags: tuple[str, ...], archs: tuple[str, ...], root=None
) -> dict[str, bool]:
    """{arch: known} plus {'code_object': lld works}, cached in build/toolchains.json."""
    key = hashlib.sha256(json.dumps([identity, list(flags)]).encode()).hexdigest()[:16]
    cache_file = _probe_cache(root)
    try:
        cache = json.loads(cache_file.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        cache = {}
    known = cache.get(key, {})
    wanted = [a for a in archs if a not in known]
    for arch in wanted:
        known[arch] = _hip_compiles(path, flags, arch, code_object=False)
    if "code_object" not in known:
        first = next((a for a in archs if known[a]), None)
        known["code_object"] = bool(first) and _hip_compiles(path, flags, first, True)
        wanted.append("code_object")
    if wanted:
        cache[key] = known
        atomic_write(cache_file, json.dumps(cache, indent=1, sort_keys=True) + "\n")
    return known


# Resolution --------------------------------------------------------------------------------------
def resolve(target: Target, root=None) -> Resolved:
    """The target's toolchains from grids/targets.yaml, or messages saying why none."""
    declared = config.declared("targets")["targets"].get(target.value)
    if declared is None:
        return Resolved(
            target,
            (),
            (f"wino: target {target.value} is not declared in grids/targets.yaml; skipped",),
        )
    compiler, flags = declared["compiler"], tuple(declared["flags"])
    path = shutil.which(compiler)
    if path is None:
        return Resolved(
            target,
            (),
            (
                f"wino: skipping target {target.value}: compiler "
                f"`{compiler}` not found on PATH; {KITS[target].how_to_get}",
            ),
        )
    line = identity_line(path, target)
    family, version = KITS[target].family_version(line)
    archs, code_object, messages = KITS[target].usable(path, line, flags, declared["archs"], root)
    chains = tuple(
        Toolchain(target, compiler, path, line, family, version, flags, arch, code_object)
        for arch in archs
    )
    return Resolved(target, chains, tuple(messages))


def family_version(target: Target, line: str) -> tuple[str, str]:
    """(family, version) of a compiler's identity line, e.g. ('nvcc', '13.0')."""
    return KITS[target].family_version(line)


# Compiling ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Compiled:
    """What a compile produced (in its scratch folder) and what the compiler said."""

    binary: Path
    artefacts: dict[str, Path]  # extra outputs by kind: ptx, ll
    log: str  # the compiler's stderr (warnings, ptxas -v report, remarks)
    report: dict  # registers, spills, extra (parsed from the log)


def _run(cmd: list[str], src: Path) -> str:
    """Run a compile in the source's folder, naming the source relatively: nothing the compiler
    writes (LLVM IR's ModuleID and source_filename) depends on where the build folder is."""
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=src.parent)
    if done.returncode != 0:
        raise CompileError(
            f"(in {src.parent}) {' '.join(cmd)}\nexited {done.returncode}:\n"
            f"{done.stderr}{done.stdout}"
        )
    return done.stderr


def _compile_c(tc: Toolchain, src: Path, name: str, scratch: Path) -> Compiled:
    out = scratch / f"{name}.so"
    log = _run([tc.path, *tc.flags, "-o", str(out), src.name], src)
    return Compiled(out, {}, log, {"registers": None, "spills": None, "extra": {}})


def _compile_cuda(tc: Toolchain, src: Path, name: str, scratch: Path) -> Compiled:
    """One nvcc call: the cubin, and with -keep the PTX it was assembled from (byte-identical to
    what `nvcc -ptx` writes)."""
    out, keep = scratch / f"{name}.cubin", scratch / "keep"
    keep.mkdir()
    cmd = [tc.path, *tc.flags, f"-arch={tc.arch}", "-cubin", "-keep", f"-keep-dir={keep}"]
    log = _run([*cmd, "-o", str(out), src.name], src)
    return Compiled(out, {"ptx": keep / f"{src.stem}.ptx"}, log, parse_ptxas(log))


def _hip_base(tc: Toolchain, name: str) -> list[str]:
    """clang's HIP device-only command; -cuid fixed to the kernel name, so that the IR does not
    depend on the source path."""
    return [tc.path, *tc.flags, f"--offload-arch={tc.arch}", f"-cuid={name}"]


def _compile_hip(tc: Toolchain, src: Path, name: str, scratch: Path) -> Compiled:
    """LLVM IR (-S -emit-llvm) and, with lld, the code object (its resource usage as extra)."""
    ll = scratch / f"{name}.ll"
    log = _run([*_hip_base(tc, name), "-S", "-emit-llvm", "-o", str(ll), src.name], src)
    if not tc.code_object:
        return Compiled(ll, {}, log, {"registers": None, "spills": None, "extra": {}})
    out = scratch / f"{name}.hsaco"
    flags = ["--no-gpu-bundle-output", "-c", "-Rpass-analysis=kernel-resource-usage"]
    log += _run([*_hip_base(tc, name), *flags, "-o", str(out), src.name], src)
    return Compiled(out, {"ll": ll}, log, parse_hip_resources(log))


def compile_source(tc: Toolchain, src: Path, name: str, scratch: Path) -> Compiled:
    """Compile one rendered source into ``scratch``; raises CompileError."""
    return tc.kit.compile(tc, src, name, scratch)


def compile_ir(tc: Toolchain, src: Path, name: str, out: Path) -> None:
    """Write the portable IR only (PTX for cuda, LLVM IR for hip): the golden hashes."""
    if tc.kit.ir_kind is None:
        raise ValueError(f"target {tc.target.value} has no IR")
    _run([*tc.kit.ir_command(tc, name), "-o", str(out), src.name], src)


# One kit per target ----------------------------------------------------------------------------
class Kit:
    """What one target's toolchain does its own way (mirroring wino.codegen.renderers: the
    subclasses set strings and supply commands; shared code has no per-target branch)."""

    target: Target
    how_to_get: str  # how to get the compiler, for the skip message
    source_ext: str
    binary_ext: str
    ir_ext = ""  # the binary when code objects cannot be made (hip without lld)
    ir_kind: str | None = None  # the golden IR file prefix (ptx, llvmir); None: no IR

    def identity(self, lines: list[str]) -> str:
        return lines[0]

    def family_version(self, line: str) -> tuple[str, str]:
        return _cc_family_version(line)

    def usable(self, path, line, flags, archs, root) -> tuple[tuple[str, ...], bool, list[str]]:
        """(archs that build, whether code objects can be made, skip messages)."""
        return tuple(archs), True, []

    def compile(self, tc: Toolchain, src: Path, name: str, scratch: Path) -> Compiled:
        raise NotImplementedError

    def ir_command(self, tc: Toolchain, name: str) -> list[str]:
        raise NotImplementedError


class CKit(Kit):
    target = Target.C
    how_to_get = "install a C compiler with OpenMP, e.g. `apt-get install gcc`"
    source_ext, binary_ext = "c", "so"
    compile = staticmethod(_compile_c)


class CudaKit(Kit):
    target = Target.CUDA
    how_to_get = (
        "install the CUDA toolkit (https://developer.nvidia.com/cuda-downloads) and put "
        "nvcc on PATH"
    )
    source_ext, binary_ext, ir_kind = "cu", "cubin", "ptx"
    compile = staticmethod(_compile_cuda)

    def identity(self, lines: list[str]) -> str:
        return next(line for line in lines if "release" in line)

    def family_version(self, line: str) -> tuple[str, str]:
        match = re.search(r"release (\d+\.\d+)", line)
        return "nvcc", match.group(1) if match else "unknown"

    def ir_command(self, tc: Toolchain, name: str) -> list[str]:
        return [tc.path, *tc.flags, f"-arch={tc.arch}", "-ptx"]


class HipKit(Kit):
    target = Target.HIP
    how_to_get = "`apt-get install clang-19 lld-19` (Debian 12 / Ubuntu 24.04; no ROCm needed)"
    source_ext, binary_ext, ir_ext, ir_kind = "hip", "hsaco", "ll", "llvmir"
    compile = staticmethod(_compile_hip)

    def usable(self, path, line, flags, archs, root):
        known = hip_probes(path, line, flags, tuple(archs), root)
        messages = [
            f"wino: skipping hip arch {arch}: {line} does not know it "
            "(a newer clang does); the other archs build"
            for arch in archs
            if not known[arch]
        ]
        if not known["code_object"]:
            messages.append(
                f"wino: hip code objects need lld ({self.how_to_get}); building LLVM IR only"
            )
        return tuple(a for a in archs if known[a]), known["code_object"], messages

    def ir_command(self, tc: Toolchain, name: str) -> list[str]:
        return [*_hip_base(tc, name), "-S", "-emit-llvm"]


KITS: dict[Target, Kit] = {kit.target: kit for kit in (CKit(), CudaKit(), HipKit())}


# Reports -----------------------------------------------------------------------------------------
_PTXAS = {
    "registers": r"Used (\d+) registers",
    "barriers": r"used (\d+) barriers",
    "smem_bytes": r"(\d+) bytes smem",
    "stack_bytes": r"(\d+) bytes stack frame",
    "spill_store_bytes": r"(\d+) bytes spill stores",
    "spill_load_bytes": r"(\d+) bytes spill loads",
}
_HIP_REMARKS = {
    "sgprs": r"SGPRs: (\d+)",
    "vgprs": r"VGPRs: (\d+)",
    "agprs": r"AGPRs: (\d+)",
    "scratch_bytes_per_lane": r"ScratchSize \[bytes/lane\]: (\d+)",
    "occupancy_waves": r"Occupancy \[waves/SIMD\]: (\d+)",
    "sgpr_spills": r"SGPRs Spill: (\d+)",
    "vgpr_spills": r"VGPRs Spill: (\d+)",
    "lds_bytes": r"LDS Size \[bytes/block\]: (\d+)",
}


def _grab(patterns: dict[str, str], log: str) -> dict[str, int]:
    found = {}
    for key, pattern in patterns.items():
        match = re.search(pattern, log)
        if match:
            found[key] = int(match.group(1))
    return found


def parse_ptxas(log: str) -> dict:
    """registers, spills (store + load bytes) and the rest of the `ptxas -v` report as extra."""
    facts = _grab(_PTXAS, log)
    registers = facts.pop("registers", None)
    spills = None
    if "spill_store_bytes" in facts:
        spills = facts["spill_store_bytes"] + facts["spill_load_bytes"]
    return {"registers": registers, "spills": spills, "extra": facts}


def parse_hip_resources(log: str) -> dict:
    """clang's kernel-resource-usage remarks, kept as extra (registers/spills are CUDA's)."""
    return {"registers": None, "spills": None, "extra": {"amdgpu": _grab(_HIP_REMARKS, log)}}
