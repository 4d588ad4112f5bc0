"""A real S3 server for the loopback sources (`server`: SeaweedFS, its state file and address), the shaping
proxies that make it look like remote storage (`proxy`), and a Hugging Face Hub serving dataset repos and storage
buckets from directories (`hub`, for hf:// reads offline)."""

from .proxy import main
from .server import (
    DATA_DIR,
    HUB_BUCKETS,
    HUB_ORG,
    HUB_REPOS,
    LOOPBACK,
    STATE,
    address,
    endpoint,
    hub_address,
    routable_address,
    server_host,
    start,
    stop,
    weed_binary,
)

__all__ = [
    "DATA_DIR",
    "HUB_BUCKETS",
    "HUB_ORG",
    "HUB_REPOS",
    "LOOPBACK",
    "STATE",
    "address",
    "endpoint",
    "hub_address",
    "main",
    "routable_address",
    "server_host",
    "start",
    "stop",
    "weed_binary",
]
