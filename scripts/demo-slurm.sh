#!/usr/bin/env bash
# The burst buffer under Slurm: a private cluster of three nodes on this host (munged,
# slurmctld and one slurmd per node n1..n3 on 127.0.0.11-13, BurstBufferType=burst_buffer/lua
# with the project's slurm/burst_buffer.lua), as crates/eddy-bb/tests/slurm/burst_buffer.rs builds
# it. A user's job (as `nobody`: Slurm gives root no burst buffer) asks for a node-local Eddy
# with `#EDDY` lines; we follow its states from pending through staging-in, running,
# staging-out and teardown, check its results in the "parallel file system" (a directory
# here), check that nothing of it is left, and show a refused submission.
# Usage: scripts/demo-slurm.sh RELEASE_DIR (`make demo-slurm`). Needs root, FUSE and Slurm.
set -euo pipefail

EDDY=$(realpath "${1:-target/release}")/eddy
LUA_SRC=$(dirname "$0")/../slurm/burst_buffer.lua
USER_=nobody
JOB_BOUND=120      # seconds for a job's whole life, staging included
TEARDOWN_BOUND=60  # seconds for teardown after the job ended
CLIENT=20          # seconds for one Slurm client command

DIR=$(mktemp -d /tmp/eddy-demo-slurm.XXXXXX)
chmod 0755 "$DIR"  # munged and the job's user must traverse it
CL="$DIR/slurm"    # the cluster: configuration, state, logs
SITE="$DIR/site"   # eddy bb: settings, jobs' state, mounts, node and pool storage
PFS="$DIR/pfs"     # the "parallel file system"
OUT="$DIR/out"     # job output (mode 1777)
export SLURM_CONF="$CL/slurm.conf"
for v in $(compgen -e | grep '^SLURM_' | grep -v '^SLURM_CONF$' || true); do unset "$v"; done
unset EDDY_STATE
DAEMONS=()  # "name:pid", in start order
JOBS=()

step() { printf '\n== %s\n' "$*"; }
now() { date +%H:%M:%S; }
log_tails() {
  local f
  for f in "$CL"/munged.log "$CL"/slurmctld.log "$CL"/slurmd-n*.log "$OUT"/slurm-*.out; do
    [ -s "$f" ] && { echo "--- $f:"; tail -n 20 "$f"; }
  done
  return 0
}
fail() { trap - ERR; printf '\nFAILED: %s\n' "$*" >&2; log_tails >&2; exit 1; }
# A Slurm client command, bounded in time (as root, or as the job's user with `as_user`).
sl() { timeout "$CLIENT" "$@" </dev/null; }
as_user() { (cd "$CL/jobs" && timeout "$CLIENT" runuser -u "$USER_" -- "$@" </dev/null); }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Waits up to $1 seconds for the command after it to succeed.
wait_until() {
  local bound=$1; shift
  local end=$((SECONDS + bound))
  until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.25; done
}

# Pids of this demo's processes but this shell: their command line names $DIR, or they run
# under this cluster (SLURM_CONF in their environment: slurmstepd, the job's processes).
ours() {
  local p
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$p" != $$ ] || continue
    grep -qaF -- "$DIR" "/proc/$p/cmdline" 2>/dev/null ||
      grep -qaF -- "SLURM_CONF=$SLURM_CONF" "/proc/$p/environ" 2>/dev/null && echo "$p"
  done
  return 0
}

gone() { ! kill -0 "$1" 2>/dev/null; }
# (No command substitution here: bash may fail to parse one in a trap run mid-parse.)
no_jobs_left() { sl squeue -h -o %i >"$DIR/.left" 2>/dev/null; [ ! -s "$DIR/.left" ]; }
no_stepd_left() { ours >"$DIR/.ours"; ! pgrep -x slurmstepd | grep -qxF -f "$DIR/.ours"; }

cleanup() {
  set +e
  trap - EXIT INT TERM ERR
  if [ -e "$SLURM_CONF" ]; then
    sl scancel --partition eddy >/dev/null 2>&1
    for j in "${JOBS[@]}"; do sl scancel --hurry "$j" >/dev/null 2>&1; done
    wait_until 10 no_jobs_left
    wait_until 10 no_stepd_left
  fi
  local i name pid
  for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do  # slurmd, slurmctld, then munged
    name=${DAEMONS[i]%%:*} pid=${DAEMONS[i]##*:}
    kill -TERM "$pid" 2>/dev/null
    wait_until 5 gone "$pid" || kill -KILL "$pid" 2>/dev/null
  done
  # Leftovers of a failed run: mounts under the directory, processes of the demo.
  awk -v d="$DIR/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r |
    while read -r m; do umount -l "$m"; done
  ours >"$DIR/.ours"
  while read -r pid; do kill -KILL "$pid" 2>/dev/null; done <"$DIR/.ours"
  sleep 0.2
  timeout 30 rm -rf --one-file-system "$DIR"
}
# A command failing under set -e: say which (once, from the main shell), with the logs.
on_err() { [ "$BASHPID" != $$ ] || { printf '\nFAILED: line %s: %s\n' "$1" "$2" >&2; log_tails >&2; }; }
set -E
trap 'on_err $LINENO "$BASH_COMMAND"' ERR
trap cleanup EXIT
trap 'exit 130' INT TERM

# Starts a daemon in the foreground of its own, output to $CL/<name>.out.
spawn() {
  local name=$1; shift
  (cd "$CL" && exec "$@") >"$CL/$name.out" 2>&1 </dev/null &
  DAEMONS+=("$name:$!")
}
daemons_alive() {
  local d
  for d in "${DAEMONS[@]}"; do kill -0 "${d##*:}" 2>/dev/null || fail "${d%%:*} exited"; done
}
nodes_idle() { daemons_alive; [ "$(sl sinfo -h -N -o '%N %t' 2>/dev/null | sort | tr '\n' ' ')" = "n1 idle n2 idle n3 idle " ]; }

start_cluster() {
  local host; host=$(hostname -s)
  mkdir -p "$CL/munge-key" "$CL/munge" "$CL/jobs" "$CL/ctld-state" "$CL/slurmd-spool"
  chmod 0700 "$CL/munge-key"; chmod 1777 "$CL/jobs"
  head -c 1024 /dev/urandom >"$CL/munge-key/munge.key"; chmod 0400 "$CL/munge-key/munge.key"
  spawn munged munged -F --socket="$CL/munge/munge.socket" --key-file="$CL/munge-key/munge.key" \
    --pid-file="$CL/munge/munged.pid" --log-file="$CL/munged.log" --seed-file="$CL/munge/munged.seed"
  wait_until 30 test -S "$CL/munge/munge.socket" || fail "no munge socket after 30 s"
  local p1 p2 p3
  p1=$(free_port) p2=$(free_port) p3=$(free_port)
  cat >"$SLURM_CONF" <<EOF
ClusterName=eddydemo
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$CL/munge/munge.socket
StateSaveLocation=$CL/ctld-state
SlurmdSpoolDir=$CL/slurmd-spool/%n
SlurmctldPidFile=$CL/slurmctld.pid
SlurmdPidFile=$CL/slurmd-%n.pid
SlurmctldLogFile=$CL/slurmctld.log
SlurmdLogFile=$CL/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
BurstBufferType=burst_buffer/lua
DebugFlags=BurstBuffer
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.11 Port=$p1 CPUs=1 RealMemory=100 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.12 Port=$p2 CPUs=1 RealMemory=100 State=UNKNOWN
NodeName=n3 NodeHostname=$host NodeAddr=127.0.0.13 Port=$p3 CPUs=1 RealMemory=100 State=UNKNOWN
PartitionName=eddy Nodes=n1,n2,n3 Default=YES MaxTime=INFINITE State=UP
EOF
  printf 'Directive=EDDY\nFlags=TeardownFailure\nStageInTimeout=120\nStageOutTimeout=120\nOtherTimeout=120\n' \
    >"$CL/burst_buffer.conf"
  # The project's burst_buffer.lua with its two settings lines pointed at this build and site.
  sed -e "s|^local EDDY = .*|local EDDY = \"$EDDY\"|" -e "s|^local SITE = .*|local SITE = \"$SITE/bb.toml\"|" \
    "$LUA_SRC" >"$CL/burst_buffer.lua"
  grep -q "^local EDDY = \"$EDDY\"" "$CL/burst_buffer.lua" && grep -q "^local SITE = \"$SITE/bb.toml\"" "$CL/burst_buffer.lua" ||
    fail "the settings lines of $LUA_SRC moved"
  spawn slurmctld slurmctld -D -c -f "$SLURM_CONF"
  for i in 1 2 3; do spawn "slurmd-n$i" slurmd -D -f "$SLURM_CONF" -N "n$i"; done
  wait_until 30 nodes_idle || fail "nodes not idle after 30 s: $(sl sinfo -h -N -o '%N %t' | tr '\n' ' ')"
}

# The site file eddy bb reads: every node is this host (launcher "{cmd}"), three I/O nodes.
write_site() {
  mkdir -p "$SITE" "$OUT"; chmod 1777 "$OUT"
  cat >"$SITE/bb.toml" <<EOF
state_dir = "$SITE/jobs"
mount = "$SITE/mnt/{job}"
node_root = "$SITE/nodes/{host}/job-{job}"
launcher = "{cmd}"
node_local_capacity = "8GiB"
[pool]
name = "io"
nodes = ["io1 127.0.0.21", "io2 127.0.0.22", "io3 127.0.0.23"]
root = "$SITE/pool/{host}/job-{job}"
capacity = "4GiB"
EOF
}

# The "parallel file system": a few MiB of data and a small tree, owned by the job's user.
make_inputs() {
  mkdir -p "$PFS/run/inputs/deep/er"
  head -c $((8 << 20)) /dev/urandom >"$PFS/run/inputs/a.dat"
  seq 1 20000 >"$PFS/run/inputs/deep/numbers.txt"
  echo "input b" >"$PFS/run/inputs/deep/er/b.txt"
  chown -R "$USER_:$(id -gn "$USER_")" "$PFS"
  (cd "$PFS/run/inputs" && find . -type f | sort | xargs sha256sum) >"$DIR/inputs.sha256"
}

# The user's job: node-local Eddy on its 3 nodes, /data linked to the PFS, inputs staged in
# before it starts, results staged out after it ends.
job_script() {
  cat <<EOF
#!/bin/bash
#SBATCH -N 3
#SBATCH -o $OUT/slurm-%j.out
#EDDY capacity=1G pool=node-local
#EDDY link /data=$PFS/run
#EDDY stage_in /data/inputs
#EDDY stage_out /data/results
set -eu
EDDY=$EDDY
echo "Eddy mounted at \$EDDY_MOUNT on \$SLURM_JOB_NODELIST"
mkdir -p "\$EDDY_MOUNT/data/results"
cp -r "\$EDDY_MOUNT/data/inputs" "\$EDDY_MOUNT/data/results/copy"
# One step on each node, reading the staged inputs through the node's own mount.
srun -N 3 sh -c 'sha256sum < "\$EDDY_MOUNT/data/inputs/a.dat" > "\$EDDY_MOUNT/data/results/a.sha256.\$SLURMD_NODENAME"'
"\$EDDY" status
echo scratch > "\$EDDY_MOUNT/scratch.txt"  # outside /data: never staged out
sleep 3
EOF
}

# sbatch as the user; prints the job id, or sbatch's message and fails.
submit() {
  local file=$1 out
  out=$(as_user sbatch --parsable "$file" 2>&1) || { echo "$out"; return 1; }
  echo "${out%%;*}"
}

# Field $2 of a `scontrol show job -o` line $1.
field() { grep -o "\b$2=[^ ]*" <<<"$1" | head -n 1 | cut -d= -f2 || true; }

# Prints every change of JobState / BurstBufferState of job $1 until the job has ended and
# teardown removed its state; `scontrol show burst` once while it runs.
follow() {
  local job=$1 t0=${EPOCHREALTIME/./} last="" line cur js bs ms shown=0 end=$((SECONDS + JOB_BOUND + TEARDOWN_BOUND))
  while :; do
    line=$(sl scontrol show job -o "$job" 2>/dev/null || true)
    js=$(field "$line" JobState) bs=$(field "$line" BurstBufferState)
    cur="JobState=${js:-?} BurstBufferState=${bs:--}"
    if [ "$cur" != "$last" ]; then
      ms=$(((${EPOCHREALTIME/./} - t0) / 1000))
      printf '%s  +%3d.%02ds  %s\n' "$(now)" $((ms / 1000)) $((ms % 1000 / 10)) "$cur"
      last=$cur
    fi
    if [ "$js" = RUNNING ] && [ $shown = 0 ]; then
      shown=1
      echo "---- scontrol show burst (while the job runs):"
      sl scontrol show burst | sed 's/^/     /'
      echo "----"
    fi
    case $js in
      COMPLETED) [ "$bs" != complete ] || return 0 ;;
      FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
        fail "job $job ended $js: $(field "$line" Reason)" ;;
    esac
    [ $SECONDS -lt $end ] || fail "job $job not done after $((JOB_BOUND + TEARDOWN_BOUND)) s: $cur, reason $(sl squeue -h -j "$job" -o %r)"
    sleep 0.02  # scontrol answers in ~10 ms; staging-in may last only ~0.1 s
  done
}

# Nothing of job $1 is left: state, mount, storage on the nodes and I/O nodes, processes.
check_gone() {
  local job=$1 mnt="$SITE/mnt/$1" left
  wait_until "$TEARDOWN_BOUND" test ! -e "$SITE/jobs/$job" || fail "job $job's state is still in $SITE/jobs/$job"
  ! awk -v m="$mnt" '$2 == m' /proc/mounts | grep -q . || fail "$mnt is still mounted"
  [ ! -e "$mnt" ] || fail "mount point $mnt is left"
  left=$(find "$SITE/nodes" "$SITE/pool" -maxdepth 2 -name "job-$job" 2>/dev/null || true)
  [ -z "$left" ] || fail "storage left: $left"
  left=$(pgrep -af "$DIR/.*job-$job" || true)
  [ -z "$left" ] || fail "processes of job $job left: $left"
}

step "a private Slurm: munged, slurmctld, slurmd n1..n3 on 127.0.0.11-13 (burst_buffer/lua), in $DIR"
[ "$(id -u)" = 0 ] || fail "run as root (the Slurm daemons run as root, SlurmUser=root)"
[ -x "$EDDY" ] || fail "no $EDDY: build first (cargo build --release --bins)"
for t in munged slurmctld slurmd sbatch srun scontrol squeue scancel sinfo runuser python3; do
  command -v "$t" >/dev/null || fail "$t is missing (make deps)"
done
[ -e /dev/fuse ] || fail "/dev/fuse is missing"
write_site
make_inputs
start_cluster
sl sinfo

step "the parallel file system: $PFS/run (owned by $USER_)"
(cd "$PFS/run" && find inputs -type f -printf '%8s  %p\n' | sort -k2)

step "the job script ($USER_'s)"
job_script >"$CL/jobs/job.sh"; chmod 0644 "$CL/jobs/job.sh"
cat "$CL/jobs/job.sh"

step "submit: sbatch as $USER_"
JOB=$(submit "$CL/jobs/job.sh") || fail "sbatch refused the job: $JOB"
JOBS+=("$JOB")
echo "Submitted batch job $JOB"

step "job $JOB: its states as scontrol shows them"
follow "$JOB"

step "job $JOB's output"
cat "$OUT/slurm-$JOB.out"

step "results in the parallel file system: $PFS/run/results"
RES="$PFS/run/results"
(cd "$RES" && find . -type f -printf '%8s  %u  %p\n' | sort -k3)
(cd "$RES/copy" && find . -type f | sort | xargs sha256sum) >"$DIR/copy.sha256"
cmp -s "$DIR/inputs.sha256" "$DIR/copy.sha256" || fail "the staged-out copy differs: $(diff "$DIR/inputs.sha256" "$DIR/copy.sha256")"
echo "checksums of the $(wc -l <"$DIR/inputs.sha256") copied files: identical to the inputs"
want=$(sha256sum <"$PFS/run/inputs/a.dat")
for n in n1 n2 n3; do
  [ "$(cat "$RES/a.sha256.$n" 2>/dev/null)" = "$want" ] || fail "the step on $n read a.dat wrong (or wrote nothing)"
done
echo "a.dat read on n1, n2 and n3 by the srun step: sha256 ${want%% *} on each"
[ ! -e "$PFS/scratch.txt" ] || fail "scratch outside /data was staged out"
echo "scratch outside /data: not staged out"

step "a refused submission: a stage_in under no link"
sed 's|^#EDDY stage_in .*|#EDDY stage_in /elsewhere|' "$CL/jobs/job.sh" >"$CL/jobs/bad.sh"
chmod 0644 "$CL/jobs/bad.sh"
grep -n '^#EDDY' "$CL/jobs/bad.sh"
if BAD=$(submit "$CL/jobs/bad.sh"); then JOBS+=("$BAD"); fail "sbatch accepted the bad job ($BAD)"; fi
echo "sbatch said: $BAD"
grep -q '#EDDY line 6' <<<"$BAD" || fail "sbatch's message names no #EDDY line 6"

step "what is left of job $JOB"
check_gone "$JOB"
left=$(pgrep -af "eddyd.*$DIR" || true)
[ -z "$left" ] || fail "eddy daemons left: $left"
echo "job $JOB: no daemon, no mount and no storage left (state, $SITE/mnt/$JOB, node and pool roots, processes)"
