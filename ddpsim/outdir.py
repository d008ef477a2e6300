"""Write an output folder all at once: files go to a hidden sibling and are moved in at the end,
so a failed command leaves nothing half-written."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def atomic_dir(path: str) -> Iterator[str]:
    """Yield a staging folder; on success its files replace those of the same name in ``path``."""
    parent = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".ddpsim-", dir=parent)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(staging):
        os.replace(os.path.join(staging, name), os.path.join(path, name))
    shutil.rmtree(staging, ignore_errors=True)


def atomic_write_text(path: str, text: str) -> None:
    parent = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(parent, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ddpsim-", dir=parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
