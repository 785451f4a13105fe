#!/bin/sh
# testbed vm: stage 2 (testbed/vm/guest/stage2.sh), PID 1 on this machine's root under the
# guest's overlay: mounts, network, congestion controls, the command.
#
# testbed/vm/job.py puts this run's settings above it:
#   BB             the initramfs's static busybox (its applets: `$BB mount`), or empty: this
#                  machine's programs
#   MSIZE          9p message size
#   KMODULES       the guest kernel's unpacked lib/modules (read through the 9p root)
#   MODPROBE       this machine's modprobe (kmod; the kernel calls it too)
#   GUEST_HOSTNAME, CONGESTION (controls to allow), CWD, TTY (1: the console is the command's
#   terminal), TERM_COLUMNS, TERM_LINES, START_MARKER, EXIT_MARKER (console lines the host
#   looks for)
#   job_shares     calls `share TAG PATH [ro]` per read-write share, parents first
#   job_env        exports the command's environment
#   job_command    runs the command (its program an absolute path: busybox's sh prefers its
#                  applets)
# /run/testbed-vm is testbed/vm/common.py's GUEST_DIR; the job's share is mounted at job/.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
JOB=/run/testbed-vm/job
finish() { $BB sync; echo o > /proc/sysrq-trigger; $BB sleep 60; }
fail() { echo "testbed-vm: $*"; finish; }
share() {
  $BB mkdir -p "$2"
  $BB mount -t 9p -o "trans=virtio,version=9p2000.L,msize=$MSIZE${3:+,$3}" "$1" "$2" \
    || fail "mounting $2"
}
echo 3 > /proc/sys/kernel/printk  # errors only on the console from here on
# The kernel's modules, through the read-only 9p root. /tmp stays the host's (under the
# overlay): the project or its venv may live there, e.g. in a CI checkout.
$BB mkdir -p /lib/modules
$BB mount --bind "$KMODULES" /lib/modules || fail 'no kernel modules'
$BB mkdir -p /dev/pts /dev/shm
$BB mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
$BB mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
job_shares
echo "$GUEST_HOSTNAME" > /proc/sys/kernel/hostname
$BB ip link set lo up
# The allowed list is global and set in the init namespace; writing it does not load modules
# and an unknown name fails the whole write: load, then add one at a time.
mods=
for cc in $CONGESTION; do mods="$mods tcp_$cc"; done
# shellcheck disable=SC2086  # one word per module
"$MODPROBE" -q -a $mods 2>/dev/null
allowed=
for cc in $CONGESTION; do
  # (no leading space: the kernel stops at an empty name and allows nothing)
  try="${allowed:+$allowed }$cc"
  echo "$try" > /proc/sys/net/ipv4/tcp_allowed_congestion_control 2>/dev/null && allowed="$try"
done
job_env
cd "$CWD" || fail "no directory $CWD"
$BB stty cols "$TERM_COLUMNS" rows "$TERM_LINES" 2>/dev/null
echo "$START_MARKER"
if [ "$TTY" = 1 ]; then
  job_command </dev/null
  rc=$?
else  # not a terminal, like the host's stdout
  { job_command </dev/null; echo $? > /run/testbed-vm/rc; } 2>&1 | $BB cat
  read -r rc < /run/testbed-vm/rc
fi
echo "$rc" > "$JOB/exit"
echo "$EXIT_MARKER$rc"
finish
