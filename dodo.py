"""wino's build, as doit tasks: `doit list` is the help, docs/BUILD.md the manual.

    doit                      build every target whose compiler is present (= doit compile)
    doit -n 2 compile:c       one target, two jobs
    doit compile_cuda:<name>  one kernel
The logic lives in wino.builder; this file is its table of contents.
"""

from functools import lru_cache

from wino import config
from wino.builder import errors, tasks, wheel
from wino.builder import plan as build_plan
from wino.builder.paths import dep_file
from wino.builder.reporter import BuildReporter

DOIT_CONFIG = {
    "default_tasks": ["compile"],
    "dep_file": dep_file(),
    "verbosity": 1,
    "reporter": BuildReporter,  # a line per task that runs and a summary: a no-op is one line
}


@lru_cache(maxsize=1)
def plans():
    """The grid per target, with every binary's address (rendered once per doit run). A skipped
    target says why when it is asked for (compile:<target>), not on every run."""
    with errors.loading():  # a bad grid or rule: one line, not doit's traceback
        return build_plan.plan(quiet=True)


def task_compile():
    """Build the kernel cache: every target whose compiler is present (compile:<target> for one)."""
    for plan in plans():
        yield tasks.compile_task(plan)


def task_kernels():
    """compile_<target>:<kernel name>: one kernel, content-addressed (rebuilt only if changed)."""
    for plan in plans():
        if plan.toolchains:
            yield from tasks.kernel_tasks(plan)


def task_manifest():
    """Publish each target's manifest (atomically), after its kernels."""
    for plan in plans():
        if plan.toolchains:
            yield tasks.manifest_task(plan)


def task_validate():
    """Validate grids/*.yaml against schema/*.json and expand the grid."""
    paths = sorted(str(p) for p in config.GRIDS.glob("*.yaml"))
    return {
        "actions": [(tasks.validate_action, (paths,))],
        "file_dep": paths + sorted(str(p) for p in config.SCHEMAS.glob("*.json")),
        "verbosity": 2,
    }


def task_wheel():
    """Build dist/wino-*.whl carrying the c and cuda caches (to install where no compiler is)."""
    return wheel.wheel_task(plans())


def task_golden():
    """Check the golden hashes (rendered sources; PTX and LLVM IR of the toolchains present)."""
    return {"actions": [tasks.golden_action], "uptodate": [False], "verbosity": 2}


def task_golden_record():
    """Re-record tests/golden/ (after a deliberate codegen change; say so in the commit)."""
    return {"actions": [tasks.golden_record_action], "uptodate": [False], "verbosity": 2}
