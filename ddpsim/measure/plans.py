"""What ``ddpsim measure`` runs: a few named plans, each a complete campaign with a budget.

A plan is data: the campaign's options, the GPU counts it needs, and one line that says what it buys.
"""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MODELS = ("resnet50", "gpt2-124m")
LINK_CLASSES = ("nvlink", "shm", "socket")


@dataclass(frozen=True)
class Plan:
    name: str
    buys: str  # what the measurements are for, in one line
    caps_mb: str  # bucket caps of the DDP runs ("" for none)
    ddp_runs: bool
    budget_s: float
    quick: bool = False
    net_probe: bool = True  # on multi-node shapes only
    steps: int | None = None  # timed steps per configuration and round (None: the campaign's 30)
    timing_run: bool = True  # the per-bucket timing-hook run at cap 25 (per-bucket analysis only)
    flat_weights: bool = False  # every sweep launch the same share of the budget (see campaign --flat-weights)

    def campaign_args(self) -> list[str]:
        args = ["--caps", self.caps_mb or "25", "--algos", "default"]
        if not self.ddp_runs:
            args += ["--skip-ddp"]
        if self.quick:
            args += ["--quick"]
        if self.net_probe:
            args += ["--net-probe"]
        if self.steps is not None:
            args += ["--steps", str(self.steps)]
        if not self.timing_run:
            args += ["--timing-cap", "none"]
        if self.flat_weights:
            args += ["--flat-weights"]
        return args


PLANS = {
    "default": Plan("default", "all-reduce sweeps and DDP runs at three bucket caps per link class, and each "
                    "model's world-size-1 profile: what `ddpsim calibrate` fits and `ddpsim validate` checks",
                    "5,25,50", True, 600.0),
    # the DDP runs (one cap, 10 steps a round) see what the sweeps cannot: the allocation's compute and host
    # inside a DDP step (issue #39: NVLink steps 9-24% off on allocations whose sweeps matched the pool)
    "probe": Plan("probe", "the short probe of a fresh allocation: an all-reduce sweep per link class, a few "
                  "DDP steps of each model at cap 25 and each model's world-size-1 profile; `ddpsim calibrate "
                  "--recentre` re-centres a pooled calibration's links and DDP overheads on it", "25", True, 120.0,
                  steps=10, timing_run=False, flat_weights=True),
    "quick": Plan("quick", "a smoke test of the host and the models: few steps, two caps", "5,25", True, 180.0,
                  quick=True),
    "sharded": Plan("sharded", "DDP, ZeRO-2 and ZeRO-3 (FSDP2) steps and peak memory per link class: what "
                    "`ddpsim validate-fsdp` checks", "", True, 600.0),
    "full": Plan("full", "the research campaign: six caps per link class (a bucket-cap curve)", "1,5,10,25,50,200",
                 True, 600.0),
}


def shapes_for(gpus_on_host: int) -> list[str]:
    """The host's own shape: all its GPUs on one node. A second world size (1x2 beside 1x4) doubles the
    launches: on 4 x H200 with three models in 420 s, 46 of 72 DDP records ended ok, the rest skipped when
    their launch's share ran out (the last model, the decoder, 3 of 24; 2026-11-27); ask for it with --shapes."""
    return [f"1x{gpus_on_host}"] if gpus_on_host >= 2 else []
