"""Which data-parallel strategy to train with: every strategy simulated, the fastest that fits chosen.

Both kinds of step slow compute while a collective is in flight (``overheads.compute_slowdown``, fitted on DDP
runs); DDP also pays its bucket terms. FSDP2's own host work per unit (its hooks, DTensor bookkeeping) is not
modelled and no FSDP run has been measured against the model yet (docs/sharded.md), so the advice says so
whenever it picks a sharded strategy over a DDP that fits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ddpsim.planning.ties import MIN_GAIN_REL, pick_simplest
from ddpsim.results import Result
from ddpsim.scenario.schema import STRATEGIES, Scenario
from ddpsim.sharded.units import shard_units
from ddpsim.simulation import prepare, simulate


@dataclass(frozen=True)
class StrategyOption:
    strategy: str
    step_time_s: float
    memory_bytes: float
    fits: bool
    comm_time_s: float
    exposed_comm_s: float


@dataclass(frozen=True)
class StrategyAdvice:
    recommended: str | None  # None: nothing fits
    options: list[StrategyOption]
    gpu_memory_bytes: float
    why: str
    # the activation checkpointing the options were simulated with: the scenario's, or "full" where no
    # strategy fits without it
    activation_checkpointing: str = "none"

    def to_dict(self) -> dict[str, Any]:
        return {"recommended": self.recommended, "why": self.why,
                "activation_checkpointing": self.activation_checkpointing,
                "gpu_memory_bytes": self.gpu_memory_bytes, "options": [vars(o) for o in self.options]}


def _option(result: Result) -> StrategyOption:
    return StrategyOption(result.strategy, result.step_time_s, result.memory_bytes["total"], result.fits_in_memory,
                          result.comm_time_s, result.exposed_comm_s)


def advise_strategy(scenario: Scenario, strategies: tuple[str, ...] = STRATEGIES) -> StrategyAdvice:
    """Simulate the scenario under each strategy; recommend the fastest of those that fit."""
    prepared = prepare(scenario)
    options = [_option(simulate(replace(prepared, scenario=replace(prepared.scenario,
                                                                   parallel=replace(prepared.scenario.parallel,
                                                                                    strategy=s)))))
               for s in strategies]
    fitting = [o for o in options if o.fits]
    gpu = prepared.gpu
    checkpointing = scenario.workload.activation_checkpointing
    if not fitting:
        least = min(options, key=lambda o: o.memory_bytes)
        why = (f"none fits in {gpu.memory_bytes / 2**30:.0f} GiB; the least is {least.strategy} at "
               f"{least.memory_bytes / 2**30:.1f} GiB per GPU")
        if checkpointing != "full" and _has_blocks(prepared):
            # whether activation checkpointing of every block makes one fit, and which is then fastest
            full = advise_strategy(replace(scenario, workload=replace(scenario.workload,
                                                                      activation_checkpointing="full")), strategies)
            if full.recommended is not None:
                return replace(full, why=f"none fits without activation checkpointing ({why}); with full "
                                         f"activation checkpointing (workload.activation_checkpointing: full): "
                                         f"{full.why}")
            why += "; none fits with full activation checkpointing either"
        return StrategyAdvice(None, options, gpu.memory_bytes, why, checkpointing)
    fastest = min(fitting, key=lambda o: o.step_time_s)
    # tune-buckets' tie rule: within MIN_GAIN_REL of the fastest, the simplest (DDP, then ZeRO-1, 2, 3)
    by_name = {o.strategy: o for o in fitting}
    best = by_name[pick_simplest({name: o.step_time_s for name, o in by_name.items()},
                                 lambda name: float(strategies.index(name)))]
    others = [o for o in fitting if o is not best]
    if best is fastest:
        why = f"{best.strategy} is the fastest that fits: "
    else:
        why = (f"{best.strategy} is the simplest that fits within {100 * MIN_GAIN_REL:g}% of the fastest "
               f"({fastest.strategy}, {100 * (1 - fastest.step_time_s / best.step_time_s):.2f}% faster: a tie): ")
    why += (f"{best.step_time_s * 1e3:.1f} ms per step, {best.memory_bytes / 2**30:.1f} of "
            f"{gpu.memory_bytes / 2**30:.0f} GiB")
    if others:
        why += "; " + ", ".join(f"{o.strategy} {o.step_time_s * 1e3:.1f} ms ({o.step_time_s / best.step_time_s - 1:+.1%})"
                                for o in others)
    left_out = [o.strategy for o in options if not o.fits]
    if left_out:
        why += f"; {', '.join(left_out)} do not fit"
    ddp = next((o for o in fitting if o.strategy == "ddp"), None)
    if ddp is not None and best.strategy in ("zero2", "zero3"):
        why += (". Caution: FSDP2's host work per unit is not modelled and no FSDP run has been checked against "
                "this prediction yet (a launch-bound model can lose what the sharded optimizer saves)")
    return StrategyAdvice(best.strategy, options, gpu.memory_bytes, why, checkpointing)


def _has_blocks(prepared: Any) -> bool:
    return any(not u.is_root for u in shard_units(prepared.workload, prepared.scenario.parallel.unit))
