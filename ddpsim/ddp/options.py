"""What ``find_unused_parameters`` and ``static_graph`` cost per steady-state step, mechanism by mechanism.

Each mechanism is read in PyTorch's source (torch/nn/parallel/distributed.py ``_post_forward`` and
``_DDPSink``; torch/csrc/distributed/c10d/reducer.cpp) and each constant is measured by
``validation/experiments/option_cost.py`` on one H100 host, world size 1, torch 2.11
(``validation/data/option-cost-h100-2026-11-26/option_cost_cuda.json``; the same script on this
repository's CPU machine is in ``validation/data/option-cost-cpu-2026-11-26``). Host (CPU) work is
charged to the compute stream, as ddpsim charges every launch cost: it delays the GPU only where the
host is the bottleneck, which the H100 steps showed for mlp-ln-64, ViT-B/16, BERT-large and GPT-2's
backward but not for ResNet-50 (GPU-bound: +1.8 ms of host time, +0.0 ms of step).

find_unused_parameters (without static_graph), every step:
  * graph walk: ``Reducer::search_unused_parameters`` visits every autograd node reachable from the
    outputs at the end of forward (an unordered_set insert per node). Measured by timing
    ``reducer.prepare_for_backward(outputs)`` against ``prepare_for_backward([])``: 60-141 ns per
    node on the five harness models, median 101 ns.
  * _DDPSink forward: a Python autograd Function over the outputs (tree flatten, ``apply``): 0.15 ms
    of host time (chain of N tiny parameters, N = 100 and 200, find_unused minus none, less the walk).
    Its forward ``clone()``s every output tensor: a device copy of the logits (411 MB for GPT-2 at
    batch 8 x 512 tokens), priced as a copy kernel of 2 x output bytes.
  * per gradient: ``autograd_hook`` writes ``local_used_map_[index] = 1`` (a CPU tensor select and
    fill) and ``finalize_bucket_dense`` reads ``local_used_map_[index].item()``: 2.0 us per parameter
    tensor (slope of backward host time against N, find_unused minus none).
  * end of backward: ``all_reduce_local_used_map`` (a pinned temporary, an H2D copy and one
    all-reduce of 4 bytes per parameter tensor on DDP's NCCL stream after the last bucket, which
    ``finalize_backward`` makes the compute stream wait for), the _DDPSink backward in Python and
    ``local_used_map_.fill_(0)``: 0.48 ms of host time (median over N of the chain's backward
    difference less 2.0 us x N; the per-N values scatter by about +-0.3 ms). The all-reduce itself
    is priced by the collective model.
  * no bucket rebuild: the initial buckets stay (``ddp.buckets.bucket_layout``).
static_graph, after iteration 1: no walk, no _DDPSink, no used-map all-reduce; ``finalize_bucket_dense``
still reads ``local_used_map_[index].item()`` for every parameter: 0.67 us per parameter tensor (chain
slope, static_graph minus none). Buckets are rebuilt as without options.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpsim.scenario.schema import DDPSpec

MEASUREMENT = "validation/data/option-cost-h100-2026-11-26/option_cost_cuda.json"
WALK_S_PER_NODE = 0.101e-6
SINK_FORWARD_S = 150e-6
FIND_UNUSED_PER_PARAM_S = 2.0e-6
FIND_UNUSED_END_OF_BACKWARD_S = 480e-6
STATIC_GRAPH_PER_PARAM_S = 0.67e-6
# Autograd nodes per parameter tensor when the workload does not carry its count: the median of the
# five harness models counted by the same walk (2.0 mlp-ln-64, 2.1 ResNet-50, 4.4 GPT-2, 5.4 ViT-B/16,
# 5.7 BERT-large), so an estimate can be off by a factor 2.5 either way.
NODES_PER_PARAM_TENSOR = 4.39


@dataclass(frozen=True)
class OptionCosts:
    """Per-step costs of DDP's graph options, in seconds (0 where an option is off)."""

    post_forward_s: float = 0.0  # compute stream, right after forward: walk, _DDPSink, output clone
    per_param_s: float = 0.0  # compute stream, each time a gradient's hook fires
    end_of_backward_s: float = 0.0  # compute stream, after the last bucket launch (finalize's host work)
    used_map_bytes: int = 0  # an all-reduce on DDP's stream after the last bucket (0: none)
    autograd_nodes: int = 0
    nodes_source: str = ""


def autograd_node_count(n_param_tensors: int, counted: int | None, counted_source: str) -> tuple[int, str]:
    """The workload's count when it has one, else the estimate, with where the number came from."""
    if counted is not None:
        return counted, counted_source
    estimate = round(NODES_PER_PARAM_TENSOR * n_param_tensors)
    return estimate, (f"estimated: {NODES_PER_PARAM_TENSOR} x {n_param_tensors} parameter tensors "
                      f"(median of the harness models, {MEASUREMENT}); the workload carries no count")


def option_costs(ddp: DDPSpec, n_param_tensors: int, autograd_nodes: int | None, nodes_source: str,
                 output_bytes: int | None, copy_Bps: float, kernel_launch_s: float) -> OptionCosts:
    """What the scenario's find_unused_parameters / static_graph cost per steady-state step."""
    if ddp.static_graph:
        return OptionCosts(end_of_backward_s=STATIC_GRAPH_PER_PARAM_S * n_param_tensors)
    if not ddp.find_unused_parameters:
        return OptionCosts()
    nodes, source = autograd_node_count(n_param_tensors, autograd_nodes, nodes_source)
    clone_s = 2 * output_bytes / copy_Bps + kernel_launch_s if output_bytes else 0.0
    return OptionCosts(
        post_forward_s=WALK_S_PER_NODE * nodes + SINK_FORWARD_S + clone_s,
        per_param_s=FIND_UNUSED_PER_PARAM_S,
        end_of_backward_s=FIND_UNUSED_END_OF_BACKWARD_S,
        used_map_bytes=4 * n_param_tensors,
        autograd_nodes=nodes,
        nodes_source=source,
    )
