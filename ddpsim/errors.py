"""The one exception type users see: it names the file and the field that are wrong."""

from __future__ import annotations


class ScenarioError(Exception):
    """Bad user input. The CLI prints ``str(error)`` on one line and exits with code 2."""

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        self.file = file
        self.field = field
        self.detail = message
        where = ": ".join(part for part in (file, field) if part)
        super().__init__(f"{where}: {message}" if where else message)
