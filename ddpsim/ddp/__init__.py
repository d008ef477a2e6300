"""DDP as PyTorch does it: bucket assignment and rebuild, and the per-rank step process."""

from ddpsim.ddp.buckets import Bucket, assign_buckets, bucket_layout

__all__ = ["Bucket", "assign_buckets", "bucket_layout"]
