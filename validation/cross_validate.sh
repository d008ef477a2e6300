#!/bin/sh
# Re-measure the cross-validated accuracy tables of the README ("Accuracy as measured") from the
# committed campaigns: each report's validation.md lands in validation/reports/<split>/.
# About 70 minutes of CPU on a 2-core machine. Exit status: that of the last report (1 = past tolerance).
set -u
D=validation/data
R=validation/reports
report() {
    name=$1; shift
    tmp=$(mktemp -d)
    ddpsim validate "$@" --jobs 2 --out "$tmp/out" > /dev/null
    status=$?
    mkdir -p "$R/$name" && cp "$tmp/out/validation.md" "$R/$name/validation.md"
    rm -rf "$tmp"
    echo "$name: exit $status"
}
report cross-host $D/h200x4-2026-11-26 $D/h200x4-2026-11-26b $D/h200x2-2026-11-26 $D/h100x2-2026-11-26 --cross host
report cross-launch $D/h200x4-2026-11-26 $D/h200x4-2026-11-26b --cross launch
report cross-model $D/h200x4-2026-11-26 --cross model
report cross-model-k $D/h100x4-overlap-2026-11-27 --cross model
report cross-model-fitted-models-only $D/h200x4-2026-11-26 --cross model --comm-terms-fitted-models-only
report cross-model-k-fitted-models-only $D/h100x4-overlap-2026-11-27 --cross model --comm-terms-fitted-models-only
report cross-model-options $D/h200x4-options-2026-11-26 --cross model --calibration-caps all
report cross-launch-multinode $D/h200x4-multinode-2026-11-26 --cross launch --calibration-caps all
report cross-launch-multinode-u $D/h100x4-multinode-2026-11-27d --cross launch --calibration-caps all
report cross-launch-multinode-v $D/h200x4-multinode-2026-11-27b --cross launch --calibration-caps all
report heldout-multinode-uvw $D/h100x4-multinode-2026-11-27d $D/h200x4-multinode-2026-11-27b $D/h200x4-multinode-2026-11-27c --calibration validation/calibration-h200x4-multinode.json
report heldout-h100x4-multinode $D/h100x4-multinode-2026-11-26 $D/h100x4-multinode-2026-11-26b $D/h100x4-multinode-2026-11-26d --calibration validation/calibration-h200x4-multinode.json
report heldout-h100x4-options $D/h100x4-options-2026-11-26 $D/h100x4-options-2026-11-26b $D/h100x4-options-2026-11-26c $D/h100x4-options-2026-11-26d $D/h100x4-options-2026-11-26e --calibration validation/calibration-h200x4.json
report heldout-h100-options-fgh $D/h100x4-options-2026-11-26f $D/h100x4-options-2026-11-26f-w2 $D/h100x4-options-2026-11-26g $D/h100x4-options-2026-11-26g-w2 $D/h100x4-options-2026-11-26h $D/h100x4-options-2026-11-26h-w2 --calibration validation/calibration-h200x4.json
report heldout-h200x4-options $D/h200x4-options-2026-11-26 --calibration validation/calibration-h200x4.json
report cross-host-options-h200 $D/h200x4-options-2026-11-26 $D/h200x4-options-2026-11-27 $D/h200x4-options-2026-11-27b --cross host --calibration-caps all
report heldout-models-m2 $D/h100x4-models-2026-11-27 --calibration validation/calibration-h200x4.json
report heldout-mlp-wide $D/h100x4-mlp-wide-2026-11-27 --calibration validation/calibration-h200x4.json
report heldout-options-xy $D/h200x4-options-2026-11-27 $D/h200x4-options-2026-11-27b --calibration validation/calibration-h200x4.json
report heldout-shipped-h100-multinode $D/h100x4-multinode-2026-11-27 $D/h100x4-multinode-2026-11-27b $D/h100x4-multinode-2026-11-27c $D/h100x4-multinode-2026-11-27e --calibration validation/calibration-h100x4-multinode.json
