#!/usr/bin/env bash
# Create (once) the LeRobot peer environment: Python 3.12 + lerobot[dataset]==0.6.1 in .venv-lerobot, with
# lerobot-lancedb==0.3.1 (its lerobot-lance-doctor is compared with `dlbench validate`; its Lance loader is a peer)
# and Ray Data 2.60 (its read_lerobot decodes through this LeRobot: the ray_data loader) and Daft 0.7.26 (its
# daft.datasets.lerobot: the daft_data loader; it holds pyarrow below 26), both best effort, added to an older
# environment too.
# LeRobot 0.5+ needs Python >= 3.12; its pins (torch<2.12, torchcodec<0.12, datasets<5, ...) clash with dlbench's,
# so it lives in its own venv and dlbench drives it as a subprocess. About 100 s and 5.4 GB.
# Python 3.12 is looked up as: $PYTHON312, python3.12 on PATH, then pyenv.
# Named peers (config.yaml `peers:`, built by the workflow's peer_env rule) set PEER_VENV=.peers/NAME and
# PEER_REQUIREMENT to a pip requirement for LeRobot ("lerobot==0.6.0", a checkout's path, a wheel's path).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${PEER_VENV:-.venv-lerobot}
REQUIREMENT=${PEER_REQUIREMENT:-lerobot==0.6.1}
LANCE=lerobot-lancedb==0.3.1
RAY="ray[data]==2.60.0"
DAFT=daft==0.7.26
READY="$VENV/.dlbench-peer-ready"  # written last: dlbench uses the environment only when this marker exists
# the default environment must hold lerobot-lancedb; a named peer holds it only where that LeRobot admits it
CHECK="import lerobot.datasets.lerobot_dataset, psutil"
[ -n "${PEER_REQUIREMENT:-}" ] || CHECK="$CHECK, lerobot_lancedb"
if [ -f "$READY" ] && "$VENV/bin/python" -c "$CHECK" 2>/dev/null; then
  # s3fs (lance_map runs on S3 sources read the v3.0 copy through it) is added to an older environment, not rebuilt
  "$VENV/bin/python" -c "import s3fs" 2>/dev/null ||
    "$VENV/bin/pip" install -q "s3fs==$("$VENV/bin/python" -c 'import fsspec; print(fsspec.__version__)')"
  [ -n "${PEER_REQUIREMENT:-}" ] || "$VENV/bin/python" -c "import ray.data" 2>/dev/null ||
    "$VENV/bin/pip" install -q "$RAY" || echo "peer-env: $RAY did not install; ray_data runs will be skipped" >&2
  [ -n "${PEER_REQUIREMENT:-}" ] || "$VENV/bin/python" -c "import daft.datasets.lerobot" 2>/dev/null ||
    "$VENV/bin/pip" install -q "$DAFT" || echo "peer-env: $DAFT did not install; daft_data runs will be skipped" >&2
  exit 0
fi
is312() { [ -n "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }
PY=""
for c in "${PYTHON312:-}" "$(command -v python3.12 || true)" \
         "$( (pyenv root 2>/dev/null || echo "$HOME/.pyenv") | head -n1)"/versions/3.12*/bin/python; do
  if is312 "$c"; then PY=$c; break; fi
done
if [ -z "$PY" ]; then
  echo "peer-env: no working Python 3.12 found (set PYTHON312=/path/to/python3.12); LeRobot peer tests will be skipped" >&2
  exit 1
fi
echo "creating $VENV with $PY and $REQUIREMENT ..."
trap 'rm -rf "$VENV"' ERR  # a half-built environment is removed, never left looking usable
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV"
# "lerobot==X", a checkout's directory or a wheel's file, each with the `dataset` extra
case "$REQUIREMENT" in
  lerobot*) SPEC="lerobot[dataset]${REQUIREMENT#lerobot}" ;;
  *) SPEC="lerobot[dataset] @ file://$(realpath "$REQUIREMENT")" ;;
esac
pip_install() {  # several GB come from the package index; a dropped connection is retried (pip keeps what it finished)
  for attempt in 1 2 3; do
    "$VENV/bin/pip" install -q --retries 10 --timeout 120 "$@" && return 0
    [ "$attempt" = 3 ] && { echo "peer-env: pip install $* failed 3 times" >&2; return 1; }
    echo "peer-env: pip install failed (attempt $attempt of 3); retrying in 10 s" >&2
    sleep 10
  done
}
if [ -z "${PEER_REQUIREMENT:-}" ]; then
  pip_install "$SPEC" "$LANCE" psutil  # the bench harness runs here too
  "$VENV/bin/python" -c "import lerobot.datasets.lerobot_dataset, lerobot.datasets.streaming_dataset, lerobot_lancedb"
  pip_install "$RAY" || echo "peer-env: $RAY did not install; ray_data runs will be skipped" >&2
  pip_install "$DAFT" || echo "peer-env: $DAFT did not install; daft_data runs will be skipped" >&2
else
  pip_install "$SPEC" psutil
  # lerobot-lancedb, pinned to the LeRobot just installed so that pip never swaps it for one lerobot-lancedb prefers
  LEROBOT_VERSION=$("$VENV/bin/python" -c "from importlib.metadata import version; print(version('lerobot'))")
  pip_install "$LANCE" "lerobot==$LEROBOT_VERSION" ||
    echo "peer-env: $LANCE does not install beside lerobot $LEROBOT_VERSION; this peer has no lance_map" >&2
  "$VENV/bin/python" -c "import lerobot.datasets.lerobot_dataset, lerobot.datasets.streaming_dataset"
fi
# s3fs (lance_map on S3 reads the v3.0 copy through it) pinned to the fsspec installed: unpinned, pip walks back
# through every s3fs release (each pins one fsspec) for tens of minutes
pip_install "s3fs==$("$VENV/bin/python" -c 'import fsspec; print(fsspec.__version__)')"
touch "$READY"
echo "peer environment ready: $VENV"
