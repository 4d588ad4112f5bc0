#!/usr/bin/env bash
# Bring up a real SLURM cluster on this Debian machine (as root): munge, slurmctld, and one slurmd per node.
#   scripts/slurm-up.sh              one node: the compute node is this host
#   scripts/slurm-up.sh --nodes N    N compute nodes, each a host of its own: its own network and UTS namespace (own
#                                    hostname node1..nodeN, own address on a bridge), its own slurmd pinned to a
#                                    share of the cores and memory; slurmctld (and Snakemake, and the S3 server) stay
#                                    here, reached at the bridge address. The filesystem is shared, as over NFS.
#   scripts/slurm-up.sh --node K     bring node K of a running cluster back (after slurm-down.sh --node K)
# Everything lives in $DLBENCH_SLURM_DIR (default /tmp/dlbench-slurm): its own slurm.conf, spool, logs and PID files,
# on its own ports, so a system SLURM is never touched. Prints the SLURM_CONF to export.
# Stop it with scripts/slurm-down.sh, which ends only what this script started (PIDs, namespaces, bridge).
set -euo pipefail
DIR=${DLBENCH_SLURM_DIR:-/tmp/dlbench-slurm}
CTLD_PORT=${DLBENCH_SLURM_PORT:-16817}
SLURMD_PORT=$((CTLD_PORT + 1))
SUBNET=${DLBENCH_SLURM_SUBNET:-10.231.7}  # the bridge's /24: .1 is this host, .1K is node K
BRIDGE=${DLBENCH_SLURM_BRIDGE:-dlbench0}
NODES=1
RESTART=""
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) NODES=${2:?--nodes needs a count}; shift 2 ;;
    --nodes=*) NODES=${1#--nodes=}; shift ;;
    --node) RESTART=${2:?--node needs a node number}; shift 2 ;;
    *) echo "slurm-up: unknown argument $1 (usage: slurm-up.sh [--nodes N | --node K])" >&2; exit 2 ;;
  esac
done
export SLURM_CONF="$DIR/slurm.conf"
if [ -n "$RESTART" ]; then  # the cluster's own node count, from its config
  NODES=$(grep -c '^NodeName=node' "$SLURM_CONF" 2>/dev/null) \
    || { echo "slurm-up: --node: no multi-node cluster in $DIR" >&2; exit 2; }
fi
case $NODES in ''|*[!0-9]*|0) echo "slurm-up: --nodes takes a count >= 1, not '$NODES'" >&2; exit 2 ;; esac
[ "$NODES" -le 80 ] || { echo "slurm-up: --nodes is at most 80 (addresses $SUBNET.11-$SUBNET.90)" >&2; exit 2; }

if [ "$(id -u)" != 0 ]; then echo "slurm-up: needs root (it starts munged and the SLURM daemons)" >&2; exit 3; fi
if [ "$NODES" -gt 1 ] && ! command -v ip >/dev/null; then
  echo "slurm-up: --nodes $NODES needs iproute2's \`ip\` for the nodes' namespaces" >&2; exit 3
fi
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null \
   || ! command -v sbatch >/dev/null; then
  command -v apt-get >/dev/null || { echo "slurm-up: SLURM is not installed and apt-get is missing" >&2; exit 3; }
  echo "slurm-up: installing munge and SLURM with apt-get ..."
  install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    munge slurmctld slurmd slurm-client >/dev/null; }
  install || { apt-get update -qq && install; }  # a fresh machine may have no package lists yet
fi
mkdir -p "$DIR"/{spool/ctld,spool/d,log,run}

# munge: reuse a running munged, otherwise start one and remember its PID. Its socket is a file, so the nodes'
# namespaces share it.
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  [ -s /etc/munge/munge.key ] || /usr/sbin/mungekey --create --force
  chown -R munge:munge /etc/munge && chmod 0700 /etc/munge && chmod 0400 /etc/munge/munge.key
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/dlbench-munged.pid
  for _ in $(seq 50); do [ -s /run/munge/dlbench-munged.pid ] && break; sleep 0.1; done
  cp /run/munge/dlbench-munged.pid "$DIR/run/munged.pid"
fi

HOST=$(hostname -s)
MEM=$(slurmd -C | head -n1 | sed -nE 's/.*RealMemory=([0-9]+).*/\1/p')
if [ "$NODES" = 1 ]; then
  NODE="$(slurmd -C | head -n1 | sed -E "s/ RealMemory=([0-9]+)/ RealMemory=$((MEM * 9 / 10))/") State=UNKNOWN"
  CTLD_HOST=$HOST
else
  # each node gets an equal share of the cores this script may use, and of the memory
  mapfile -t CPUS < <(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)), sep="\n")')
  PER=$(( ${#CPUS[@]} / NODES )); [ "$PER" -ge 1 ] || PER=1
  [ $(( PER * NODES )) -le ${#CPUS[@]} ] || echo "slurm-up: warning: $NODES nodes on ${#CPUS[@]} cores share cores" >&2
  NODE=""
  for k in $(seq "$NODES"); do
    NODE+="NodeName=node$k NodeAddr=$SUBNET.$((10 + k)) NodeHostname=node$k CPUs=$PER Boards=1 SocketsPerBoard=1"
    NODE+=" CoresPerSocket=$PER ThreadsPerCore=1 RealMemory=$((MEM * 9 / 10 / NODES)) State=UNKNOWN"$'\n'
  done
  CTLD_HOST="$HOST($SUBNET.1)"
fi
cat > "$SLURM_CONF" <<CONF
ClusterName=dlbench
SlurmctldHost=$CTLD_HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SlurmdParameters=config_overrides
DefMemPerCPU=1000
SchedulerType=sched/backfill
ReturnToService=2
EnforcePartLimits=ALL
MinJobAge=300
KillWait=5
InactiveLimit=0
Waittime=0
SlurmdTimeout=15
StateSaveLocation=$DIR/spool/ctld
SlurmdSpoolDir=$DIR/spool/d/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
$NODE
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF

# Jobs must find this config without SLURM_CONF too: the plugin's job step (jobstep 0.6.1) strips every SLURM_*
# variable before its srun. So link it at the default path, unless a system config is already there.
if [ ! -e /etc/slurm/slurm.conf ]; then
  mkdir -p /etc/slurm
  ln -s "$SLURM_CONF" /etc/slurm/slurm.conf
  echo /etc/slurm/slurm.conf > "$DIR/run/linked-conf"
elif [ "$(readlink /etc/slurm/slurm.conf)" != "$SLURM_CONF" ]; then
  echo "slurm-up: warning: /etc/slurm/slurm.conf exists and is not ours; jobs' inner srun will read it" >&2
fi

# node K of a multi-node cluster: namespace dlbench-nodeK on the bridge, /etc/hosts of its own (naming the
# controller and every node)
make_node() {
  local k=$1 ns=dlbench-node$1
  ip netns add "$ns"
  echo "$ns" >> "$DIR/run/netns"
  ip link add "dlb$CTLD_PORT-$k" type veth peer name eth0 netns "$ns"
  ip link set "dlb$CTLD_PORT-$k" master "$BRIDGE" up
  ip -n "$ns" addr add "$SUBNET.$((10 + k))/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route add default via "$SUBNET.1"  # this host's other addresses (the default-route one) are local
  mkdir -p "/etc/netns/$ns"
  { echo "127.0.0.1 localhost"; echo "$SUBNET.1 $HOST"; for j in $(seq "$NODES"); do
      echo "$SUBNET.$((10 + j)) node$j"; done; } > "/etc/netns/$ns/hosts"
}

# its slurmd, under hostname nodeK, pinned to the node's cores; not `ip netns exec`: its fresh /sys hides the
# cgroup mounts slurmd looks for
start_slurmd() {
  local k=$1 ns=dlbench-node$1 cpus
  cpus=$(for i in $(seq 0 $((PER - 1))); do echo "${CPUS[$(( ((k - 1) * PER + i) % ${#CPUS[@]} ))]}"; done | paste -sd,)
  nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation slave sh -c \
    "hostname node$k && mount --bind /etc/netns/$ns/hosts /etc/hosts \
     && exec taskset -c $cpus slurmd -f '$SLURM_CONF' -N node$k"
}

if [ -n "$RESTART" ]; then
  [ -e "/run/netns/dlbench-node$RESTART" ] || { echo "slurm-up: --node $RESTART: no such node" >&2; exit 2; }
  start_slurmd "$RESTART"
  for _ in $(seq 150); do
    sinfo -h -n "node$RESTART" -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)$' \
      && { echo "slurm-up: node$RESTART is back"; exit 0; }
    scontrol update NodeName="node$RESTART" State=RESUME >/dev/null 2>&1 || true
    sleep 0.2
  done
  echo "slurm-up: node$RESTART did not come back; see $DIR/log/slurmd-node$RESTART.log" >&2
  exit 1
fi

slurmctld -f "$SLURM_CONF"
if [ "$NODES" = 1 ]; then
  slurmd -f "$SLURM_CONF"
else
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    echo "slurm-up: bridge $BRIDGE exists; run scripts/slurm-down.sh (or set DLBENCH_SLURM_BRIDGE)" >&2; exit 1
  fi
  ip link add "$BRIDGE" type bridge
  echo "$BRIDGE" > "$DIR/run/bridge"
  ip addr add "$SUBNET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for k in $(seq "$NODES"); do make_node "$k"; start_slurmd "$k"; done
fi
for _ in $(seq 150); do
  if [ "$(sinfo -h -N -o '%t' 2>/dev/null | grep -cE '^(idle|mix|alloc)$')" = "$NODES" ]; then
    if [ "$NODES" = 1 ]; then
      echo "slurm-up: one-node cluster ready (export SLURM_CONF=$SLURM_CONF)"
    else
      echo "slurm-up: $NODES-node cluster ready: node1..node$NODES on $SUBNET.0/24, controller $SUBNET.1" \
        "(export SLURM_CONF=$SLURM_CONF)"
    fi
    exit 0
  fi
  scontrol update NodeName=ALL State=RESUME >/dev/null 2>&1 || true
  sleep 0.2
done
echo "slurm-up: not every node became idle; see $DIR/log" >&2
exit 1
