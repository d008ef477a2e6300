"""A collective's fitted cost curve: per protocol, base + steps x hop + bytes through each link / bus bandwidth,
and the lower envelope over protocols with the host's floor. ``ddpsim.fitting.curvefit`` fits it; a
calibration's measured reduce-scatter and all-gather curves price sharded steps with it (``ddpsim.sharded``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProtocolFit:
    base_s: float
    hop_s: float
    busbw_Bps: float
    passes: int = 2  # passes of the ring: all-reduce 2 (reduce-scatter then all-gather), either alone 1

    def time_s(self, n_bytes: float, world_size: int) -> float:
        steps = self.passes * (world_size - 1)
        return self.base_s + steps * self.hop_s + n_bytes * steps / world_size / self.busbw_Bps


def envelope_s(
    fits: dict[str, ProtocolFit], n_bytes: float, world_size: int, floor_s: float = 0.0
) -> tuple[float, str]:
    best = min(fits, key=lambda p: fits[p].time_s(n_bytes, world_size))
    return max(floor_s, fits[best].time_s(n_bytes, world_size)), best
