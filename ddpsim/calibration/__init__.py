"""Measured data in, a Calibration value out; validation of predictions against held-out runs."""
