#!/bin/sh
# A Hugging Face mixture-of-experts model on a GPU host (issue #28: MoE imports): a tiny Mixtral built from a
# config.json by ddpsim's harness (hf:), traced at world size 1 by the capture script, so that the trace and the
# importer's meta-device build can be compared. Run by the device tool with .whl/ carried and $OUT set, after
# or without another script; writes $OUT/moe.tar.gz and $OUT/moe.log.
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
[ -d /tmp/site/ddpsim ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/ddpsim-*.whl
export PYTHONPATH=/tmp/site
mkdir -p /tmp/moe && cd /tmp/moe
cat > config.json <<'JSON'
{"model_type": "mixtral", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
 "vocab_size": 1000, "max_position_embeddings": 512}
JSON
for precision in fp32 bf16; do
  echo "== hf:config.json@batch=4@seq=128@precision=$precision"
  timeout 120 python3 -m ddpsim.measure.trace --model "hf:/tmp/moe/config.json@batch=4@seq=128@precision=$precision" \
    --out /tmp/moe/trace-$precision.json.gz --steps 3 --warmup 2 2>&1 | grep -v Warning | tail -5
done > $OUT/moe.log 2>&1
cat $OUT/moe.log
tar czf $OUT/moe.tar.gz -C /tmp/moe .
