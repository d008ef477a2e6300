#!/bin/sh
# The GPU proof of `ddpsim measure` (issue #25): installs the wheel built from this repo (--no-deps: torch is
# the only thing the GPU host has), writes a model of the user's own into a temporary folder outside the repo,
# and measures it with the default plan (arguments, if any, replace the default models and budget). Run by the device tool from the repo root with .whl/ carried and
# $OUT set; the campaign comes back as $OUT/campaign.tar.gz.
set -e
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/ddpsim-*.whl
mkdir -p /tmp/usermods /tmp/work
# the user's module lives outside the repository and ddpsim: copied to a temporary folder first
cp validation/campaigns/lab_models.py /tmp/usermods/lab_models.py
cd /tmp/work
export PYTHONPATH=/tmp/usermods:/tmp/site
nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, torch.cuda.nccl.version(), transformers.__version__)"
python3 -c "import simpy" 2>/dev/null && echo "simpy present" || echo "simpy absent (as on a user's GPU host)"
if [ $# -eq 0 ]; then
  set -- --model lab_models:decoder@batch=8@precision=bf16@optimizer=adamw --model hf:GPT2Config@batch=8 \
         --model resnet50 --budget 8m
fi
# the device tool returns at most 8 files from $OUT: the campaign is written elsewhere and comes back packed
/tmp/site/bin/ddpsim measure --out /tmp/campaign "$@" 2>&1 | grep -v '^\[worker' | tee $OUT/measure.log | grep -v "^socket_w\|^nvlink_w\|^shm_w" | tail -60
tar czf $OUT/campaign.tar.gz -C /tmp/campaign --exclude campaign.tar.gz .
