"""Scale-out with Dask: the build's compiles, and the shards of ``wino bench`` / ``wino tune``,
as Dask tasks on the workers of a cluster (or a LocalCluster), merged by the client into one
cache and manifest, one results CSV and one tuning DB.

  cluster  a Client for ``local`` (CPU workers, or one worker per visible GPU) or a scheduler
  build    distributed compile: workers return the binaries' bytes, the client publishes them
  sweep    bench / tune shards as tasks (resource GPU=1 on cuda), rows and winners merged

dask and distributed are an optional extra (``pip install 'wino[dask]'``); only this package
imports them, and only when it is used. The core and the runtime never do.
"""

from __future__ import annotations

EXTRA = "dask"


class DaskUnavailable(ValueError):
    """dask / distributed are not installed: the message names the extra to install (a
    ValueError, so that the command line prints it as one line, like a bad argument)."""


def require_distributed():
    """The ``distributed`` module, or DaskUnavailable saying how to get it."""
    try:
        import distributed
    except ImportError as err:
        raise DaskUnavailable(
            f"--dask needs dask and distributed ({err.name} is missing): "
            f"pip install 'wino[{EXTRA}]' (or pip install -e '.[{EXTRA}]' in a checkout)"
        ) from None
    return distributed
