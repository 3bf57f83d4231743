#!/bin/sh
# Build an EL lab node image on top of the Debian node image: the same Debian userland
# (systemd as PID 1, sshd, the emulator's shims) plus REAL dnf 4.14, rpm 4.18, python3-dnf
# and dnf-plugins-core (versionlock) from Debian's archive, an rpm database, and the OS
# identity of Rocky Linux EL_MAJOR (os-release, release rpm). Only that identity is
# emulated, as the GPU hardware is; packages are managed by the real dnf and rpm.
# Usage: build-node-image-el.sh ROOTFS MIRROR IMAGE_TAG EL_MAJOR BASE_IMAGE
# Runs as root with PODMAN pointing at the lab's podman config (env). The tag carries a
# hash of this file and of the Debian builder, so editing either makes a new image.
set -eu
rootfs=$1 mirror=$2 tag=$3 el=$4 base=$5

case "$el" in
  8) version_id=8.10 pretty="Rocky Linux 8.10 (Green Obsidian)" ;;
  9) version_id=9.4 pretty="Rocky Linux 9.4 (Blue Onyx)" ;;
  10) version_id=10.0 pretty="Rocky Linux 10.0 (Red Quartz)" ;;
  *) echo "unknown EL major version: $el" >&2; exit 2 ;;
esac

mkdir -p "$rootfs"
cid=$(podman create "$base" /bin/true)
podman export "$cid" | tar -C "$rootfs" -x
podman rm "$cid" >/dev/null

cleanup() {
  umount "$rootfs/proc" 2>/dev/null || true
  umount "$rootfs/dev" 2>/dev/null || true
}
trap cleanup EXIT
mkdir -p "$rootfs/proc" "$rootfs/dev"
mount --bind /dev "$rootfs/dev"
mount -t proc proc "$rootfs/proc"

# Debian's archive for the build only; the node ends with no repositories at all.
echo "deb $mirror bookworm main" > "$rootfs"/etc/apt/sources.list.d/build.list
cp /etc/resolv.conf "$rootfs"/etc/resolv.conf
chroot "$rootfs" apt-get update -qq
DEBIAN_FRONTEND=noninteractive chroot "$rootfs" apt-get install -y -qq --no-install-recommends \
  dnf rpm python3-dnf dnf-plugins-core gnupg >/dev/null
rm -f "$rootfs"/etc/apt/sources.list.d/build.list
: > "$rootfs"/etc/resolv.conf

# Debian's rpm keeps its database in ~/.rpmdb (dpkg owns the system); an EL node's is
# /var/lib/rpm, which dnf and rpm both read through this macro.
mkdir -p "$rootfs"/etc/rpm "$rootfs"/var/lib/rpm
echo "%_dbpath /var/lib/rpm" > "$rootfs"/etc/rpm/macros
chroot "$rootfs" rpm --initdb

# dnf.conf as RHEL ships it (Debian's sets skip_if_unavailable=True, best=False).
cat > "$rootfs"/etc/dnf/dnf.conf <<'CONF'
[main]
gpgcheck=1
installonly_limit=3
clean_requirements_on_remove=True
best=True
skip_if_unavailable=False
CONF
mkdir -p "$rootfs"/etc/yum.repos.d "$rootfs"/etc/pki/rpm-gpg
# Debian's dnf-plugins-core turns on plugins RHEL ships in separate, uninstalled packages
# (local, post-transaction-actions): off. versionlock stays on, as once
# python3-dnf-plugin-versionlock is installed.
for plugin in local post-transaction-actions; do
  sed -i 's/^enabled *=.*/enabled=0/' "$rootfs/etc/dnf/plugins/$plugin.conf"
done

rm -f "$rootfs"/etc/os-release
cat > "$rootfs"/usr/lib/os-release <<EOF
NAME="Rocky Linux"
VERSION="$version_id"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="$version_id"
PLATFORM_ID="platform:el$el"
PRETTY_NAME="$pretty"
ANSI_COLOR="0;32"
CPE_NAME="cpe:/o:rocky:rocky:$el"
HOME_URL="https://rockylinux.org/"
VARIANT="gpuboot lab (emulated OS identity on a Debian bookworm userland)"
VARIANT_ID="gpuboot-lab"
EOF
ln -s ../usr/lib/os-release "$rootfs"/etc/os-release
printf '%s\n' "$pretty" > "$rootfs"/etc/redhat-release
ln -sf redhat-release "$rootfs"/etc/rocky-release
ln -sf redhat-release "$rootfs"/etc/system-release

# The userland is dpkg's. The rpm side learns of it through one package whose Provides
# are the EL names of what dpkg installed (the release identity, /bin/sh that every
# scriptlet needs, dnf and its versionlock plugin...), so dnf resolves an emulated
# package's requirements honestly against what the node really has.
top=/root/gpuboot-lab-release
mkdir -p "$rootfs$top/SPECS"
cat > "$rootfs$top/SPECS/gpuboot-lab-release.spec" <<EOF
Name: gpuboot-lab-release
Version: $version_id
Release: 1.el$el
Summary: gpuboot lab: Rocky Linux $el identity over a Debian bookworm userland
License: Apache-2.0
BuildArch: noarch
AutoReqProv: no
Provides: system-release = $version_id
Provides: system-release(releasever) = $el
Provides: redhat-release = $version_id
Provides: rocky-release = $version_id
Provides: base-module(platform:el$el)
Provides: /bin/sh
Provides: /bin/bash
Provides: /usr/bin/python3
Provides: bash coreutils glibc systemd systemd-udev dbus openssh-server sudo iproute
Provides: procps-ng kmod ca-certificates gnupg2 python3 rpm
Provides: dnf = 4.14.0
Provides: python3-dnf = 4.14.0
Provides: dnf-plugins-core = 4.3.1
Provides: python3-dnf-plugin-versionlock = 4.3.1

%description
Declares the Debian (dpkg-owned) base of a gpuboot lab node to rpm. Ships no files.

%files
EOF
chroot "$rootfs" rpmbuild --quiet --define "_topdir $top" -bb "$top/SPECS/gpuboot-lab-release.spec"
chroot "$rootfs" sh -c "rpm -i $top/RPMS/noarch/*.rpm"
rm -rf "$rootfs$top"

cleanup
trap - EXIT
chroot "$rootfs" apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/usr/share/doc/* \
       "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* "$rootfs"/var/cache/dnf/*

tar -C "$rootfs" -c . | podman import --change 'CMD ["/sbin/init"]' - "$tag" >/dev/null
