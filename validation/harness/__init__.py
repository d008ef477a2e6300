"""Validation harness: torch + standard library only (no numpy, no yaml, no ddpsim import).

Entry point: ``python -m validation.harness.campaign --out DIR``.
"""
