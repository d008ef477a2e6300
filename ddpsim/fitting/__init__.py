"""Measured data in, a Calibration value out; validation of predictions against held-out runs.

These tools run the simulator, so they stand above it; the Calibration value the simulator reads (its
file and applying it) stays below, in ``ddpsim.calibration``."""
