#!/usr/bin/env bash
# Runs INSIDE the kernel lane's guest, as root (started by run-lane.sh through `vng --exec`): loads vfio, mdev and
# the sample drivers, starts virtlogd + libvirtd, runs tests/kernel/guest with the venv's pytest. Host environment
# variables do not reach the guest, so everything is set here. Logs, junit XML and rc go to the results folder.
set -u
results=$1
modules=$2
# The test files to run (run-lane.sh's VGPUADM_KERNEL_TESTS), in that order; empty: the whole guest suite.
read -r -a tests <<<"${3:-}"
# run-lane.sh's VGPUADM_KERNEL_RESTORE_BENCH: the options test_restore_vs_mdevctl.py gives the restore bench.
export VGPUADM_KERNEL_RESTORE_BENCH="${4:-}"
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export PATH="$repo/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# PYTHONPATH: this checkout's vgpuadm also in child processes, whatever the venv's editable install points to.
export VGPUADM_KERNEL_GUEST=1 VGPUADM_KERNEL_RESULTS="$results" VGPUADM_KERNEL_MODULES="$modules" PYTHONPATH="$repo"
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/root
export LANG=C.UTF-8
uptime_s() { cut -d. -f1 /proc/uptime; }
# Where the guest's time goes: "<mark> <seconds since boot>" lines; run-lane.sh turns them into parts.log.
mark() { echo "$1 $(cut -d' ' -f1 /proc/uptime)" >> "$results/marks"; }
finish() { mark done; echo "$1" > "$results/rc"; exit "$1"; }
mark entry
echo "guest entry $(uptime_s)s after boot" > "$results/timing.log"

setup() (
  set -x
  uname -r
  modprobe -a vfio vfio_iommu_type1 mdev vfio-pci || exit 1
  insmod "$modules/mtty.ko" || exit 1
  insmod "$modules/mdpy.ko" || exit 1
  # mbochs's budget parameter is `count` (MiB) on 6.1, although its description says `mem`.
  insmod "$modules/mbochs.ko" count=96 || exit 1
  ls /sys/class/mdev_bus /dev/vfio
)
setup > "$results/setup.log" 2>&1
setup_rc=$?
mark setup
if [ "$setup_rc" != 0 ]; then
  cat "$results/setup.log"
  echo "guest: setup failed (see setup.log)"
  finish 3
fi
# The host's tree reaches the guest over 9p without caching (virtme-ng mounts it so): every stat and open is a round
# trip to the host, ~17 ms under TCG, and one Python process importing vgpuadm makes ~1,600 of them. Nothing on the
# host changes these parts during the run, so run-lane.sh's second 9p view of the tree, mounted with cache=loose
# (the guest keeps what it has read), serves them: the system's /usr, the venv and this checkout's code and guest
# tests. (The results folder stays on virtme-ng's own writable mount.)
cached=/run/lane-cached
if mkdir -p "$cached" && mount -t 9p -o ro,version=9p2000.L,trans=virtio,access=any,msize=524288,cache=loose \
    lanecache "$cached" >> "$results/setup.log" 2>&1; then
  for d in /usr "$(readlink -f "$repo/.venv")" "$repo/vgpuadm" "$repo/tests/kernel/guest"; do
    mount --bind "$cached$d" "$d" >> "$results/setup.log" 2>&1 || echo "guest: $d stays uncached" >> "$results/setup.log"
  done
fi
mark cached-mounts
# /var/log and /var/cache are empty tmpfs mounts in the guest: give libvirt its directories first. libvirtd needs
# ~40 s under TCG before it answers; tests/kernel/guest/conftest.py (libvirtd) waits for it.
mkdir -p /var/log/libvirt/qemu /var/cache/libvirt/qemu
# The on-demand hook test installs vgpuadm's qemu hook: into a tmpfs, never into the host's /etc/libvirt/hooks.
mkdir -p /etc/libvirt/hooks && mount -t tmpfs -o mode=0755 lane-hooks /etc/libvirt/hooks
# libvirtd probes every installed qemu-system-* binary when it starts, each one a QEMU run under TCG inside TCG
# (tens of seconds, minutes on a slow host). The tests only start x86_64 guests: hide the i386 emulator from it.
[ -e /usr/bin/qemu-system-i386 ] && mount --bind /dev/null /usr/bin/qemu-system-i386
{ virtlogd -d && libvirtd -d; } > "$results/libvirtd.log" 2>&1
echo $? > "$results/libvirtd.rc"
# For the lane's timing report: how long libvirtd takes to answer (it probes QEMU's capabilities under TCG).
mark libvirtd-started
(t0=$SECONDS; until virsh -c qemu:///system version >/dev/null 2>&1; do sleep 1; done
 mark libvirtd-answers
 echo "libvirtd answered after $((SECONDS - t0))s ($(uptime_s)s after boot)" >> "$results/timing.log") &

cd "$repo" || finish 4
echo "pytest starts $(uptime_s)s after boot" >> "$results/timing.log"
mark pytest-start
# -v and an unbuffered stdout: pytest.log names the running test, so a lane killed by its timeout still tells.
[ "${#tests[@]}" = 0 ] && tests=(tests/kernel/guest) || tests=("${tests[@]/#/tests/kernel/guest/}")
# Only the plugin the suite uses (pytest-timeout): autoloading the venv's others (hypothesis, xdist) costs tens of
# seconds of imports under TCG.
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest "${tests[@]}" -p pytest_timeout -p no:cacheprovider -v -rA \
  --durations=0 --timeout=1200 \
  --junitxml "$results/junit.xml" > "$results/pytest.log" 2>&1
rc=$?
mark pytest-end
cat "$results/pytest.log"
finish "$rc"
