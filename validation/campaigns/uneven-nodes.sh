#!/bin/sh
# Uneven nodes on one 4-GPU host (issue #29): even shapes (2x2, 4x1) measured with `ddpsim measure`, the
# calibration's input; then uneven emulated nodes (3+1, 2+1+1: own NCCL_HOSTID per group, sockets between
# groups, NVLink inside) measured by the worker directly, never seen by any calibration. Run by the device
# tool from the repo root with .whl/ carried and $OUT set; everything comes back as $OUT/campaign.tar.gz.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/ddpsim-*.whl || exit 1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/campaign && cd /tmp/campaign
pack() { tar czf $OUT/campaign.tar.gz -C /tmp/campaign . ; }
trap pack EXIT
nvidia-smi -L | tee gpus.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 > driver.txt
python3 -c "import torch; print(torch.__version__, torch.cuda.nccl.version())" | tee torch.txt
/tmp/site/bin/ddpsim measure --out /tmp/campaign/even --model resnet50 --model gpt2-124m --shapes 2x2,4x1 \
    --link-classes nvlink --budget ${EVEN_BUDGET:-250s} 2>&1 | grep -v '^\[worker' | tail -40
for groups in 3,1 2,1,1; do
  label=$(echo $groups | tr , +)
  echo "== uneven $label"
  NCCL_NET=Socket NCCL_IB_DISABLE=1 NCCL_MNNVL_ENABLE=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,TUNING \
  timeout ${UNEVEN_TIMEOUT:-150} python3 -m torch.distributed.run --standalone --nproc_per_node=4 \
    -m ddpsim.measure.worker --mode sweep --out /tmp/campaign/uneven --transport nvlink \
    --launch-id "nvlink_$label" --node-gpus $groups --inter-node-transport socket \
    --models resnet50,gpt2-124m --caps 5,25 --no-timing-run --reference none --steps 15 --rounds 2 \
    --allreduce-budget-s 35 --budget-s 130 2>&1 | grep -v "NCCL INFO" | tail -12
done
# rank 0's NCCL log per launch: the rings and trees NCCL built over uneven nodes
find /tmp/campaign/uneven/logs -name '*_r[123].log' -delete 2>/dev/null
ls -la /tmp/campaign/even /tmp/campaign/uneven
