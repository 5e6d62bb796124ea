"""Where the build writes: the build folder (wino.cache.build_folder) and what lives
under it besides the cache (wino.cache owns ``cache/v<FORMAT>/``)."""

from __future__ import annotations

from pathlib import Path

from ..cache import atomic_write, build_folder
from ..vocab import Target
from .toolchains import KITS


def build_dir(root: Path | str | None = None) -> Path:
    """The build folder: wino.cache.build_folder."""
    return build_folder(root)


def source_path(target: Target, name: str, root: Path | str | None = None) -> Path:
    """build/src/<target>/<name>.<ext>: the rendered kernel the compiler reads."""
    return build_dir(root) / "src" / target.value / f"{name}.{KITS[target].source_ext}"


def dep_file(root: Path | str | None = None) -> str:
    """doit's database, inside the build folder (created on demand)."""
    folder = build_dir(root)
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder / ".doit.db")


def write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` unless the file already holds it (mtimes stay stable); atomic rename."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except FileNotFoundError:
        pass
    atomic_write(path, text)
    return True
