"""The example scenarios stay in ``scenarios/`` at the repository's root, where the README and the
Makefile name them, and ship in the wheel as ``ddpsim/scenarios`` (package data, not a copy). A
package mapped to another folder cannot sit beside ``packages.find`` in pyproject.toml; everything
else is declared there."""

from setuptools import find_namespace_packages, setup

setup(
    packages=[*find_namespace_packages(include=["ddpsim", "ddpsim.*"]), "ddpsim.scenarios"],
    package_dir={"ddpsim.scenarios": "scenarios"},
)
