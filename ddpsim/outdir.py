"""Write an output folder all at once: files go to a hidden sibling and are moved in at the end,
so a failed command leaves nothing half-written."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_dir(path: str) -> Iterator[str]:
    """Yield a staging folder; on success its files replace those of the same name in ``path``."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"{path}: exists and is not a folder")
    parent = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".ddpsim-", dir=parent)
    try:
        yield staging
        os.makedirs(path, exist_ok=True)
        for name in os.listdir(staging):
            os.replace(os.path.join(staging, name), os.path.join(path, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def atomic_write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, with the usual permissions."""
    parent = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(parent, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ddpsim-", dir=parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        # mkstemp creates the file readable by its owner only; give it what open() would have
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
