#!/bin/bash
# harness-mem GPU campaign (2026-11-28): selfcheck, world-size-1 profiles with memory, sharded U-Net.
# Run from .gpu/harness-mem (ddpsim/ and factories/ beside this script). Writes under $OUT.
set -u
HERE=$PWD
export PYTHONPATH=$HERE/factories:$HERE NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
W=$OUT/work; mkdir -p $W
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
python - > $OUT/fingerprint.json <<'PY'
import json, subprocess, torch
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip().splitlines()
topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True).stdout
print(json.dumps({"gpus": smi, "gpu_count": torch.cuda.device_count(), "torch": torch.__version__,
                  "cuda": torch.version.cuda, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                  "cudnn": torch.backends.cudnn.version(), "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                  "cudnn_tf32": torch.backends.cudnn.allow_tf32, "topo": topo}, indent=1))
PY
el "fingerprint done"
timeout 150 python -m ddpsim.measure.selfcheck --out $W/selfcheck --budget-s 125 > $W/selfcheck.log 2>&1
echo "selfcheck rc=$?" >> $W/selfcheck.log
cp $W/selfcheck/selfcheck.json $OUT/selfcheck.json 2>/dev/null
el "selfcheck: $(tail -2 $W/selfcheck.log | tr '\n' ' ')"
# world-size-1 profiles: ddpsim measure's profile launch, one process per GPU, half the models each
A="unet:build mobilenet:build dlrm:build llama:build mlp:build resnet50"
B="convnext:build vgg16:build bert:build vit_s16:build t5:build gpt2-124m"
names() {  # model -> its two batch sizes x (fp32 SGD, bf16 AdamW)
  for m in $1; do
    case $m in resnet50) bs="32 64";; gpt2-124m) bs="8 16";;
      *) f=${m%%:*}; bs=$(python -c "import $f; print(*$f.BATCH_SIZES)");; esac
    for b in $bs; do echo "$m@batch=$b@precision=fp32@optimizer=sgd"; echo "$m@batch=$b@precision=bf16@optimizer=adamw"; done
  done | paste -sd, -
}
MA=$(names "$A"); MB=$(names "$B"); mkdir -p $W/models
el "profiles: $MA | $MB"
for g in 0 1; do
  M=$MA; [ $g = 1 ] && M=$MB
  CUDA_VISIBLE_DEVICES=$g timeout 110 python -m ddpsim.measure.worker --mode profile --out $W/models/gpu$g \
     --launch-id models_gpu$g --models "$M" --profile-iters 5 --profile-ddp-caps "" --budget-s 95 --quick \
     > $W/models/gpu$g.log 2>&1 &
done
wait
el "profiles done: $(ls $W/models/gpu*/profiles 2>/dev/null | grep -c json) files"
timeout 75 python -m ddpsim.measure --out $W/sharded --plan sharded --model unet:build@batch=8 \
   --link-classes nvlink --budget 60s > $W/sharded.log 2>&1
el "sharded rc=$?: $(grep -E 'unet' $W/sharded.log | tail -4 | tr '\n' ' ')"
cd $W && tar czf $OUT/selfcheck.tar.gz selfcheck selfcheck.log && tar czf $OUT/models.tar.gz models \
  && tar czf $OUT/sharded.tar.gz sharded sharded.log
el "packed: $(du -sh $OUT/*.tar.gz | tr '\n' ' ')"
