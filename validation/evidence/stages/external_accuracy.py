"""ddpsim against all-reduce and DDP step times others measured (the shared external data folder).

Run: ``python -m validation.evidence.stages.external_accuracy [--data DIR]`` (default: $DDPSIM_EXTERNAL_DIR
or ../shared/external). Every table says what was fitted on which rows; errors are reported only on
rows no fit used. Error = predicted / measured - 1; bias < 0 means ddpsim predicts too fast.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from validation import external as ext
from validation.evidence.stages import printed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="folder of the external CSVs")
    args = parser.parse_args(argv)
    data = args.data
    if not ext.available(data):
        print(f"external data not found in {data or ext.default_dir()}", file=sys.stderr)
        return 1
    # the fitters may warn about overflow on degenerate starts; the tables show the fit's own error
    warnings.simplefilter("ignore", RuntimeWarning)
    print("DGX-1V NVLink rings over GPUs 0..n-1 (n=2..8):", [ext.dgx1_nvlink_rings(n) for n in range(2, 9)])
    print()
    print(ext.format_table("1a. single node, uncalibrated (datasheet scenario), sizes 1 MiB..1 GiB (2^k)",
                           ext.single_node_uncalibrated()))
    print(ext.format_table("1a'. same, algorithm forced to ring (diagnostic: NCCL rings inside a node)",
                           ext.single_node_uncalibrated(algorithm="ring")))
    print(ext.format_table("1a''. A100 single node, Echo nccl-tests (Azure NDv4), uncalibrated",
                           ext.single_node_uncalibrated(source="echo")))
    print(ext.format_table("1b. single node, calibrated on 2+8 GPUs (fit_link_class), held-out 3..7 GPUs",
                           ext.single_node_calibrated()))
    print()
    print(ext.format_table("2a. multi-node A100 (Echo, NDv4 8x200G rails), uncalibrated, sizes >= 1 MiB",
                           ext.multi_node_uncalibrated()))
    print(ext.format_table("2a'. same, algorithm forced to ring (diagnostic)",
                           ext.multi_node_uncalibrated(algorithm="ring")))
    for algorithm in ("auto", "ring"):
        stats, info = ext.multi_node_calibrated(algorithm=algorithm)
        print(ext.format_table(
            f"2b. calibrated ({algorithm}): intra fit on Echo 2/4/8-GPU single-node rows, NIC scale on 16 GPUs, "
            f"held-out 32..128 (intra busbw {info['intra_busbw_GBps']:.0f} GB/s, scale {info['nic_scale']:.2f}, "
            f"16-GPU fit error {info['fit_mean_error_16_pct']:.1f}%)", stats))
    print()
    for nvls, title in ((True, "3. H100, uncalibrated, NVLink SHARP as NCCL's default (nvls: auto), sizes >= 1 MiB"),
                        (False, "3'. same with nvls: off (diagnostic: NCCL_NVLS_ENABLE=0)")):
        stats, detail = ext.h100_uncalibrated(nvls=nvls)
        print(ext.format_table(title, stats))
        print(f"  {'case':<44} {'MiB':>6} {'meas busbw':>10} {'pred busbw':>10}  choice")
        for label, size, measured, predicted, choice in detail:
            if size >> 20 in (1, 16, 64, 256, 1024, 2048, 8192):
                print(f"  {label:<44} {size >> 20:>6} {measured:>10.0f} {predicted:>10.0f}  {choice}")
    print()
    efficiency, comparisons, diffs = ext.ddp_benchmark()
    print(f"4. DDP ResNet-50 b32 fp32, DGX-1V (PyTorch DDP benchmark), p50, default 25 MB cap; "
          f"compute_efficiency {efficiency:.3f} fitted so the 1-GPU step = measured 1-GPU (no DDP)")
    print(f"  {'GPUs':>5} {'measured s':>11} {'predicted s':>12} {'error %':>8}")
    for c in comparisons:
        print(f"  {c.gpus:>5} {c.measured_s:>11.3f} {c.predicted_s:>12.4f} {c.error_pct:>+8.1f}")
    print("  bucket_cap_mb=1 vs 25 (negative = 1 MB slower)")
    print(f"  {'GPUs':>5} {'pct':>4} {'measured %':>11} {'predicted %':>12}  same sign")
    for d in diffs:
        print(f"  {d.gpus:>5} {d.percentile:>4} {d.measured_diff_pct:>+11.1f} {d.predicted_diff_pct:>+12.2f}  {d.same_sign}")
    return 0



def run() -> str:
    """The stage's output (validation/reports/external-accuracy/output.txt): what the benchmark printed."""
    return printed(lambda: main([]), __name__)

if __name__ == "__main__":
    raise SystemExit(main())
