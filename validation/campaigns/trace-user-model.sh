#!/bin/sh
# The trace workload with a model of the user's own (issue #28): validation/campaigns/lab_models.py (a LLaMA-style
# decoder) copied outside the repository, then trace-from-wheel.sh on it. Run by the device tool from the repo root
# with .whl/ carried and $OUT set; argument: the most seconds `ddpsim measure` may take (default 200).
mkdir -p /tmp/usermods && cp validation/campaigns/lab_models.py /tmp/usermods/lab_models.py
export PYTHONPATH=/tmp/usermods
TRACE_TMP=/tmp/trace-user sh validation/campaigns/trace-from-wheel.sh "lab_models:decoder@batch=8@precision=bf16@optimizer=adamw" "${1:-200}"
