"""The harness's memory record (ddpsim/measure/memory.py) on the CPU: the activation counter against what
autograd's derivative formulas save (closed forms on tiny models), the model states against the optimizers'
documented states, the profile's ``memory`` object, and the sharded plan's parameter dtype (fp32 models stay
fp32: a bf16 policy casts parameters, not BatchNorm's statistics)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from ddpsim.measure import fsdp, memory, profile  # noqa: E402
from ddpsim.measure.models import ModelSpec, resolve  # noqa: E402

F32 = 4  # bytes


def _counted(model, x):
    with memory.ActivationCounter(model, exclude=memory.model_state_tensors(model)) as counter:
        loss = model(x).sum()  # sum saves nothing for backward
    loss.backward()
    return counter


def test_a_linear_relu_chain_saves_its_input_and_each_relu_output_once():
    # addmm saves its input (mat1) for the weight's gradient and the weight itself (a parameter: not counted);
    # relu saves its result, which the next Linear saves again as its input: one storage
    n, a, b, c = 5, 7, 11, 3
    model = nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, c))
    counter = _counted(model, torch.randn(n, a))
    assert counter.total_bytes == F32 * n * (a + b)
    assert counter.by_layer == {"0": F32 * n * a, "1": F32 * n * b}


def test_a_deeper_tanh_chain_counts_every_hidden_output():
    n, widths = 4, [6, 9, 10, 2]
    layers: list[nn.Module] = []
    for i in range(len(widths) - 1):
        layers += [nn.Linear(widths[i], widths[i + 1]), nn.Tanh()]
    model = nn.Sequential(*layers)
    counter = _counted(model, torch.randn(n, widths[0]))
    # the input, and each tanh's result (tanh saves its output; the next Linear saves that same storage)
    assert counter.total_bytes == F32 * n * sum(widths)
    assert sum(counter.by_layer.values()) == counter.total_bytes


class _Slices(nn.Module):
    def forward(self, x):
        return x[:, :2] * x[:, 2:4]  # mul saves both operands: two views of one storage


def test_views_of_one_storage_count_once_at_the_storage_size():
    x = torch.randn(3, 8, requires_grad=True)
    counter = _counted(nn.Sequential(_Slices()), x)
    assert counter.total_bytes == F32 * 3 * 8


def test_the_counter_changes_nothing_in_the_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))
    x = torch.randn(6, 4)
    model(x).sum().backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    _counted(model, x)
    assert all(torch.equal(a, p.grad) for a, p in zip(plain, model.parameters(), strict=True))


def test_the_states_follow_each_optimizers_documented_state():
    model = nn.Sequential(nn.Linear(10, 20), nn.BatchNorm1d(20), nn.Linear(20, 3))
    params = list(model.parameters())
    p_bytes = F32 * sum(p.numel() for p in params)
    # BatchNorm1d(20): running_mean, running_var (fp32) and num_batches_tracked (int64)
    buffer_bytes = F32 * 20 * 2 + 8
    x = torch.randn(8, 10)
    sgd = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    model(x).sum().backward()
    sgd.step()
    got = memory.state_bytes(model, sgd)
    assert got == {"parameter_bytes": p_bytes, "gradient_bytes": p_bytes, "optimizer_state_bytes": p_bytes,
                   "buffer_bytes": buffer_bytes}
    adamw = torch.optim.AdamW(params)
    adamw.step()
    # exp_avg and exp_avg_sq per parameter, and a one-element fp32 step counter per parameter
    assert memory.state_bytes(model, adamw)["optimizer_state_bytes"] == 2 * p_bytes + F32 * len(params)


def test_tied_parameters_count_once():
    emb = nn.Embedding(50, 8)
    head = nn.Linear(8, 50, bias=False)
    head.weight = emb.weight
    model = nn.ModuleDict({"emb": emb, "head": head})
    assert memory.state_bytes(model, None)["parameter_bytes"] == F32 * 50 * 8


def test_a_cpu_profile_carries_the_memory_record():
    spec = resolve("tiny-mlp")  # Linear(16,32) ReLU Linear(32,32) ReLU Linear(32,8), batch 4, SGD momentum
    prof = profile.profile_model(spec, torch.device("cpu"), iters=1, warmup=0)
    mem = prof["memory"]
    n = spec.batch_size
    p_bytes = F32 * (16 * 32 + 32 + 32 * 32 + 32 + 32 * 8 + 8)
    assert mem["parameter_bytes"] == mem["gradient_bytes"] == mem["optimizer_state_bytes"] == p_bytes
    assert mem["buffer_bytes"] == 0
    assert mem["optimizer"] == "sgd_momentum" and mem["precision"] == "fp32" and mem["batch_size"] == n
    assert mem["activation_method"] == "saved_tensors_hooks"
    by_layer = mem["activation_bytes_by_layer"]
    assert {k: v for k, v in by_layer.items() if k != memory.ROOT_LAYER} == {
        "0": F32 * n * 16, "1": F32 * n * 32, "3": F32 * n * 32}
    assert by_layer[memory.ROOT_LAYER] > 0  # the cross-entropy's saved log-probabilities
    assert sum(by_layer.values()) == mem["activation_bytes"]
    assert mem["peak_allocated_bytes"] is None and mem["peak_reserved_bytes"] is None  # CPU: no allocator stats


def _sum_of_outputs(model, x):
    return model(x).sum()


def test_counting_activations_leaves_no_cycle_that_keeps_the_model_alive():
    # with the cyclic collector off, the model must go as soon as its last reference does: a counter caught in a
    # reference cycle kept each profiled model's parameters and gradients alive into the next model's profile,
    # whose measured peak then held them (4 x H200, 2026-11-28: the MLP alone peaked at 1.65 GB, after ten other
    # profiles in one launch at 3.75 GB)
    import functools
    import gc
    import weakref

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    x = torch.randn(4, 8)
    gc.collect()
    gc.disable()
    try:
        memory.count_activations(model, functools.partial(_sum_of_outputs, model, x))
        gone = weakref.ref(model)
        del model
        assert gone() is None
    finally:
        gc.enable()


def test_a_profiles_peak_leaves_out_what_the_process_held_before_its_model(monkeypatch):
    # the allocator's counters are the process's: bytes held before the model was built (an earlier model's
    # leftovers, another library's buffers) are not this model's step
    cuda = torch.cuda
    monkeypatch.setattr(cuda, "memory_allocated", lambda device=None: 1)
    monkeypatch.setattr(cuda, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(cuda, "max_memory_allocated", lambda device=None: 7_000)
    monkeypatch.setattr(cuda, "max_memory_reserved", lambda device=None: 9_000)
    tracker = memory.PeakTracker(torch.device("cuda", 0), baseline_bytes=2_500)
    with tracker.step():
        pass
    assert tracker.peak_allocated_bytes == 4_500
    assert tracker.peak_reserved_bytes == 9_000  # the allocator's segments are the process's: reported as they are


def test_run_peaks_is_absent_on_the_cpu():
    assert memory.run_peaks(torch.device("cpu"), None, None) is None


def _bn_net():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(2))


def _plain_net():
    return nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))


@pytest.mark.parametrize("build,precision,expected", [
    (_bn_net, "fp32", "fp32"),        # an fp32 model is measured in fp32
    (_plain_net, "fp32", "fp32"),
    (_plain_net, "bf16-amp", "bf16"),  # a bf16-autocast model gets bf16 parameters, as before
    (_bn_net, "bf16-amp", "fp32"),    # ... unless BatchNorm's statistics would stay fp32 beside them
])
def test_the_sharded_plans_auto_parameter_dtype(build, precision, expected):
    spec = ModelSpec("m", build, 2, precision, None, "sgd", "custom")
    assert fsdp.auto_param_dtype(spec) == expected


def test_the_plan_resolves_auto_per_model_and_runs_a_dtype_once():
    auto = {"unet": "fp32", "gpt": "bf16"}
    runs = fsdp.plan(["unet", "gpt"], ["ddp", "zero2"], ["auto", "bf16"], auto)
    assert runs == [("unet", "ddp", "fp32"), ("unet", "zero2", "fp32"), ("unet", "zero2", "bf16"),
                    ("gpt", "ddp", "fp32"), ("gpt", "zero2", "bf16")]


def test_bf16_parameters_asked_for_a_batchnorm_model_are_refused_in_one_line():
    spec = ModelSpec("unet", _bn_net, 2, "fp32", None, "sgd", "custom")
    with pytest.raises(ValueError, match="running_mean.*--param-dtypes auto or fp32"):
        fsdp.refuse_cast_buffers(spec, _bn_net(), "bf16")
    fsdp.refuse_cast_buffers(spec, _bn_net(), "fp32")


class _FakeAllocator:
    """torch.cuda's allocator counters, driven by hand: what RunPeaks reads."""

    def __init__(self):
        self.allocated = 0
        self.peak = 0
        self.reserved = 0

    def alloc(self, n):
        self.allocated += n
        self.peak = max(self.peak, self.allocated)
        self.reserved = max(self.reserved, self.allocated)

    def install(self, monkeypatch):
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "memory_allocated", lambda device=None: self.allocated)
        monkeypatch.setattr(cuda, "max_memory_allocated", lambda device=None: self.peak)
        monkeypatch.setattr(cuda, "max_memory_reserved", lambda device=None: self.reserved)
        monkeypatch.setattr(cuda, "reset_peak_memory_stats", lambda device=None: setattr(self, "peak", self.allocated))
        monkeypatch.setattr(cuda, "synchronize", lambda device=None: None)


def test_a_ddp_runs_peak_is_its_own_resident_bytes_plus_its_rounds_rise(monkeypatch):
    # two configurations alive at once, as run_interleaved keeps them: each run's peak is what it would reach alone
    fake = _FakeAllocator()
    fake.install(monkeypatch)
    device = torch.device("cuda", 0)
    first = memory.RunPeaks(device)
    fake.alloc(1000)  # the first configuration's model, gradients, optimizer states, buckets, batch
    first.built()
    second = memory.RunPeaks(device)
    fake.alloc(300)
    second.built()
    first.begin()
    fake.alloc(500)  # the first's activations, freed by the end of its step
    fake.allocated -= 500
    first.end()
    second.begin()
    fake.alloc(200)
    fake.allocated -= 200
    second.end()
    assert (first.resident_bytes, second.resident_bytes) == (1000, 300)
    assert (first.peak_allocated_bytes, second.peak_allocated_bytes) == (1500, 500)
    assert second.peak_reserved_bytes == 1800  # the process's: the allocator's segments are shared
