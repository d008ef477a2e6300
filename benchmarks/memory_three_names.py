"""One model named three ways: Llama 2 7B, batch 2 x 4096, AdamW, no checkpointing, ZeRO-3 (FSDP2) on 128 A100 80 GB
(the PyTorch FSDP blog's setup), as the zoo's ``llama-7b``, an ``hf:`` config.json and a ``torch:`` factory
(ddpsim.measure.llama's LLaMA at 7B). Prints each name's peak per GPU by part and where each part comes from.

    PYTHONPATH=. python benchmarks/memory_three_names.py      # about 4 minutes on two loaded CPU cores
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from ddpsim.loader import scenario_from_dict
from ddpsim.simulation import simulate

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
          "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
          "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "tie_word_embeddings": False}
FACTORY = "from ddpsim.measure.llama import Llama\n\n\ndef build():\n    return Llama(32, 4096, 32, 11008, 32000)\n"


def main() -> None:
    folder = tempfile.mkdtemp()
    with open(os.path.join(folder, "llama2_7b.json"), "w") as f:
        json.dump(CONFIG, f)
    with open(os.path.join(folder, "llama2_7b_factory.py"), "w") as f:
        f.write(FACTORY)
    sys.path.insert(0, folder)
    for name in ("llama-7b", f"hf:{folder}/llama2_7b.json", "torch:llama2_7b_factory:build"):
        start = time.perf_counter()
        result = simulate(scenario_from_dict({
            "workload": {"model": name, "batch_size": 2, "precision": "bf16-amp", "seq_len": 4096,
                         "optimizer": "adamw", "activation_checkpointing": "none"},
            "cluster": {"gpu": "A100", "nodes": 16, "gpus_per_node": 8},
            "parallel": {"strategy": "zero3"}, "simulation": {"mode": "fast", "iterations": 1}}))
        parts = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in result.memory_bytes.items() if k != "total")
        print(f"{name.replace(folder + '/', '')}: {result.memory_bytes['total'] / 2**30:.1f} GiB "
              f"({'fits' if result.fits_in_memory else 'DOES NOT FIT'}; {parts}) in {time.perf_counter() - start:.0f} s")
        print(f"  from: {result.value_sources['memory']}")


if __name__ == "__main__":
    main()
