"""What the torch importer does about two kinds of op the meta device does not run as a GPU does.

Recurrent layers (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``): on the CPU and the meta device ``aten::lstm`` decomposes
into a dozen ops per time step; on a GPU cuDNN runs each layer and direction as one GEMM of the input over
every step, then per step one recurrent GEMM and one fused pointwise kernel (the gates' nonlinearities and the
cell update). ``fused_rnn_work`` gives those kernels and the bytes they move; the FLOPs stay the decomposed
ops' count (the same GEMMs). The recurrent weights (a few MB) stay in L2 across steps and are read once.

Data-dependent shapes (``nonzero``, boolean masks, ``unique``: a mixture of experts routing its tokens): the
meta device has no data, so an op whose output size depends on the values cannot run there.
``data_dependent_message`` is the one line the importer fails with, naming the op.
"""

from __future__ import annotations

from typing import Any

# aten ops whose output shape depends on the input's values
DATA_DEPENDENT_OPS = frozenset({"nonzero", "masked_select", "unique", "_unique2", "unique_consecutive",
                                "unique_dim", "bincount", "repeat_interleave", "masked_scatter", "argwhere",
                                "_local_scalar_dense", "item", "index"})
_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def data_dependent_message(op: str, where: str) -> str:
    """The failure of a forward that ran an op of data-dependent output shape, in one line."""
    return (f"aten::{op}{where} has an output shape that depends on the data (as a mixture of experts' routing "
            "does), which the meta device cannot trace; profile the model on a GPU (ddpsim measure) or route "
            "with fixed shapes (torch grouped_mm over capacity-padded experts)")


def is_data_dependent(op: str) -> bool:
    return op in DATA_DEPENDENT_OPS


def fused_rnn_work(module: Any, input_shape: tuple[int, ...], elt: int) -> tuple[int, float]:
    """(kernels, bytes) of one forward of an ``nn.RNNBase`` on a GPU through cuDNN: per layer and direction, one
    input GEMM over all steps (reads the input and W_ih, writes the gates), then per step one recurrent GEMM
    (reads h, writes the recurrent gates) and one pointwise kernel (reads both gates and c, writes h and c);
    W_hh read once (L2-resident across steps)."""
    batch_first = bool(getattr(module, "batch_first", False))
    if len(input_shape) == 3:
        batch, steps = (input_shape[0], input_shape[1]) if batch_first else (input_shape[1], input_shape[0])
    else:  # unbatched (T, F)
        batch, steps = 1, input_shape[0]
    gates = _GATES.get(str(module.mode), 1) * int(module.hidden_size)
    hidden = int(module.hidden_size)
    dirs = 2 if module.bidirectional else 1
    d_in = int(module.input_size)
    kernels, elems = 0, 0.0
    for _layer in range(int(module.num_layers)):
        for _ in range(dirs):
            kernels += 1 + 2 * steps
            elems += batch * steps * (d_in + gates) + gates * d_in  # input GEMM: x, gates out, W_ih
            elems += gates * hidden  # W_hh, once
            elems += steps * batch * (hidden + gates)  # recurrent GEMM: h in, gates out
            elems += steps * batch * (2 * gates + hidden + 2 * hidden)  # pointwise: both gates, c in; h, c out
        d_in = hidden * dirs
    return kernels, elems * elt
