"""A measured spread read as a lognormal: the one conversion between p10 / p90 and sigma that the
calibration's noise, its prediction intervals and a profile's step jitter all use."""

from __future__ import annotations

import math

Z90 = 1.2815515655446004  # the standard normal's 90th percentile


def sigma_from_p10_p90(p10: float, p90: float) -> float:
    """The lognormal sigma whose 10th and 90th percentiles are ``p10`` and ``p90``: ln(p90 / p10) / (2 z90)."""
    return math.log(p90 / p10) / (2 * Z90)
