#!/usr/bin/env bash
# Stop what scripts/slurm-up.sh started, and nothing else: the PIDs in its PID files, every process left in the
# nodes' namespaces (jobs of those nodes), the namespaces, the bridge and the files it wrote outside its directory.
#   scripts/slurm-down.sh --node K   only node K dies, as a host would: its slurmd and every job process on it are
#                                    killed at once (slurm-up.sh --node K brings it back)
set -uo pipefail
DIR=${DLBENCH_SLURM_DIR:-/tmp/dlbench-slurm}

kill_namespace() {  # every process in network namespace $1, at once
  for pid in $(ip netns pids "$1" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
}

if [ "${1:-}" = --node ]; then
  k=${2:?--node needs a node number}
  [ -e "/run/netns/dlbench-node$k" ] || { echo "slurm-down: --node $k: no such node" >&2; exit 2; }
  kill_namespace "dlbench-node$k"
  rm -f "$DIR/run/slurmd-node$k.pid"
  echo "slurm-down: node$k is down"
  exit 0
fi

stop_pid() {  # TERM, up to 5 s, then KILL
  local pid=$1
  kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

for f in "$DIR"/run/slurmd*.pid "$DIR/run/slurmctld.pid" "$DIR/run/munged.pid"; do
  [ -s "$f" ] && stop_pid "$(cat "$f")"
  rm -f "$f"
done
if [ -s "$DIR/run/netns" ]; then
  while read -r ns; do
    [ -n "$ns" ] || continue
    kill_namespace "$ns"
    ip netns del "$ns" 2>/dev/null  # its veth end goes with it, and so does the bridge's
    rm -rf "/etc/netns/$ns"
  done < "$DIR/run/netns"
  rm -f "$DIR/run/netns"
fi
if [ -s "$DIR/run/bridge" ]; then
  ip link del "$(cat "$DIR/run/bridge")" 2>/dev/null
  rm -f "$DIR/run/bridge"
fi
if [ -s "$DIR/run/linked-conf" ]; then  # the default-path link slurm-up made, if it is still ours
  link=$(cat "$DIR/run/linked-conf")
  [ "$(readlink "$link")" = "$DIR/slurm.conf" ] && rm -f "$link"
  rm -f "$DIR/run/linked-conf"
fi
echo "slurm-down: stopped what was started from $DIR"
