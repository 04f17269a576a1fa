#!/usr/bin/env bash
# A real, single-node Slurm on this machine, for lab 5: `make slurm-up` / `make slurm-down`.
#
#     sudo checker/slurm_local.sh up       # install (Debian/Ubuntu), configure, start; idempotent
#     sudo checker/slurm_local.sh down     # stop the daemons by their pid files
#     checker/slurm_local.sh status        # what runs, and `sinfo`
#
# Needs root (it installs packages and starts daemons). Without root, use the workshop's cluster:
# lab 5's README says how. No systemd is assumed: daemons are started directly, in the background.
#
# Why each setting (measured on a 2-core Debian 12 machine, Slurm 22.05):
# - the node is named after `hostname -s`, which must resolve: the batch script's
#   MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -1) must be reachable.
# - no cgroups in a container: proctrack/linuxproc (track the process tree) and task/none.
# - AuthInfo=cred_expire=5, sched_interval=2, bf_interval=1: a requeued job may start again only once its
#   credential has expired (120 s by default; below 5 Slurm ignores the setting and waits 120 s), and only
#   when a scheduler pass sees it; with these a requeue round trip takes ~7 s.
# - JobCompType=jobcomp/filetxt: without slurmdbd `sacct` has nothing; this file gets one key=value line
#   per finished job (JobId, State, Submit/Start/End, Elapsed, NodeList, array ids): lab 5 parses it.
set -euo pipefail

CONF_DIR=${SLURM_CONF_DIR:-/etc/slurm}
CONF=$CONF_DIR/slurm.conf
RUN=/run/course-slurm
LOG=/var/log/slurm
SPOOL=/var/spool/slurm
JOBCOMP=$LOG/jobcomp.txt

need_root() { [ "$(id -u)" = 0 ] || { echo "slurm_local.sh $1: needs root (sudo). Without root, use a workshop cluster: see labs/lab5_scheduler/README.md" >&2; exit 2; }; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null && command -v munged >/dev/null; then
        return
    fi
    command -v apt-get >/dev/null || { echo "no apt-get: install munge and Slurm (slurmctld, slurmd, client) with your package manager" >&2; exit 1; }
    echo "installing munge + Slurm (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends munge slurmctld slurmd slurm-client >/dev/null
}

write_conf() {
    local node cpus mem_mb
    node=$(hostname -s)
    cpus=$(nproc)
    mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512 ))  # leave the OS half a GiB
    getent hosts "$node" >/dev/null || echo "127.0.0.1 $node" >> /etc/hosts
    mkdir -p "$CONF_DIR" "$RUN" "$LOG" "$SPOOL/ctld" "$SPOOL/d"
    chown slurm: "$LOG" "$SPOOL/ctld" 2>/dev/null || true
    cat > "$CONF" <<EOF
# Written by checker/slurm_local.sh: one node, this machine.
ClusterName=course
SlurmctldHost=$node
SlurmUser=root
AuthType=auth/munge
AuthInfo=cred_expire=5
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
ReturnToService=2
KillWait=10
MinJobAge=60
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/d
JobCompType=jobcomp/filetxt
JobCompLoc=$JOBCOMP
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/linux
NodeName=$node CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=60 State=UP
EOF
    touch "$JOBCOMP"
}

start_munge() {
    alive /run/munge/munged.pid && return
    [ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
    chown munge: /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge && chown munge: /run/munge /var/log/munge /var/lib/munge
    su -s /bin/sh munge -c "munged --pid-file=/run/munge/munged.pid" || runuser -u munge -- munged
}

wait_idle() {
    local node=$1
    for _ in $(seq 1 60); do
        state=$(sinfo -h -n "$node" -o %t 2>/dev/null || true)
        case "$state" in
            idle*|mix*|alloc*) echo "Slurm is up: node $node is $state (JobCompLoc=$JOBCOMP)"; return 0 ;;
            drain*|down*) scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true ;;
        esac
        sleep 0.5
    done
    echo "Slurm did not come up; see $LOG/slurmctld.log and $LOG/slurmd.log" >&2
    return 1
}

up() {
    need_root up
    install_packages
    write_conf
    start_munge
    # -c: a clean start, forgetting jobs of an earlier run of this script (a course machine, not a cluster)
    alive "$RUN/slurmctld.pid" || slurmctld -c -f "$CONF"
    alive "$RUN/slurmd.pid" || slurmd -f "$CONF" -N "$(hostname -s)"
    wait_idle "$(hostname -s)"
}

stop_pid() {
    local f=$1 pid
    alive "$f" || { rm -f "$f"; return 0; }
    pid=$(cat "$f"); kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || { rm -f "$f"; return 0; }; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true; rm -f "$f"
}

down() {
    need_root down
    scancel --full --user="$(id -un)" 2>/dev/null || true  # jobs first: their steps are children of slurmd
    stop_pid "$RUN/slurmd.pid"
    stop_pid "$RUN/slurmctld.pid"
    stop_pid /run/munge/munged.pid
    echo "Slurm is down"
}

status() {
    for f in /run/munge/munged.pid "$RUN/slurmctld.pid" "$RUN/slurmd.pid"; do
        if alive "$f"; then echo "running  $(basename "$f" .pid) (pid $(cat "$f"))"; else echo "stopped  $(basename "$f" .pid)"; fi
    done
    sinfo 2>/dev/null || true
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
