#!/bin/sh
# Build the lab node image: Debian bookworm minbase with systemd as PID 1 and sshd.
# Usage: build-node-image.sh ROOTFS MIRROR IMAGE_TAG
# Runs as root with PODMAN pointing at the lab's podman wrapper config (env).
# The image's tag carries a hash of this file, so editing it makes a new image.
set -eu
rootfs=$1 mirror=$2 tag=$3

debootstrap --variant=minbase \
  --include=systemd-sysv,dbus,openssh-server,python3,python3-apt,sudo,iproute2,procps,ca-certificates,kmod \
  bookworm "$rootfs" "$mirror"

# Nodes see only the lab repository (configured by the roles, as on an air-gapped site).
rm -f "$rootfs"/etc/apt/sources.list "$rootfs"/etc/apt/sources.list.d/*
# An empty resolv.conf: no DNS exists on the lab network and lookups would stall.
: > "$rootfs"/etc/resolv.conf
# Host keys are generated per node by `gpuboot lab up` and bind-mounted in; the
# image's own would be shared by every node.
rm -f "$rootfs"/etc/ssh/ssh_host_*
cat > "$rootfs"/etc/ssh/sshd_config.d/gpuboot-lab.conf <<'CONF'
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
MaxStartups 100:30:200
CONF
mkdir -p "$rootfs"/root/.ssh && chmod 700 "$rootfs"/root/.ssh

# The emulated hardware: /opt/gpuemu is bind-mounted at run time. Its kernel-side
# tools shadow the real ones (root's PATH has /usr/local/sbin first).
for tool in lsmod modprobe rmmod modinfo dmesg; do
  ln -sf /opt/gpuemu/gpuemu "$rootfs/usr/local/sbin/$tool"
done
cat > "$rootfs"/etc/systemd/system/gpuemu-boot.service <<'UNIT'
[Unit]
Description=Emulated GPU/NIC hardware: power-on (load installed modules, apply persistent settings)
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target ssh.service
ConditionPathExists=/opt/gpuemu/gpuemu

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/opt/gpuemu/gpuemu ctl boot

[Install]
WantedBy=sysinit.target
UNIT
ln -sf /etc/systemd/system/gpuemu-boot.service "$rootfs"/etc/systemd/system/sysinit.target.wants/gpuemu-boot.service

# Units that only make sense on real hardware or slow down boot in a container.
for unit in systemd-udevd.service systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer \
            e2scrub_all.timer fstrim.timer getty@tty1.service; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done

chroot "$rootfs" apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/usr/share/doc/* \
       "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*

tar -C "$rootfs" -c . | podman import --change 'CMD ["/sbin/init"]' - "$tag" >/dev/null
