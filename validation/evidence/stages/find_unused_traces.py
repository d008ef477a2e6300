"""Where ``find_unused_parameters``' extra time sits, from per-bucket traces at 2 and 4 GPUs.

On the 4 x H200 allocations X and Y (``validation/data/h200x4-options-2026-11-27``, ``-27b``) the option
cost +5 to +19% where both launches agreed, and ddpsim predicts +2.5 to +3.2% from its mechanisms
measured at world size 1 (``ddpsim/ddp/options.py``). A third allocation
(``validation/data/h200x4-find-unused-traces-2026-11-27``, two launches) ran each model plain, with the
option, and both again under the harness's per-bucket timing hook. Per (launch, model, GPUs) this prints
the option's step over the plain step (untraced runs), the traced backward, and, from the traces, when the
backward thread launched the last bucket (host clock from the start of backward) and when the last
all-reduce ended (GPU clock): a later last launch means a slower backward thread; the same last launch with
a later end would mean a slower all-reduce tail.

    python -m validation.evidence --stage find-unused-traces
"""

from __future__ import annotations

import json
import os
import sys

from ddpsim.jsonfile import open_data
from validation.evidence import ROOT  # noqa: E402
from validation.evidence.stages import printed

DATA = os.path.join(ROOT, "validation", "data", "h200x4-find-unused-traces-2026-11-27", "ddp_runs.jsonl")


def main() -> int:
    with open_data(DATA) as handle:
        runs = [json.loads(line) for line in handle]
    ok = {(r["launch_id"], r["model"], r["variant"]): r for r in runs if r.get("status") == "ok"}
    print(f"{'launch':12s} {'model':11s} {'effect':>7s}   {'traced backward ms':>20s}   "
          f"{'last bucket launched (host) ms':>31s}   {'last all-reduce ended ms':>25s}")
    print(f"{'':12s} {'':11s} {'':>7s}   {'plain':>9s} {'option':>10s}   {'plain':>15s} {'option':>15s}   "
          f"{'plain':>12s} {'option':>12s}")
    for (launch, model, variant), plain in sorted(ok.items()):
        if variant != "none":
            continue
        option = ok.get((launch, model, "find_unused"))
        traced_plain, traced_option = ok.get((launch, model, "timing")), ok.get((launch, model, "find_unused+timing"))
        if option is None or traced_plain is None or traced_option is None:
            continue
        traced = (traced_plain, traced_option)
        effect = option["step_s_median"] / plain["step_s_median"] - 1
        bwd = [t["backward_s_median"] * 1e3 for t in traced]
        last_launch = [max(b["launch_cpu_s"] for b in t["per_bucket"]) * 1e3 for t in traced]
        last_end = [max(b["end_s"] for b in t["per_bucket"]) * 1e3 for t in traced]
        print(f"{launch:12s} {model:11s} {effect:+7.1%}   {bwd[0]:9.1f} {bwd[1]:10.1f}   {last_launch[0]:15.1f} "
              f"{last_launch[1]:15.1f}   {last_end[0]:12.1f} {last_end[1]:12.1f}")
    return 0



def run() -> str:
    """The stage's output (validation/reports/find-unused-traces/output.txt): what the benchmark printed."""
    return printed(main, __name__)

if __name__ == "__main__":
    sys.exit(main())
