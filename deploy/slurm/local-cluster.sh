#!/bin/bash
# A one-node SLURM cluster on this machine (slurmctld + slurmd + munge, Debian's slurm-wlm), for
# `make deploy-check`: it runs deploy/slurm/train.sbatch for real. Needs root.
#   deploy/slurm/local-cluster.sh start     # installs slurm-wlm when missing (apt), writes the config, starts
#   deploy/slurm/local-cluster.sh stop
# Everything it writes is under /etc/slurm (slurm.conf), /var/spool/slurm-local and /var/log/slurm-local.
set -euo pipefail

action=${1:-start}
spool=/var/spool/slurm-local
logs=/var/log/slurm-local

stop() {
  pkill -x slurmd 2>/dev/null || true
  pkill -x slurmctld 2>/dev/null || true
  for _ in $(seq 50); do pgrep -x slurmd > /dev/null || pgrep -x slurmctld > /dev/null || break; sleep 0.2; done
  pkill -9 -x slurmd 2>/dev/null || true   # a slurmd that never registered ignores SIGTERM
  pkill -9 -x slurmctld 2>/dev/null || true
}

if [ "$action" = stop ]; then
  stop
  pkill -x munged 2>/dev/null || true
  for _ in $(seq 50); do pgrep -x munged > /dev/null || break; sleep 0.2; done
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "local-cluster.sh: needs root (it configures and starts slurmctld, slurmd and munged)" >&2
  exit 1
fi
if ! command -v slurmctld > /dev/null || ! command -v slurmd > /dev/null || ! command -v munged > /dev/null; then
  echo "local-cluster.sh: installing slurm-wlm (apt)"
  if ! (DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm > /tmp/slurm-apt.log 2>&1 ||
        (apt-get update -q > /tmp/slurm-apt.log 2>&1 &&
         DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm >> /tmp/slurm-apt.log 2>&1)); then
    echo "local-cluster.sh: apt-get could not install slurm-wlm: $(tail -n 1 /tmp/slurm-apt.log)" >&2
    exit 1
  fi
fi

node=$(hostname -s)
cpus=$(nproc)
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
mkdir -p "$spool/ctld" "$spool/d" "$logs" /etc/slurm
cat > /etc/slurm/slurm.conf <<EOF
# written by deploy/slurm/local-cluster.sh: one node, root daemons, no cgroups (containers lack them)
ClusterName=speechscale-local
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job waits out its old credential before it may start again (120 s by default); 5 s here. Nothing
# wakes the scheduler when that wait ends: its periodic pass (every 60 s by default, here 1 s) starts the job.
# (bf_interval=1 instead left it waiting 52 s; the default backfill pass, every 30 s, 11-41 s.)
AuthInfo=cred_expire=5
SchedulerParameters=sched_interval=1
StateSaveLocation=$spool/ctld
SlurmdSpoolDir=$spool/d
SlurmctldPidFile=$spool/slurmctld.pid
SlurmdPidFile=$spool/slurmd.pid
SlurmctldLogFile=$logs/slurmctld.log
SlurmdLogFile=$logs/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=60
MinJobAge=600
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
NodeName=$node CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF

# munge: the key the package created (or a new one), the daemon as its own user when it exists
if [ ! -s /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2> /dev/null
fi
mkdir -p /run/munge /var/log/munge /var/lib/munge
if id munge > /dev/null 2>&1; then
  chown munge:munge /etc/munge/munge.key /run/munge /var/log/munge /var/lib/munge
  chmod 400 /etc/munge/munge.key
  pgrep -x munged > /dev/null || runuser -u munge -- /usr/sbin/munged
else
  chmod 400 /etc/munge/munge.key
  pgrep -x munged > /dev/null || /usr/sbin/munged --force
fi
for _ in $(seq 50); do munge -n 2> /dev/null | unmunge > /dev/null 2>&1 && break; sleep 0.2; done
if ! munge -n 2> /dev/null | unmunge > /dev/null 2>&1; then
  echo "local-cluster.sh: munged does not answer (munge -n | unmunge failed); see /var/log/munge" >&2
  exit 1
fi

stop
slurmctld
slurmd
for _ in $(seq 100); do
  if timeout 5 sinfo -h -o '%T' 2> /dev/null | grep -qx idle; then
    echo "local-cluster.sh: node $node up ($cpus CPUs), partition local"
    exit 0
  fi
  timeout 5 scontrol update nodename="$node" state=resume > /dev/null 2>&1 || true
  sleep 0.3
done
echo "local-cluster.sh: the node did not come up: $(timeout 5 sinfo -h -N -o '%N %T %E' 2>&1 | head -n 1)" >&2
tail -n 5 "$logs/slurmctld.log" "$logs/slurmd.log" >&2 || true
exit 1
