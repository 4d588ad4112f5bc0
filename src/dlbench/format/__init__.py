"""LeRobot on-disk formats (v2.1 and v3.0): path templates and metadata readers and writers."""

from . import meta, paths
from .meta import (
    read_info,
    require_version,
    video_keys,
)

__all__ = ["meta", "paths", "read_info", "require_version", "video_keys"]
