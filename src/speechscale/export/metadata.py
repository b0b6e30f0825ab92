"""What an exported file says about itself, shared by the exporter and the runtimes: the metadata keys, the metadata
record appended to an ONNX file, and the bounds a streaming step's description must keep."""
from __future__ import annotations

import math
from typing import Any

META_KEY = "speechscale"  # ONNX metadata key / TorchScript extra file stem holding the model description
CRC_KEY = "speechscale.crc32"  # ONNX metadata key: {"bytes": N, "crc32": C} of the N bytes before the metadata


def metadata_tail(entries: dict[str, str]) -> bytes:
    """`entries` as a serialized ModelProto holding only metadata_props (field 14), each a StringStringEntryProto
    (key = field 1, value = field 2): what onnx.ModelProto(metadata_props=...).SerializeToString() gives."""
    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                return bytes(out)

    def field(number: int, data: bytes) -> bytes:  # length-delimited (wire type 2)
        return varint(number << 3 | 2) + varint(len(data)) + data

    return b"".join(field(14, field(1, k.encode()) + field(2, v.encode())) for k, v in entries.items())


MAX_STEP_FRAMES = 4096          # a chunk's or lookahead's frames
MAX_STATE_VALUES = 1 << 24      # one stream's state, all tensors together


def step_problem(spec: Any, inputs: list[str]) -> str | None:
    """What in a streaming step's description is not what export writes (None when it is): a chunk and lookahead
    of frames in range, and a state of named tensor shapes, each an input of the graph, bounded in size (the
    recognizer allocates them per stream)."""
    if not isinstance(spec, dict):
        return "is not a mapping"
    chunk, lookahead, state = spec.get("chunk"), spec.get("lookahead", 0), spec.get("state")
    count = (int,)
    if not isinstance(chunk, count) or isinstance(chunk, bool) or not 1 <= chunk <= MAX_STEP_FRAMES:
        return f"has chunk {str(chunk)[:20]}, not a number of frames in [1, {MAX_STEP_FRAMES}]"
    if not isinstance(lookahead, count) or isinstance(lookahead, bool) or not 0 <= lookahead <= MAX_STEP_FRAMES:
        return f"has lookahead {str(lookahead)[:20]}, not a number of frames in [0, {MAX_STEP_FRAMES}]"
    if not isinstance(state, dict):
        return "has no state mapping"
    total = 0
    for name, shape in state.items():
        if name not in inputs:
            return f"names state {str(name)[:40]!r}, which is not an input of its graph"
        if not isinstance(shape, list) or not shape or not all(
                isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_STATE_VALUES for n in shape):
            return f"gives state {str(name)[:40]!r} the shape {str(shape)[:40]}, not a list of sizes"
        total += math.prod(shape[1:])
    if total > MAX_STATE_VALUES:
        return f"asks for {total} state values a stream, more than {MAX_STATE_VALUES}"
    return None
