"""``python -m ddpsim.measure``: the same as ``ddpsim measure``, with torch and the standard library only."""
import sys

from .cli import main

sys.exit(main())
