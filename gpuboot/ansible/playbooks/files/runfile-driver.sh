# What NVIDIA's .run installer leaves on a node that no package owns (NVIDIA's README,
# "Installing the NVIDIA Driver": nvidia-installer installs itself as
# /usr/bin/nvidia-installer, used later to uninstall; the kernel modules go to
# /lib/modules/<release>/kernel/drivers/video). One line per unowned file on stdout
# ("unowned PATH"), then the installer's version from its log ("installer-version V"), and
# when anything is unowned the way out on stderr. Read-only; exit 0 whatever it finds.
# gpuboot plan appends it to its package read; install.yml runs it before any change.
# $1: the node's root when it is not / (a mounted image, a test's tree).
root=${1:-}
owned() {
    dpkg -S "$1" >/dev/null 2>&1 || dpkg -S "/usr$1" >/dev/null 2>&1 || rpm -qf "$1" >/dev/null 2>&1
}
found=
for f in "$root"/usr/bin/nvidia-installer "$root"/lib/modules/*/kernel/drivers/video/nvidia.ko \
    "$root"/lib/modules/*/kernel/drivers/video/nvidia.ko.xz \
    "$root"/lib/modules/*/kernel/drivers/video/nvidia.ko.zst; do
    [ -e "$f" ] || continue
    owned "${f#"$root"}" && continue
    printf 'unowned %s\n' "${f#"$root"}"
    found=1
done
[ -n "$found" ] || exit 0
version=
log="$root"/var/log/nvidia-installer.log
if [ -f "$log" ]; then
    version=$(head -c 4096 "$log" | sed -n 's/^installer version: *//p' | head -n 1)
    [ -z "$version" ] || printf 'installer-version %s\n' "$version"
fi
printf 'an NVIDIA driver%s is installed outside packages (the .run installer: /usr/bin/nvidia-installer or an nvidia.ko no package owns); gpuboot does not install packages over it: run `nvidia-installer --uninstall` on the node, reboot, then gpuboot install again\n' "${version:+ $version}" >&2
exit 0
