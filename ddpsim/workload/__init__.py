"""Workloads: the built-in zoo, the torch importer and measured profiles, all as ``Workload``."""

from ddpsim.workload.model import DTYPE_BYTES, Layer, MeasuredTimes, ParamTensor, Workload

__all__ = ["DTYPE_BYTES", "Layer", "MeasuredTimes", "ParamTensor", "Workload"]
