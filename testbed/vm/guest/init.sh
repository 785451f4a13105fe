#!/bin/sh
# testbed vm: the initramfs's /init (testbed/vm/guest/init.sh), PID 1 of the guest.
#
# testbed/vm/initramfs.py puts these settings above it:
#   MODULES  file names in /modules, in load order (dependencies first)
#   MSIZE    9p message size
#   BUSYBOX  1 when /bin is a static busybox, empty when it holds this machine's programs
#
# It loads the modules, mounts this machine's / read-only over 9p under a tmpfs overlay (the
# guest may write anywhere; it all vanishes), mounts the job's share and switches root to
# stage 2 (the job's stage2.sh). Any failure powers off; the host then shows the console.
# With `testbed.probe` on the kernel command line it only says that it runs (the KVM trial).
# /run/testbed-vm is testbed/vm/common.py's GUEST_DIR.
export PATH=/bin
off() { echo o > /proc/sysrq-trigger; while :; do :; done; }
fail() { echo "testbed-vm: boot failed: $*"; off; }
mount -t devtmpfs devtmpfs /dev
mount -t proc proc /proc
read -r cmdline < /proc/cmdline
case " $cmdline " in *" testbed.probe "*) echo "testbed-vm: probe ok"; off;; esac
mount -t sysfs sysfs /sys
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
for m in $MODULES; do
  insmod "/modules/$m" || fail "insmod $m"
done
mount -t 9p -o "trans=virtio,version=9p2000.L,msize=$MSIZE,ro,cache=loose" root /lower \
  || fail "9p root"
mount -t tmpfs -o mode=0755 tmpfs /rw && mkdir /rw/upper /rw/work || fail tmpfs
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot \
  || fail "overlay root"
mkdir -p /run/testbed-vm/job /run/testbed-vm/bin
mount -t 9p -o "trans=virtio,version=9p2000.L,msize=$MSIZE" job /run/testbed-vm/job \
  || fail "9p job"
shell=/bin/sh
if [ -n "$BUSYBOX" ]; then
  # busybox's switch_root moves no mounts: move them first (util-linux's moves /dev, /proc,
  # /sys and /run, with the job, itself). Stage 2 runs busybox from the new root's /run.
  cp /bin/busybox /run/testbed-vm/bin/busybox
  for d in dev proc sys run; do
    mount --move "/$d" "/newroot/$d"
  done
  shell="/run/testbed-vm/bin/busybox sh"
fi
exec switch_root /newroot $shell /run/testbed-vm/job/stage2.sh
