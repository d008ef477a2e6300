#!/bin/bash
# One-H200 campaign (2026-12-02): the harness's self-check after the 2026-11-28 memory fixes, then the ten user
# models and the two built-ins profiled again, ONE MODEL PER PROCESS (an earlier model's tensors cannot reach a
# later model's peak), fp32 SGD and bf16 AdamW at two batch sizes each. Run from the repository root with
# OUT=... bash validation/campaigns/remeasure-1gpu.sh; everything it writes is packed into $OUT/*.tar.gz.
set -u
HERE=$PWD
F=$HERE/validation/data/models-2026-11-28/factories
export PYTHONPATH=$F:$HERE NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
W=$OUT/work; mkdir -p $W/models
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
python - > $W/fingerprint.json <<'PY'
import json, subprocess, torch
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip().splitlines()
print(json.dumps({"gpus": smi, "gpu_count": torch.cuda.device_count(), "torch": torch.__version__,
                  "cuda": torch.version.cuda, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                  "cudnn": torch.backends.cudnn.version(), "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                  "cudnn_tf32": torch.backends.cudnn.allow_tf32, "transport": "none (world size 1)"}, indent=1))
PY
cp $W/fingerprint.json $OUT/fingerprint.json
el "fingerprint done"
timeout ${SELFCHECK_S:-130} python -m ddpsim.measure.selfcheck --out $W/selfcheck --budget-s $(( ${SELFCHECK_S:-130} - 20 )) \
  > $W/selfcheck.log 2>&1
echo "selfcheck rc=$?" >> $W/selfcheck.log
cp $W/selfcheck/selfcheck.json $OUT/selfcheck.json 2>/dev/null
el "selfcheck: $(tail -3 $W/selfcheck.log | tr '\n' ' ')"
for m in unet:build mobilenet:build dlrm:build llama:build mlp:build resnet50 convnext:build vgg16:build bert:build \
         vit_s16:build t5:build gpt2-124m; do
  case $m in resnet50) bs="32 64";; gpt2-124m) bs="8 16";;
    *) f=${m%%:*}; bs=$(python -c "import $f; print(*$f.BATCH_SIZES)");; esac
  M=$(for b in $bs; do echo "$m@batch=$b@precision=fp32@optimizer=sgd"; echo "$m@batch=$b@precision=bf16@optimizer=adamw"; done | paste -sd, -)
  name=${m%%:*}
  timeout ${PER_MODEL_S:-45} python -m ddpsim.measure.worker --mode profile --out $W/models/$name \
     --launch-id remeasure_$name --models "$M" --profile-iters 5 --profile-ddp-caps "" \
     --budget-s $(( ${PER_MODEL_S:-45} - 10 )) --quick > $W/models/$name.log 2>&1
  el "$name rc=$?: $(ls $W/models/$name/profiles 2>/dev/null | grep -c json) profiles"
done
cd $W && tar czf $OUT/remeasure.tar.gz . && el "packed $(du -sh $OUT/remeasure.tar.gz)"
