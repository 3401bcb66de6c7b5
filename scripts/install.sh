#!/usr/bin/env bash
# Installs everything vgpuadm and its test lanes need on a fresh Debian 12 machine: Debian packages (libvirt and
# QEMU for the libvirt lane, build deps of libvirt-python, mdevctl, Chromium, promtool, and the kernel lane's
# kernel + headers + source), then a virtualenv in .venv with vgpuadm installed editable with its test extras.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo

APT_PACKAGES=(
  gcc pkg-config libvirt-dev python3-venv            # build libvirt-python
  libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils   # the libvirt lane (real libvirtd)
  mdevctl                                            # interop checks and the mdevctl benchmark baseline
  openssh-client openssh-server                      # migrate check reads a target over ssh (a real sshd on 127.0.0.1 in tests)
  chromium                                           # renders the HTML inventory in tests; drives the Cockpit page
  cockpit-ws cockpit-bridge                          # the Cockpit page's tests run a real cockpit-ws --local-session
  prometheus                                         # promtool check metrics
  linux-image-amd64 linux-headers-amd64 linux-source # the real-kernel lane (sample mdev drivers)
  busybox-static kmod util-linux iproute2 udev
  vagrant vagrant-libvirt                            # `vagrant validate` of the lab Vagrantfile (the provider's own checks)
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install.sh: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  # INITRD=No: the kernel lane boots the kernel directly (virtme-ng), an initramfs build would only cost time.
  # Recommends stay on: the lanes were verified with them (QEMU's firmware and virtiofsd, Chromium's fonts).
  log=$(mktemp /tmp/vgpuadm-apt.XXXXXX.log)
  if ! $SUDO env DEBIAN_FRONTEND=noninteractive INITRD=No apt-get install -y -qq "${missing[@]}" >"$log" 2>&1; then
    tail -n 20 "$log"
    echo "install.sh: apt-get install failed (full log: $log)" >&2
    exit 1
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import vgpuadm, libvirt, typer, pytest, ansible, playwright" 2>/dev/null \
   || [ pyproject.toml -nt .venv/.installed ]; then
  .venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
  touch .venv/.installed
fi
echo "install.sh: ready (.venv/bin/vgpuadm)"
