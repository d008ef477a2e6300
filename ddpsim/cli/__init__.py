"""The command line: one module per group of subcommands, each calling the library."""

from ddpsim.cli.main import main

__all__ = ["main"]
