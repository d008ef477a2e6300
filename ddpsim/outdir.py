"""Write an output folder all at once: files go to a hidden sibling and are moved in at the end,
so a failed command leaves nothing half-written. Errors name the path the user gave, never the
hidden staging file they happened in."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from ddpsim.errors import ScenarioError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_out_path(path: str, option: str = "--out") -> None:
    """An empty path is a shell variable that was never set: written to, it would mean the current
    folder (or fail on a hidden staging file), so it is refused before anything is written."""
    if not path.strip():
        raise ScenarioError(f"expected a path, got {path!r}", field=option)


def _as_user_path(exc: OSError, staging: str, path: str) -> OSError:
    """The same error, naming ``path`` (what the user typed) where it named the staging file or folder."""
    def named(name: object) -> object:
        if isinstance(name, str) and (name == staging or name.startswith(staging + os.sep)):
            rest = os.path.relpath(name, staging)
            return path if rest == "." else os.path.join(path, rest)
        return name

    if exc.errno is None:
        return exc
    return type(exc)(exc.errno, exc.strerror, named(exc.filename))


@contextmanager
def atomic_dir(path: str) -> Iterator[str]:
    """Yield a staging folder; on success its files replace those of the same name in ``path``."""
    check_out_path(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"{path}: exists and is not a folder")
    parent = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".ddpsim-", dir=parent)
    try:
        try:
            yield staging
            os.makedirs(path, exist_ok=True)
            for name in os.listdir(staging):
                os.replace(os.path.join(staging, name), os.path.join(path, name))
        except OSError as exc:
            raise _as_user_path(exc, staging, path) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def atomic_write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, with the usual permissions."""
    check_out_path(path)
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", path)
    parent = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".ddpsim-", dir=parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        # mkstemp creates the file readable by its owner only; give it what open() would have
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        # a full disk or a lost permission happens on the temporary file; the user knows only ``path``
        raise type(exc)(exc.errno, exc.strerror, path) if exc.errno is not None else exc from None
    finally:
        if tmp and os.path.exists(tmp):
            os.remove(tmp)


@contextmanager
def removed_if_left_empty(*paths: str) -> Iterator[None]:
    """Folders among ``paths`` that do not exist yet are removed again if the block fails and leaves
    them empty (a sweep stopped by a full disk before its first point was saved)."""
    new = [p for p in paths if p and not os.path.exists(p)]
    try:
        yield
    except BaseException:
        for folder in sorted(new, key=len, reverse=True):  # the deepest first
            try:
                os.rmdir(folder)
            except OSError:
                pass  # not empty (points to resume from), or never made
        raise
