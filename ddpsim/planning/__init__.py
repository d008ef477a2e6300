"""Capacity planning on top of the simulator: sweeps, the bucket-cap advisor, scaling and variability."""
