"""An el9 lab node: real dnf and rpm against the lab's signed RPM repository (gpgcheck=1,
repo_gpgcheck=1), the driver's module streams, scriptlets that change the emulated node,
and unsigned or tampered metadata and packages refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from gpuboot import paths
from gpuboot_lab import lab as labmod
from gpuboot_lab import rpmrepo
from gpuboot_lab.catalogue import load_catalogue
from gpuboot_lab.repo import ensure_lab_key

from .conftest import ssh, ssh_ok

pytestmark = pytest.mark.lab

DRIVER = "3:550.54.15-1.el9"
DRIVER_RPMS = " ".join(
    f"{n}-{DRIVER}" for n in ("nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-open-dkms")
)
KEY = "/etc/pki/rpm-gpg/RPM-GPG-KEY-gpuboot-lab"


def _repo_file(repo_id: str, baseurl: str) -> str:
    return (
        f"cat > /etc/yum.repos.d/{repo_id}.repo <<'EOF'\n[{repo_id}]\nname={repo_id}\n"
        f"baseurl={baseurl}\ngpgcheck=1\nrepo_gpgcheck=1\ngpgkey=file://{KEY}\nEOF\n"
    )


@pytest.fixture(scope="module")
def el9() -> labmod.Lab:
    if not shutil.which("podman"):
        pytest.skip("podman is not installed (run `make setup`)")
    name = f"t{os.getpid() % 10000}-el{uuid.uuid4().hex[:5]}"
    try:
        lab = labmod.up(name, 1, "hgx-h100-sxm-8gpu", os_spec="el9")
        inv = (lab.dir / "inventory.yml").read_text()
        assert "gpuboot_os_family: redhat" in inv
        url = next(
            line.split(": ", 1)[1] for line in inv.splitlines() if "gpuboot_dnf_repo_url" in line
        )
        key = Path(
            next(
                line.split(": ", 1)[1]
                for line in inv.splitlines()
                if "gpuboot_dnf_repo_key_file" in line
            )
        ).read_text()
        # What the roles do on an air-gapped EL site: the lab repo and its key, nothing else.
        ssh_ok(lab, f"cat > {KEY} <<'EOF'\n{key}EOF\n" + _repo_file("gpuboot-lab", url))
        yield lab
    finally:
        if name in labmod.names():
            labmod.down(name)


def test_the_node_is_el9_with_only_its_release_rpm(el9: labmod.Lab) -> None:
    out = ssh_ok(el9, ". /etc/os-release; echo $ID $VERSION_ID $PLATFORM_ID; rpm -qa")
    assert out.split() == ["rocky", "9.4", "platform:el9", "gpuboot-lab-release-9.4-1.el9.noarch"]


def test_dnf_installs_the_pinned_driver_from_its_stream(el9: labmod.Lab) -> None:
    streams = ssh_ok(el9, "dnf -y -q module list nvidia-driver")
    for stream in ("550-open", "550-dkms", "580-open"):
        assert f"nvidia-driver {stream} " in streams
    # Modular packages stay hidden until their stream is enabled, as in NVIDIA's repository.
    hidden = ssh(el9, "node1", f"dnf -y install {DRIVER_RPMS}")
    assert hidden.returncode != 0
    ssh_ok(el9, "dnf -y -q module enable nvidia-driver:550-open")
    assert "550-open [e]" in ssh_ok(el9, "dnf -y -q module list --enabled nvidia-driver")
    ssh_ok(el9, f"dnf -y install {DRIVER_RPMS}")
    nevra = ssh_ok(el9, "rpm -q --qf '%{EPOCH}:%{VERSION}-%{RELEASE}' nvidia-driver")
    assert nevra == DRIVER
    # The packages' files and scriptlets changed the emulated node: the open module is
    # installed for the emulator, nvidia-persistenced enabled by %post (preset).
    ko = ssh_ok(el9, "cat /lib/modules/gpuemu/nvidia.ko")
    assert "flavor=open" in ko and "package=kmod-nvidia-open-dkms" in ko
    assert ssh_ok(el9, "systemctl is-enabled nvidia-persistenced").strip() == "enabled"
    smi = "nvidia-smi --query-gpu=driver_version --format=csv,noheader"
    assert ssh_ok(el9, f"modprobe nvidia && {smi}").split() == ["550.54.15"] * 8


def test_upgrade_and_erase_run_the_scriptlets_with_rpm_counts(el9: labmod.Lab) -> None:
    newer = DRIVER_RPMS.replace("550.54.15", "550.127.08")
    upgrade = ssh(el9, "node1", f"dnf -y install {newer}")
    assert upgrade.returncode == 0, upgrade.stderr
    # %post with $1=2 is Debian's "configure <old>": the loaded module stays until reboot.
    assert "nvidia 550.54.15 stays loaded until reboot" in upgrade.stdout + upgrade.stderr
    mismatch = ssh(el9, "node1", "nvidia-smi")
    assert mismatch.returncode == 18 and "Driver/library version mismatch" in mismatch.stdout
    # An erase ($1=0) runs postrm remove then purge: the unit is disabled.
    ssh_ok(el9, "dnf -y remove nvidia-persistenced")
    wants = "/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service"
    assert ssh(el9, "node1", f"test -e {wants}").returncode != 0


def _lab_signer() -> tuple[Path, str]:
    gnupghome = paths.home() / "gnupg"
    return gnupghome, ensure_lab_key(gnupghome)


def test_unsigned_or_tampered_packages_and_metadata_are_refused(
    el9: labmod.Lab, tmp_path: Path
) -> None:
    cat = load_catalogue()
    gnupghome, fpr = _lab_signer()
    probes = next(p for p in cat.rpms if (p.name, p.version) == ("gpuboot-probes", "0.5-1"))
    unsigned = rpmrepo._build_rpm(probes, cat, tmp_path / "work", tmp_path / "out")
    signed = paths.home() / "repo" / "rpm" / "Packages" / "gpuboot-probes-0.6-1.x86_64.rpm"
    tampered = tmp_path / "out" / signed.name
    data = bytearray(signed.read_bytes())
    data[-40] ^= 0xFF  # inside the compressed payload
    tampered.write_bytes(bytes(data))
    # Metadata signed by the lab key, so the package check is what refuses them.
    rpmrepo._tree(tmp_path / "evil", [unsigned, tampered], None, gnupghome, fpr)
    ident = el9.dir / "ssh" / "id_ed25519"
    known = el9.dir / "ssh" / "known_hosts"
    subprocess.run(
        [
            "scp",
            "-q",
            "-r",
            "-i",
            str(ident),
            "-o",
            f"UserKnownHostsFile={known}",
            "-o",
            "BatchMode=yes",
            str(tmp_path / "evil"),
            f"root@{el9.nodes[0].ip}:/root/evil",
        ],
        check=True,
    )
    ssh_ok(el9, _repo_file("evil", "file:///root/evil"))
    only = "dnf -y --disablerepo='*' --enablerepo=evil"
    for nevra in ("gpuboot-probes-0.5-1", "gpuboot-probes-0.6-1"):
        refused = ssh(el9, "node1", f"{only} install {nevra}")
        assert refused.returncode != 0, refused.stdout
        assert "GPG check FAILED" in refused.stdout + refused.stderr or (
            "digest" in (refused.stdout + refused.stderr).lower()
        )
    assert ssh(el9, "node1", "rpm -q gpuboot-probes").returncode != 0
    # repo_gpgcheck: metadata changed after signing is refused before any package.
    ssh_ok(el9, "sed -i 's|<revision>|<revision>0|' /root/evil/repodata/repomd.xml")
    stale = ssh(el9, "node1", f"dnf clean all >/dev/null; {only} makecache")
    assert stale.returncode != 0
    assert "signature" in (stale.stdout + stale.stderr).lower()
