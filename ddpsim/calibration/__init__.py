"""The Calibration value the simulator reads: its file, its contents and applying it to a scenario."""
