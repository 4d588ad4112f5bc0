#!/usr/bin/env bash
# Stop what scripts/slurm-up.sh started, and nothing else: the PIDs in its PID files.
set -uo pipefail
DIR=${DLBENCH_SLURM_DIR:-/tmp/dlbench-slurm}
for name in slurmd slurmctld munged; do
  f="$DIR/run/$name.pid"
  [ -s "$f" ] || continue
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
done
if [ -s "$DIR/run/linked-conf" ]; then  # the default-path link slurm-up made, if it is still ours
  link=$(cat "$DIR/run/linked-conf")
  [ "$(readlink "$link")" = "$DIR/slurm.conf" ] && rm -f "$link"
  rm -f "$DIR/run/linked-conf"
fi
echo "slurm-down: stopped the daemons started from $DIR"
