#!/bin/sh
# FSDP2 / ZeRO steps and peak memory on a 2-GPU host (issue #26), from the wheel built from this repo:
# DDP, ZeRO-2 and ZeRO-3 (FSDP2 fully_shard, bf16 params, fp32 reduce) of GPT-2 and a 1.2 B LLaMA-style
# model over NVLink, and GPT-2 over sockets (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1). Run by the device tool
# from the repo root with .whl/ carried; fsdp_runs.jsonl and the logs come back under $OUT.
set -e
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/ddpsim-*.whl
export PYTHONPATH=/tmp/site
mkdir -p /tmp/fsdp && cd /tmp/fsdp
nvidia-smi -L
run() {  # transport, models, steps
  python3 -m torch.distributed.run --standalone --nproc-per-node 2 -m ddpsim.measure.fsdp --out /tmp/fsdp \
    --models "$2" --strategies ddp,zero2,zero3 --param-dtypes bf16 --steps "$3" --warmup 3 --transport "$1" \
    --launch-id "fsdp_$1" > "$OUT/fsdp_$1.log" 2>&1 || echo "launch $1 failed: $(tail -5 $OUT/fsdp_$1.log)"
}
run nvlink gpt2-124m,llama-1b 15
NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 run socket gpt2-124m 8
cp /tmp/fsdp/fsdp_runs.jsonl $OUT/
python3 -c "
import json
for r in map(json.loads, open('/tmp/fsdp/fsdp_runs.jsonl')):
    print(r.get('transport'), r.get('model'), r.get('strategy'), r.get('status'),
          round((r.get('step_s_median') or 0) * 1e3, 1), 'ms', round((r.get('peak_memory_bytes') or 0) / 2**30, 2), 'GiB',
          (r.get('error') or '')[-200:])
"
