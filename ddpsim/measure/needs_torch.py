"""What a harness command says on a host without torch (standard library only): ``--help`` prints the
command's description and exits 0; anything else is one line naming what to install, exit 2."""
from __future__ import annotations

import sys
from typing import NoReturn

INSTALL = "pip install torch (the harness needs torch and the Python standard library only)"


def without_torch(module_name: str, doc: str | None, error: ModuleNotFoundError) -> NoReturn:
    """Called where a harness module's ``import torch`` failed. Run as a command (``python -m``), it ends
    the process as described above; imported, it re-raises ``error`` (the importer decides)."""
    if module_name != "__main__" or (error.name or "").split(".")[0] != "torch":
        raise error
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    prog = f"python -m {spec.name}" if spec is not None else sys.argv[0]
    if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        print(f"usage: {prog} [options]\n\n{(doc or '').strip()}\n\ntorch does not import here: {INSTALL}; "
              "then --help lists the options")
        raise SystemExit(0)
    print(f"{prog}: error: needs torch, which does not import here: {INSTALL}", file=sys.stderr)
    raise SystemExit(2)
