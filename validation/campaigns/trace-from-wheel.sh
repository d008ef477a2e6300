#!/bin/sh
# `model: trace:PATH` on a GPU host (issue #28): a torch.profiler trace of one model predicts its DDP step.
# From the wheel built from this repo (--no-deps: torch is the only thing the GPU host has), on all the host's GPUs:
#   1. the model traced at world size 1 with ddpsim's capture script (python -m ddpsim.measure.trace): the input;
#   2. the same model traced inside DDP on every GPU (torchrun): DDP's own all-reduces, the trace's check;
#   3. `ddpsim measure` of the same model (all-reduce sweeps, DDP runs at caps 5/25/50, the harness's own
#      profile): what the prediction is compared with.
# Run by the device tool from the repo root with .whl/ carried and $OUT set, timeout_s 600; arguments: MODEL
# (default gpt2-124m) and the most seconds `ddpsim measure` may take (default: what is left of 480 s after the
# traces, so that the whole command ends inside 10 minutes). Each part that fails is logged, the next still runs.
# Back under $OUT (6 files): traces.tar.gz, campaign.tar.gz, trace.log, measure.log, host.txt, summary.txt.
#
# Then, locally (D = validation/data/<host>-trace-<date>, with both archives unpacked into it):
#   mkdir -p $D/traces && tar xzf traces.tar.gz -C $D/traces && tar xzf campaign.tar.gz -C $D
#   python -m ddpsim.workload.trace $D/traces/trace-w1.json.gz              # what the trace gives, per step
#   python -m ddpsim.workload.trace $D/traces/trace-ddp.rank0.json.gz       # inside DDP: the all-reduce check
#   ddpsim calibrate $D --calibration-caps 5,50 --out $D/cal.json           # links and overheads, caps 5 and 50
#   ddpsim validate $D --calibration $D/cal.json                            # cap 25 held out, harness profile
#   cp -r $D /tmp/from-trace && python -m ddpsim.workload.trace $D/traces/trace-w1.json.gz --model gpt2-124m \
#       --profile-out /tmp/from-trace/profiles/gpt2-124m.json
#   ddpsim validate /tmp/from-trace --calibration $D/cal.json              # the same runs, predicted from the trace
# and a user's scenario: `model: trace:traces/trace-w1.json.gz`, `calibration: cal.json` in $D, `ddpsim run`.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
START=$(date +%s)
MODEL=${1:-gpt2-124m}
MAX_MEASURE_S=${2:-420}
T=${TRACE_TMP:-/tmp/trace-from-wheel}  # scratch: the wheel's install, the traces, the campaign
python3 -m pip install -q --no-index --no-deps --no-compile --target $T/site .whl/ddpsim-*.whl || exit 1
export PYTHONPATH=$T/site${PYTHONPATH:+:$PYTHONPATH}  # a user module folder set by the caller stays on the path
mkdir -p $T/traces $T/campaign && cd $T
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
} > $OUT/host.txt 2>&1
NGPU=$(nvidia-smi -L | grep -c '^GPU')
cat $OUT/host.txt

echo "== trace at world size 1: $MODEL" | tee $OUT/trace.log
timeout 150 python3 -m ddpsim.measure.trace --model "$MODEL" --out $T/traces/trace-w1.json.gz --steps 6 --warmup 5 \
  >> $OUT/trace.log 2>&1 || echo "world-size-1 trace FAILED (rc $?)" | tee -a $OUT/trace.log
if [ "$NGPU" -ge 2 ]; then
  echo "== trace inside DDP on $NGPU GPUs: $MODEL" | tee -a $OUT/trace.log
  timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node "$NGPU" -m ddpsim.measure.trace \
    --model "$MODEL" --out $T/traces/trace-ddp.json.gz --steps 4 --warmup 5 >> $OUT/trace.log 2>&1 \
    || echo "DDP trace FAILED (rc $?)" | tee -a $OUT/trace.log
fi
grep -v USDT $OUT/trace.log | tail -8
ls -la $T/traces | tee -a $OUT/trace.log
tar czf $OUT/traces.tar.gz -C $T/traces .

BUDGET=$((480 - $(date +%s) + START))
[ "$BUDGET" -gt "$MAX_MEASURE_S" ] && BUDGET=$MAX_MEASURE_S
[ "$BUDGET" -lt 120 ] && BUDGET=120
echo "== ddpsim measure $MODEL (budget ${BUDGET}s)"
$T/site/bin/ddpsim measure --out $T/campaign --model "$MODEL" --link-classes nvlink --budget "${BUDGET}s" 2>&1 \
  | grep -v '^\[worker' > $OUT/measure.log || true
grep -v "^socket_w\|^nvlink_w\|^shm_w" $OUT/measure.log | tail -25
tar czf $OUT/campaign.tar.gz -C $T/campaign --exclude campaign.tar.gz .

# what the importer reads from the traces, on the host (numpy comes with torch's usual installs; if it is
# missing the summary is left to the local run)
{ for t in $T/traces/trace-w1.json.gz $T/traces/trace-ddp.rank0.json.gz; do
    [ -f "$t" ] && timeout 30 python3 -m ddpsim.workload.trace "$t" | head -40
  done
  python3 -c "
import json
runs = [json.loads(l) for l in open('$T/campaign/ddp_runs.jsonl')]
for r in runs:
    print(r.get('model'), r.get('transport'), 'w', r.get('world_size'), 'cap', r.get('bucket_cap_mb'), r.get('status'),
          'step_ms', round((r.get('step_s_median') or 0) * 1e3, 2), 'nosync_ms', round((r.get('nosync_step_s_median') or 0) * 1e3, 2))
" ; } > $OUT/summary.txt 2>&1
cat $OUT/summary.txt | tail -30
ls -la $OUT
