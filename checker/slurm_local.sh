#!/usr/bin/env bash
# A real, single-node Slurm on this machine, for lab 5: `make slurm-up` / `make slurm-down`.
#
#     sudo checker/slurm_local.sh up       # install (Debian/Ubuntu), configure, start; idempotent
#     sudo checker/slurm_local.sh down     # stop the daemons by their pid files
#     checker/slurm_local.sh status        # what runs, and `sinfo`
#     sudo checker/slurm_local.sh two-up   # a second, private Slurm with two 1-CPU node entries (below)
#     sudo checker/slurm_local.sh two-down
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

# Two "nodes" on one machine, to measure a class's grade on 1 and 2 nodes (docs/workshop.md, "Grading a class on
# Slurm"): a second Slurm of its own (its own ports, state and /etc/slurm-two/slurm.conf; clients reach it with
# SLURM_CONF=/etc/slurm-two/slurm.conf), so lab 5's Slurm above is left as it is. Two node entries n1, n2 of one
# CPU each share this host (NodeHostname, a Port each), each served by its own slurmd (-N n1, -N n2); partition
# `one` holds n1 alone, `two` both.
TWO=/etc/slurm-two
two_up() {
    need_root two-up
    install_packages
    start_munge
    local host mem_mb
    host=$(hostname -s)
    mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 4 ))
    mkdir -p "$TWO" "$RUN/two" "$LOG/two" "$SPOOL/two/ctld"
    cat > "$TWO/slurm.conf" <<CONF
# Written by checker/slurm_local.sh two-up: two node entries on this machine, beside lab 5's Slurm.
ClusterName=two
SlurmctldHost=$host
SlurmctldPort=6917
SlurmdPort=6918
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
SlurmctldPidFile=$RUN/two/slurmctld.pid
SlurmdPidFile=$RUN/two/slurmd-%n.pid
SlurmctldLogFile=$LOG/two/slurmctld.log
SlurmdLogFile=$LOG/two/slurmd-%n.log
StateSaveLocation=$SPOOL/two/ctld
SlurmdSpoolDir=$SPOOL/two/d-%n
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG/two/jobcomp.txt
AccountingStorageType=accounting_storage/none
NodeName=n1 NodeHostname=$host Port=6931 CPUs=1 RealMemory=$mem_mb State=UNKNOWN
NodeName=n2 NodeHostname=$host Port=6932 CPUs=1 RealMemory=$mem_mb State=UNKNOWN
PartitionName=one Nodes=n1 MaxTime=60 State=UP
PartitionName=two Nodes=n1,n2 Default=YES MaxTime=60 State=UP
CONF
    touch "$LOG/two/jobcomp.txt"
    alive "$RUN/two/slurmctld.pid" || slurmctld -c -f "$TWO/slurm.conf"
    for n in n1 n2; do alive "$RUN/two/slurmd-$n.pid" || slurmd -f "$TWO/slurm.conf" -N "$n"; done
    for _ in $(seq 1 60); do
        [ "$(SLURM_CONF=$TWO/slurm.conf sinfo -h -p two -o %t 2>/dev/null)" = idle ] && {
            echo "two nodes up: SLURM_CONF=$TWO/slurm.conf sinfo"; return 0; }
        sleep 0.5
    done
    echo "the two-node Slurm did not come up; see $LOG/two/" >&2
    return 1
}

two_down() {
    need_root two-down
    SLURM_CONF=$TWO/slurm.conf scancel --full --user="$(id -un)" 2>/dev/null || true
    for f in slurmd-n1 slurmd-n2 slurmctld; do stop_pid "$RUN/two/$f.pid"; done
    echo "the two-node Slurm is down (lab 5's is untouched)"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    two-up) two_up ;;
    two-down) two_down ;;
    *) echo "usage: $0 up|down|status|two-up|two-down" >&2; exit 2 ;;
esac
