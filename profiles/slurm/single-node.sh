#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, to try profiles/slurm without a cluster
# (Debian or Ubuntu, as root): Debian's slurm-wlm and munge; one node, this host with its
# CPUs and memory, in one partition named `cpu` (the profile's default slurm_partition);
# munged, slurmctld and slurmd started and the node idle before it returns. No accounting
# database (slurmdbd): the profile reads job states with squeue (`slurm-status-command`),
# which sees a finished job for MinJobAge seconds; finished jobs are also written to the
# job-completion log, readable with `sacct --completion`. Processes are tracked without
# cgroups (proctrack/linuxproc, task/none), so it runs in a container too.
#
# Idempotent: with the cluster already up as this script configures it, it changes nothing
# (and needs no root). Any failure: one line on stderr and a non-zero exit.
set -euo pipefail

PARTITION=cpu
CLUSTER=single-node
CONF=/etc/slurm/slurm.conf
LOG_DIR=/var/log/slurm
STATE_DIR=/var/lib/slurm
PACKAGES=(slurm-wlm munge)

die() {
  echo "single-node.sh: $*" >&2
  exit 1
}
trap 'die "line $LINENO: \`$BASH_COMMAND\` failed"' ERR

host=$(hostname -s)

# This machine as slurmd finds it: "CPUs=... Boards=... RealMemory=..." (nothing if it cannot).
machine() {
  local line
  line=$(slurmd -C 2>/dev/null | head -n 1) || return 0
  if [[ $line == "NodeName=$host "* ]]; then echo "${line#* }"; fi
}

# The slurm.conf this script writes, for the node that machine() describes ($1).
desired_conf() {
  cat <<EOF
# Written by profiles/slurm/single-node.sh: a single-node cluster on $host.
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
AuthType=auth/munge
SlurmUser=slurm
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
StateSaveLocation=$STATE_DIR/slurmctld
SlurmdSpoolDir=$STATE_DIR/slurmd
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
# No cgroups needed (containers): processes tracked through /proc, no CPU binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
# No accounting database: squeue answers job states and keeps a finished job MinJobAge s;
# the job-completion log keeps them all (sacct --completion).
AccountingStorageType=accounting_storage/none
MinJobAge=300
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG_DIR/jobcomp.log
NodeName=$host NodeAddr=127.0.0.1 $1 State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

node_state() { sinfo --noheader --partition "$PARTITION" --nodes "$host" --format %T 2>/dev/null || true; }
node_ready() { [[ $(node_state) =~ ^(idle|mixed|allocated|completing)$ ]]; }
controller_up() { scontrol ping 2>/dev/null | grep -q "is UP"; }
slurmd_up() { scontrol show slurmd >/dev/null 2>&1; }
munge_up() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
installed() {
  local pkg
  for pkg in slurmctld slurmd slurm-client munge; do
    [[ $(dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null) == "install ok installed" ]] || return 1
  done
}

# Already up as configured here: nothing to do.
if command -v slurmd >/dev/null && [[ -f $CONF ]] && node=$(machine) && [[ -n $node ]] \
  && [[ $(desired_conf "$node") == "$(cat "$CONF")" ]] && munge_up && controller_up && slurmd_up && node_ready; then
  echo "SLURM single-node cluster already up: node $host in partition $PARTITION"
  exit 0
fi

[[ $(id -u) == 0 ]] || die "not root: installing SLURM and starting its daemons needs root"
command -v apt-get >/dev/null || die "no apt-get: this script sets SLURM up on Debian or Ubuntu only"
command -v service >/dev/null || die "no \`service\` command to start the daemons with"

if ! installed; then
  apt_log=$(mktemp /tmp/single-node-apt.XXXXXX)
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -q && apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"; } >"$apt_log" 2>&1 \
    || die "apt-get install ${PACKAGES[*]} failed (see $apt_log)"
  installed || die "apt-get installed ${PACKAGES[*]}, but slurmctld, slurmd, slurm-client or munge is missing"
fi

# munge: the package makes a key; make one where it is missing.
if [[ ! -s /etc/munge/munge.key ]]; then
  mungekey --create --keyfile /etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
fi
munge_up || service munge restart >/dev/null 2>&1 || true
for _ in $(seq 20); do munge_up && break; sleep 0.5; done
munge_up || die "munged does not answer (see /var/log/munge/munged.log)"

if [[ -f $CONF ]] && [[ $(head -n 1 "$CONF") != "# Written by profiles/slurm/single-node.sh"* ]]; then
  die "$CONF exists and this script did not write it: leaving that cluster alone"
fi
node=$(machine)
[[ -n $node ]] || die "\`slurmd -C\` does not describe this machine as node $host"
install -d -o slurm -g slurm "$LOG_DIR" "$STATE_DIR/slurmctld" "$STATE_DIR/slurmd"
mkdir -p "$(dirname "$CONF")"
desired_conf "$node" >"$CONF"
chmod 0644 "$CONF"

# (Re)start both daemons: a running one may hold an older configuration.
service slurmctld restart >/dev/null 2>&1 || die "slurmctld does not start (see $LOG_DIR/slurmctld.log)"
for _ in $(seq 60); do controller_up && break; sleep 0.5; done
controller_up || die "slurmctld does not answer (see $LOG_DIR/slurmctld.log)"
service slurmd restart >/dev/null 2>&1 || die "slurmd does not start (see $LOG_DIR/slurmd.log)"

# Wait for the node; one left down or drained (say, by an earlier configuration) is resumed.
resumed=
for _ in $(seq 120); do
  slurmd_up && node_ready && break
  if [[ -z $resumed && $(node_state) =~ ^(down|drain) ]]; then
    scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true
    resumed=1
  fi
  sleep 0.5
done
slurmd_up || die "slurmd does not answer (see $LOG_DIR/slurmd.log)"
node_ready || die "node $host not ready after 60 s (state: $(node_state)); see $LOG_DIR/slurmd.log"
echo "SLURM single-node cluster up: node $host in partition $PARTITION"
