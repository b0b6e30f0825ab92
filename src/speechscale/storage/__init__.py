"""I/O shared by training and inference: files on local disk or fsspec URLs, checkpoints, seeds.

The package itself is the file layer (`storage.join`, `storage.write_bytes`, ...); `storage.checkpoints`
reads and writes checkpoints, `storage.seeds` derives seeds and saves generator states. It imports no
other speechscale package, so data, decoding, inference, streaming, the service and export use it without importing training.
"""
from .files import (
           check_writable,
           copy,
           exists,
           is_remote,
           join,
           list_names,
           read_bytes,
           remove,
           sweep_temp,
           write_bytes,
)

__all__ = ["check_writable", "copy", "exists", "is_remote", "join", "list_names", "read_bytes", "remove", "sweep_temp",
           "write_bytes"]
