"""Runs in the peer environment: give a v3.0 dataset LeRobot 0.6.1's language columns, as its annotation pipeline
(`lerobot-annotate`) leaves them, in LeRobot's own Arrow types and feature entries.

    python -m dlbench.peer.lerobot_language ROOT

Every row gets `language_persistent` (the subtask active at its time: one of two per episode, switching halfway)
and `language_events` (an interjection on an episode's first row, none elsewhere); meta/info.json gains LeRobot's
`language_feature_info()`. The data files are rewritten in place, one row group per episode, as LeRobot writes them.
"""

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def main(root: str) -> None:
    from lerobot.datasets.io_utils import write_table_one_row_group_per_episode
    from lerobot.datasets.language import (
        LANGUAGE_EVENTS,
        LANGUAGE_PERSISTENT,
        language_events_arrow_type,
        language_feature_info,
        language_persistent_arrow_type,
    )

    for path in sorted(Path(root).glob("data/*/*.parquet")):
        table = pq.read_table(path)
        eps, frames = table.column("episode_index").to_pylist(), table.column("frame_index").to_pylist()
        times = table.column("timestamp").to_pylist()
        length = {e: eps.count(e) for e in set(eps)}
        persistent, events = [], []
        for e, f, t in zip(eps, frames, times):
            half = length[e] // 2
            rows = [{"role": "assistant", "content": f"episode {e}: reach", "style": "subtask", "timestamp": 0.0,
                     "camera": None, "tool_calls": None}]  # fmt: skip
            if f >= half:
                rows.append({"role": "assistant", "content": f"episode {e}: grasp", "style": "subtask",
                             "timestamp": float(half / 30), "camera": None, "tool_calls": None})  # fmt: skip
            persistent.append(rows)
            events.append([{"role": "user", "content": f"start episode {e} at {t:.2f}", "style": "interjection",
                            "camera": None, "tool_calls": None}] if f == 0 else [])  # fmt: skip
        table = table.append_column(LANGUAGE_PERSISTENT, _array(persistent, language_persistent_arrow_type()))
        table = table.append_column(LANGUAGE_EVENTS, _array(events, language_events_arrow_type()))
        write_table_one_row_group_per_episode(table, path)
    info_path = Path(root) / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["features"].update({k: {**v, "shape": list(v["shape"])} for k, v in language_feature_info().items()})
    info_path.write_text(json.dumps(info, indent=4))
    print(json.dumps({"root": root, "language": [LANGUAGE_PERSISTENT, LANGUAGE_EVENTS]}))


def _storage(t: pa.DataType) -> pa.DataType:
    """`t` with each extension type (LeRobot's JSON) replaced by its storage type: pyarrow builds those from Python
    values, not the extension types themselves."""
    if isinstance(t, pa.BaseExtensionType):
        return t.storage_type
    if pa.types.is_list(t):
        return pa.list_(_storage(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _storage(f.type), f.nullable) for f in t])
    return t


def _array(values: list, t: pa.DataType) -> pa.Array:
    return pa.array(values, _storage(t)).cast(t)


if __name__ == "__main__":
    main(sys.argv[1])
