"""The evidence pipeline: stages compute the committed outputs under validation/reports/ from validation/data
and the committed calibrations; the assembly turns those outputs, a template and the manifest
(validation/evidence/manifest.json) into docs/accuracy.md. ``python -m validation.evidence --help``."""

import os

# the repository root: stages and reports name data by paths relative to it
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
