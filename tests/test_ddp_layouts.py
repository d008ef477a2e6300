"""Bucket layouts of imported models against real DDP: gloo, world size 1, on the CPU.

Each expected layout is what ``DistributedDataParallel`` itself built for the same model and cap:
one backward fills its gradient-ready order, the next forward rebuilds the buckets in that order,
and the one after logs them (``rebuilt_per_bucket_param_indices``, ``rebuilt_bucket_sizes``).
ddpsim gets the same model only through ``torch:fixtures_models:<factory>`` on the meta device.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import fixtures_models as fm  # noqa: E402  (pytest puts tests/ on sys.path)
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from ddpsim.ddp.buckets import Bucket, bucket_layout  # noqa: E402
from ddpsim.errors import ScenarioError  # noqa: E402
from ddpsim.hardware.catalog import get_gpu  # noqa: E402
from ddpsim.hardware.compute import step_compute  # noqa: E402
from ddpsim.scenario.schema import DDPSpec  # noqa: E402
from ddpsim.workload.model import Workload  # noqa: E402
from ddpsim.workload.torch_import import import_torch_model  # noqa: E402

MODELS = ("bn_convnet", "frozen_convnet", "transformer_encoder", "mha_vit", "gpt_decoder", "tied_weights",
          "mixed_dtype", "lazy_mlp")
CAPS = (1, 5, 25, None)  # MiB; None is DDP's default: 25 MiB with a 1 MiB first bucket
BATCH, SEQ = 2, 4  # the order gradients become ready does not depend on sizes


@pytest.fixture(scope="module")
def gloo(tmp_path_factory: pytest.TempPathFactory) -> Any:
    if dist.is_initialized():
        pytest.skip("a process group is already initialised")
    store = dist.FileStore(str(tmp_path_factory.mktemp("gloo") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@functools.cache
def imported(factory: str) -> Workload:
    return import_torch_model(f"fixtures_models:{factory}", BATCH, "fp32", SEQ)


def ddpsim_buckets(factory: str, cap: float | None, find_unused: bool = False) -> list[Bucket]:
    workload = imported(factory)
    compute = step_compute(workload, get_gpu("H100-SXM"))
    return bucket_layout(workload.params, compute.ready_order,
                         DDPSpec(bucket_cap_mb=cap, find_unused_parameters=find_unused), model=workload.name)


def real_model(factory: str) -> tuple[Any, Any]:
    torch.manual_seed(0)
    model = getattr(fm, factory)()
    x = model.example_input(BATCH, SEQ)
    if any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in model.parameters()):
        with torch.no_grad():
            model(x)  # what DDP asks users of lazy modules to do first
    return model, x


def ddp_param_names(ddp: Any) -> list[str]:
    """Names of the tensors the reducer indexes, in its order (a shared tensor under its first name)."""
    params, _ = ddp._build_params_for_reducer()
    name_of: dict[Any, str] = {}
    for module_name, module in ddp.module.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            name_of.setdefault(param, f"{module_name}.{param_name}" if module_name else param_name)
    return [name_of[p] for p in params]


def parse(field: str) -> list[list[int]]:
    return [[int(i) for i in bucket.split()] for bucket in field.split(", ")]


@pytest.mark.parametrize("factory", MODELS)
@pytest.mark.parametrize("cap", CAPS)
def test_rebuilt_buckets_equal_real_ddp(gloo: Any, factory: str, cap: float | None) -> None:
    model, x = real_model(factory)
    ddp = DDP(model, bucket_cap_mb=cap)
    ddp(x).float().sum().backward()  # iteration 1 records the order gradients became ready
    ddp(x)  # rebuilds the buckets in that order
    ddp(x)  # logs the rebuilt layout
    data = ddp._get_ddp_logging_data()
    expected = parse(data["rebuilt_per_bucket_param_indices"])
    expected_bytes = [int(size) for size in data["rebuilt_bucket_sizes"].split(", ")]

    workload = imported(factory)
    assert [p.name for p in workload.params] == ddp_param_names(ddp)
    buckets = ddpsim_buckets(factory, cap)
    assert [list(b.param_indices) for b in buckets] == expected
    assert [b.grad_bytes for b in buckets] == expected_bytes


def test_the_layouts_are_not_trivial() -> None:
    """The caps split the models: several buckets, both dtypes, one model above 25 MiB."""
    assert len(ddpsim_buckets("gpt_decoder", 1)) > 10
    assert imported("gpt_decoder").grad_bytes > 25 << 20
    assert {imported("mixed_dtype").params[i].dtype for b in ddpsim_buckets("mixed_dtype", 25)
            for i in b.param_indices} == {"float32", "bfloat16"}
    vit = imported("mha_vit")
    names = [vit.params[i].name for i in vit.grad_ready_order]
    # out_proj is used inside MultiheadAttention without being called; its gradient comes first
    assert names.index("blocks.2.attn.out_proj.weight") < names.index("blocks.2.attn.in_proj_weight")
    assert names.index("blocks.2.ln1.weight") < names.index("blocks.2.ln1.bias")  # weight first


def test_unused_parameters_are_refused_as_ddp_refuses_them(gloo: Any) -> None:
    model, x = real_model("with_unused")
    ddp = DDP(model)
    ddp(x).sum().backward()
    with pytest.raises(RuntimeError, match="find_unused_parameters"):
        ddp(x)
    with pytest.raises(ScenarioError, match="find_unused_parameters") as err:
        ddpsim_buckets("with_unused", None)
    message = str(err.value)
    assert "\n" not in message and "fixtures_models:with_unused" in message
    assert "(extra, unused.weight, unused.bias)" in message


@pytest.mark.parametrize("cap", CAPS)
def test_unused_parameters_with_find_unused_parameters(gloo: Any, cap: float | None) -> None:
    """No rebuild: the initial buckets (reverse registration order) stay; read them through a comm hook."""
    model, x = real_model("with_unused")
    ddp = DDP(model, bucket_cap_mb=cap, find_unused_parameters=True)
    params, _ = ddp._build_params_for_reducer()
    index = {id(p): i for i, p in enumerate(params)}
    seen: dict[int, list[int]] = {}

    def record(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks these annotations: none or GradBucket
        seen[bucket.index()] = [index[id(p)] for p in bucket.parameters()]
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    ddp.register_comm_hook(None, record)
    for _ in range(2):
        ddp(x).sum().backward()
    expected = [seen[i] for i in range(len(seen))]
    assert [list(b.param_indices) for b in ddpsim_buckets("with_unused", cap, find_unused=True)] == expected


@pytest.mark.parametrize("cap", (0.001, 1, None))
def test_unused_parameters_with_static_graph(gloo: Any, cap: float | None) -> None:
    """static_graph accepts unused parameters and rebuilds (after its second iteration) with them last."""
    model, x = real_model("with_unused")
    ddp = DDP(model, bucket_cap_mb=cap, static_graph=True)
    for _ in range(3):
        ddp(x).sum().backward()
    ddp(x)
    expected = parse(ddp._get_ddp_logging_data()["rebuilt_per_bucket_param_indices"])
    workload = imported("with_unused")
    compute = step_compute(workload, get_gpu("H100-SXM"))
    buckets = bucket_layout(workload.params, compute.ready_order, DDPSpec(bucket_cap_mb=cap, static_graph=True))
    assert [list(b.param_indices) for b in buckets] == expected


def test_unused_parameters_are_ready_with_the_first_gradient() -> None:
    """DDP marks unused parameters ready when the first gradient hook fires."""
    workload = imported("with_unused")
    names = [p.name for p in workload.params]
    unused = {names.index(n) for n in ("unused.weight", "unused.bias", "extra")}
    assert set(workload.unused_params) == unused
    compute = step_compute(workload, get_gpu("H100-SXM"))
    first = compute.backward_segments[0][1]
    assert set(first[:len(unused)]) == unused and first[len(unused)] == names.index("b.bias")
    assert not unused & set(compute.ready_order)


@pytest.mark.parametrize("seed", range(10))
def test_rebuild_with_mixed_dtypes_matches_the_reducer(seed: int) -> None:
    """The reducer appends its leftover open buckets (one per dtype) in the reverse of the order it
    first saw their dtypes; compare with its own assignment for shuffled mixed-dtype orders."""
    import random

    from ddpsim.ddp.buckets import assign_buckets

    torch_dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
                    "float64": torch.float64}
    rng = random.Random(seed)
    kinds = rng.choice([("float32", "bfloat16"), ("float32", "float16", "bfloat16"), tuple(torch_dtypes)])
    n = rng.randint(2, 40)
    numels = [rng.choice([1, 7, 1000, 65536, 300_000]) for _ in range(n)]
    dtypes = [rng.choice(kinds) for _ in range(n)]
    order = list(range(n))
    rng.shuffle(order)
    for limits in ([1 << 20, 25 << 20], [5 << 20], [1 << 30]):
        tensors = [torch.empty(numels[i], dtype=torch_dtypes[dtypes[i]]) for i in order]
        expected, _ = dist._compute_bucket_assignment_by_size(tensors, limits, [False] * n, order)
        sizes = [numels[i] * torch_dtypes[dtypes[i]].itemsize for i in range(n)]
        assert assign_buckets(sizes, dtypes, limits, order=order) == [list(b) for b in expected]
