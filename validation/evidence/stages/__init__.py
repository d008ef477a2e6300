"""The evidence pipeline's stages: each computes one committed output under ``validation/reports/`` from
``validation/data`` and the committed calibrations, by calling the library (never the CLI's flags)."""
