"""Bucket layouts must equal what PyTorch's own reducer computes for the same tensors and caps."""

import random

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from ddpsim.ddp.buckets import assign_buckets, bucket_layout  # noqa: E402
from ddpsim.scenario.schema import DDPSpec  # noqa: E402
from ddpsim.workload.model import ParamTensor  # noqa: E402

_TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _torch_assignment(params, limits, order=None):
    tensors = [torch.empty(p.numel, dtype=_TORCH_DTYPES[p.dtype]) for p in params]
    if order is None:
        buckets, _ = dist._compute_bucket_assignment_by_size(tensors, limits)
        return [list(b) for b in buckets]
    ordered = [tensors[i] for i in order]
    buckets, _ = dist._compute_bucket_assignment_by_size(ordered, limits, [False] * len(order), list(order))
    return [list(b) for b in buckets]


def _random_params(rng, n, dtypes=("float32",)):
    return [ParamTensor(f"p{i}", rng.choice([1, 7, 1000, 65536, 300_000, 2_500_000]), rng.choice(dtypes)) for i in range(n)]


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("limits", [[1 << 20, 25 << 20], [5 << 20], [1 << 20], [200 << 20], [4096, 8192, 1 << 20]])
def test_initial_assignment_matches_torch(seed, limits):
    rng = random.Random(seed)
    params = _random_params(rng, rng.randint(1, 60), dtypes=("float32", "float16"))
    ours = assign_buckets([p.bytes for p in params], [p.dtype for p in params], limits)
    assert ours == _torch_assignment(params, limits)


@pytest.mark.parametrize("seed", range(20))
def test_rebuild_in_ready_order_matches_torch(seed):
    rng = random.Random(100 + seed)
    params = _random_params(rng, rng.randint(1, 80))
    order = list(range(len(params)))[::-1]
    # ready order is roughly reverse registration order, with local swaps as autograd produces
    for _ in range(len(order) // 4):
        i = rng.randrange(len(order) - 1)
        order[i], order[i + 1] = order[i + 1], order[i]
    limits = [1 << 20, 25 << 20]
    ours = assign_buckets([p.bytes for p in params], [p.dtype for p in params], limits, order=order)
    assert ours == _torch_assignment(params, limits, order)


def test_default_cap_uses_one_mib_first_bucket_but_explicit_cap_does_not():
    # fc.weight + fc.bias of ResNet-50 (8,196,000 bytes) then many small tensors, as in the facts file.
    params = [ParamTensor(f"s{i}", 100_000) for i in range(40)] + [ParamTensor("fc.weight", 2_048_000), ParamTensor("fc.bias", 1000)]
    ready = list(range(len(params)))[::-1]
    default = bucket_layout(params, ready, DDPSpec(bucket_cap_mb=None))
    explicit = bucket_layout(params, ready, DDPSpec(bucket_cap_mb=25))
    assert default[0].param_indices == (41, 40)  # first bucket closes as soon as it passes 1 MiB
    assert default[0].grad_bytes == 8_196_000
    assert explicit[0].grad_bytes > 25 * 1024 * 1024 or len(explicit) == 1
    expected_default = _torch_assignment(params, [1 << 20, 25 << 20], ready)
    assert [list(b.param_indices) for b in default] == expected_default


def test_find_unused_parameters_keeps_reversed_registration_buckets():
    params = [ParamTensor(f"p{i}", 300_000) for i in range(30)]
    ddp = DDPSpec(bucket_cap_mb=None, find_unused_parameters=True)
    layout = bucket_layout(params, list(range(30))[::-1], ddp)
    expected = list(reversed(_torch_assignment(params, [1 << 20, 25 << 20])))
    assert [list(b.param_indices) for b in layout] == expected


def test_fp16_hook_halves_wire_bytes():
    params = [ParamTensor("w", 1000), ParamTensor("b", 10)]
    layout = bucket_layout(params, [1, 0], DDPSpec(bucket_cap_mb=25, comm_hook="fp16"))
    assert layout[0].grad_bytes == 4040 and layout[0].wire_bytes == 2020


def test_first_iteration_is_one_bucket_per_dtype_in_reverse_order():
    import sys

    from ddpsim.ddp.buckets import first_iteration_layout

    params = [ParamTensor("a", 10), ParamTensor("h", 10, "float16"), ParamTensor("b", 2_000_000)]
    layout = first_iteration_layout(params, DDPSpec(bucket_cap_mb=1))
    expected = list(reversed(_torch_assignment(params, [sys.maxsize])))
    assert [list(b.param_indices) for b in layout] == expected
    assert len(layout) == 2
