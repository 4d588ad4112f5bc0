#!/usr/bin/env bash
# Bring up a real one-node SLURM cluster on this Debian machine (as root): munge, slurmctld, slurmd.
# Everything lives in $DLBENCH_SLURM_DIR (default /tmp/dlbench-slurm): its own slurm.conf, spool, logs and PID
# files, on its own ports, so a system SLURM is never touched. Prints the SLURM_CONF to export.
# Stop it with scripts/slurm-down.sh, which ends only the daemons this script started (by PID).
set -euo pipefail
DIR=${DLBENCH_SLURM_DIR:-/tmp/dlbench-slurm}
CTLD_PORT=${DLBENCH_SLURM_PORT:-16817}
SLURMD_PORT=$((CTLD_PORT + 1))

if [ "$(id -u)" != 0 ]; then echo "slurm-up: needs root (it starts munged and the SLURM daemons)" >&2; exit 3; fi
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null \
   || ! command -v sbatch >/dev/null; then
  command -v apt-get >/dev/null || { echo "slurm-up: SLURM is not installed and apt-get is missing" >&2; exit 3; }
  echo "slurm-up: installing munge and SLURM with apt-get ..."
  install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    munge slurmctld slurmd slurm-client >/dev/null; }
  install || { apt-get update -qq && install; }  # a fresh machine may have no package lists yet
fi
mkdir -p "$DIR"/{spool/ctld,spool/d,log,run}
export SLURM_CONF="$DIR/slurm.conf"

# munge: reuse a running munged, otherwise start one and remember its PID
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
NODE=$(slurmd -C | head -n1 | sed -E 's/ RealMemory=([0-9]+)/ RealMemory=__MEM__/')
MEM=$(slurmd -C | head -n1 | sed -nE 's/.*RealMemory=([0-9]+).*/\1/p')
NODE=${NODE/__MEM__/$((MEM * 9 / 10))}
cat > "$SLURM_CONF" <<CONF
ClusterName=dlbench
SlurmctldHost=$HOST
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
DefMemPerCPU=1000
SchedulerType=sched/backfill
ReturnToService=2
EnforcePartLimits=ALL
MinJobAge=300
KillWait=5
InactiveLimit=0
Waittime=0
StateSaveLocation=$DIR/spool/ctld
SlurmdSpoolDir=$DIR/spool/d
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
$NODE State=UNKNOWN
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

slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 100); do
  if sinfo -h -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
    echo "slurm-up: one-node cluster ready (export SLURM_CONF=$SLURM_CONF)"
    exit 0
  fi
  scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true
  sleep 0.2
done
echo "slurm-up: the node did not become idle; see $DIR/log" >&2
exit 1
