# A one-node Slurm cluster (Debian's slurmctld, slurmd and munge) on loopback,
# configured and run entirely inside one temporary folder, for the Slurm
# command-line tests. Sourced, not run (tests/cli/*.sh are the tests).
#
#   source "$(dirname "$0")/lib/slurm.sh"
#   trap 'slurm_stop; rm -rf "$work"' EXIT
#   slurm_start CPUS || { echo "SKIP: $slurm_why"; exit 0; }
#
# After slurm_start: SLURM_CONF points sbatch/srun/squeue/scancel at the
# cluster (node `loomnode`, partition `loom`, CPUS cores declared, jobs may be
# requeued), and slurm_stop (safe to call twice, or before a start) stops the
# three daemons and removes their folder. The daemons run as the current user
# (root in CI): slurmd must be root to start job steps as another user, which
# these tests never do. Tasks are tracked by process tree (proctrack/linuxproc)
# and bound to cores with sched_setaffinity (task/affinity), so no cgroup access
# is needed.
slurm_dir=
slurm_why=
slurm_pids=()

# slurm_port: a free loopback TCP port.
slurm_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

slurm_start() {
  local cpus=${1:-2} tool
  for tool in munged mungekey slurmctld slurmd sbatch srun scontrol; do
    if ! command -v "$tool" >/dev/null && [[ ! -x /usr/sbin/$tool ]]; then
      slurm_why="$tool is not installed (Debian: slurmctld slurmd slurm-client munge; scripts/install_deps.sh)"
      return 1
    fi
  done
  if [[ $(id -u) != 0 ]]; then
    slurm_why="slurmd has to run as root to start job steps"; return 1
  fi
  slurm_dir=$(mktemp -d /tmp/loom-slurm.XXXXXX)
  chmod 700 "$slurm_dir"
  local d=$slurm_dir user
  user=$(id -un)
  mkdir -p "$d/munge" "$d/state" "$d/spool" "$d/log"
  chmod 700 "$d/munge"
  # munge: its own key and socket; Slurm finds the socket through AuthInfo.
  /usr/sbin/mungekey --create --keyfile="$d/munge/munge.key" >/dev/null 2>&1 \
    || { slurm_why="mungekey failed"; return 1; }
  chmod 400 "$d/munge/munge.key"
  /usr/sbin/munged --force --socket="$d/munge/munge.sock" --key-file="$d/munge/munge.key" \
    --pid-file="$d/munge/munged.pid" --log-file="$d/log/munged.log" \
    --seed-file="$d/munge/munged.seed" 2>"$d/log/munged.err" \
    || { slurm_why="munged failed: $(cat "$d/log/munged.err" "$d/log/munged.log" 2>/dev/null)"; return 1; }
  local ctl_port node_port srun_lo
  ctl_port=$(slurm_port)
  node_port=$(slurm_port)
  srun_lo=$(( (RANDOM % 20000) + 30000 ))
  cat >"$d/slurm.conf" <<CONF
ClusterName=loomtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmdPort=$node_port
SrunPortRange=$srun_lo-$((srun_lo + 200))
SlurmUser=$user
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.sock,cred_expire=10
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=30
InactiveLimit=0
MinJobAge=600
SchedulerParameters=sched_interval=1
NodeName=loomnode NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=loom Nodes=loomnode Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
  export SLURM_CONF=$d/slurm.conf
  /usr/sbin/slurmctld -f "$SLURM_CONF" -i 2>"$d/log/slurmctld.err" \
    || { slurm_why="slurmctld failed: $(cat "$d/log/slurmctld.err")"; return 1; }
  /usr/sbin/slurmd -f "$SLURM_CONF" -N loomnode 2>"$d/log/slurmd.err" \
    || { slurm_why="slurmd failed: $(cat "$d/log/slurmd.err")"; return 1; }
  local i state
  for i in $(seq 150); do
    state=$(scontrol show node loomnode 2>/dev/null | sed -n 's/.*State=\([A-Z+_]*\).*/\1/p')
    [[ $state == IDLE* ]] && return 0
    sleep 0.2
  done
  slurm_why="node loomnode never became idle (state '$state'): $(tail -5 "$d/log/slurmd.log" "$d/log/slurmctld.log" 2>/dev/null)"
  return 1
}

# slurm_wait JOBID STATE...: until the job is in one of the states (30 s at most).
slurm_job_state() {
  scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'
}

slurm_stop() {
  [[ -n $slurm_dir ]] || return 0
  local f pid
  for f in slurmd.pid slurmctld.pid munge/munged.pid; do
    pid=$(cat "$slurm_dir/$f" 2>/dev/null) || continue
    kill "$pid" 2>/dev/null || true
  done
  for f in slurmd.pid slurmctld.pid munge/munged.pid; do
    pid=$(cat "$slurm_dir/$f" 2>/dev/null) || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  rm -rf "$slurm_dir"
  slurm_dir=
}
