#!/bin/bash
# probe helper, issue #39: the new probe, then held-out DDP and FSDP2 campaigns, all with `ddpsim measure`
# Ran once (device tool, kind nvidia-h200-x2) from a copy of the tree with convnext.py (/work/campaigns/factories)
# beside it: `bash probe-heldout-pl.sh`; $OUT as the device tool sets it. Data: validation/data/h200x2-*-2026-11-28.
cd "$(dirname "$0")"
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
T0=$(date +%s)
{ nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.max.sm --format=csv; nvidia-smi topo -m;
  python -c "import torch; print('torch', torch.__version__, 'nccl', '.'.join(map(str, torch.cuda.nccl.version())))";
  nproc; date -u; } > $OUT/machine.txt 2>&1
M="--model resnet50 --model convnext:build@batch=32"
python -m ddpsim.measure --out $OUT/probe --plan probe $M --shapes 1x2,2x1 --budget 110s > $OUT/probe.log 2>&1
echo "probe done $(( $(date +%s) - T0 )) s"
python -m ddpsim.measure --out $OUT/heldout --plan default $M --shapes 1x2,2x1 --budget 180s > $OUT/heldout.log 2>&1
echo "heldout done $(( $(date +%s) - T0 )) s"
python -m ddpsim.measure --out $OUT/fsdp --plan sharded --model gpt2-124m --link-classes nvlink --budget 50s > $OUT/fsdp.log 2>&1
echo "fsdp done $(( $(date +%s) - T0 )) s"
cd $OUT && for d in probe heldout fsdp; do rm -f $d/campaign.tar.gz; tar czf $d.tar.gz $d && rm -rf $d; done
ls -la $OUT; tail -25 $OUT/probe.log; tail -30 $OUT/heldout.log; tail -12 $OUT/fsdp.log
