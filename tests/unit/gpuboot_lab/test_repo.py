"""The lab's signed apt repository: built from packages.yaml, verified by gpgv and apt."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuboot.errors import ConfigError, RunError
from gpuboot_lab.catalogue import CATALOGUE_PATH, Catalogue, load_catalogue, parse_catalogue
from gpuboot_lab.repo import RepoInfo, _run, build_repo, deb_filename, ensure_lab_key

TOOLS = ("dpkg-deb", "apt-ftparchive", "gpg", "gpgv", "gpgconf", "apt-get", "apt-cache")
MISSING = [t for t in TOOLS if shutil.which(t) is None]
pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.skipif(
        bool(MISSING), reason=f"missing {MISSING}: apt-get install dpkg-dev apt-utils gnupg"
    ),
]

DRIVERS = {
    "535": ["535.183.01", "535.230.02"],
    "550": ["550.54.15", "550.127.08", "550.144.03"],
    "570": ["570.86.15", "570.133.20"],
    "580": ["580.65.06", "580.82.07"],
}
NVIDIA_MODULES = {"nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem"}


def _kill_agent(home: Path) -> None:
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True)


@pytest.fixture(scope="module")
def gnupghome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("gnupg")
    yield home
    _kill_agent(home)


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return load_catalogue()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, gnupghome: Path) -> RepoInfo:
    return build_repo(tmp_path_factory.mktemp("repo"), gnupghome)


def _paragraphs(text: str) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for block in text.strip().split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in block.splitlines():
            if line.startswith((" ", "\t")):
                fields[key] += "\n" + line
            else:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        out.append(fields)
    return out


def _index(repo: RepoInfo) -> dict[tuple[str, str], dict[str, str]]:
    path = repo.out_dir / "dists" / repo.suite / repo.component / "binary-amd64" / "Packages"
    return {(p["Package"], p["Version"]): p for p in _paragraphs(path.read_text())}


def _deb(repo: RepoInfo, catalogue: Catalogue, name: str, version: str) -> Path:
    pkg = catalogue.get(name, version)
    return repo.out_dir / "pool" / repo.component / name / deb_filename(pkg, "amd64")


def _data_tar(deb: Path) -> tarfile.TarFile:
    raw = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", str(deb)], check=True, capture_output=True
    ).stdout
    return tarfile.open(fileobj=io.BytesIO(raw))


def _read(deb: Path, member: str) -> str:
    tar = _data_tar(deb)
    fh = tar.extractfile(member)
    assert fh is not None, member
    return fh.read().decode()


# ------------------------------------------------------------------ catalogue


def test_catalogue_has_the_real_names_and_versions(catalogue: Catalogue) -> None:
    for branch, versions in DRIVERS.items():
        for stem in (
            "nvidia-driver-{}",
            "nvidia-driver-{}-open",
            "nvidia-dkms-{}",
            "nvidia-dkms-{}-open",
            "nvidia-utils-{}",
            "nvidia-compute-utils-{}",
            "nvidia-fabricmanager-{}",
            "libnvidia-nscq-{}",
        ):
            assert catalogue.versions_of(stem.format(branch)) == [f"{v}-1" for v in versions]
    assert catalogue.versions_of("cuda-toolkit-12-2") == ["12.2.2-1"]
    assert catalogue.versions_of("cuda-toolkit-12-4") == ["12.4.1-1"]
    assert catalogue.versions_of("cuda-toolkit-12-8") == ["12.8.1-1"]
    assert catalogue.versions_of("cuda-toolkit-13-0") == ["13.0.2-1"]
    assert [v[:5] for v in catalogue.versions_of("doca-ofed")] == ["2.9.1", "3.0.0"]
    assert "2.20.5-1" in catalogue.versions_of("nvidia-fs")
    assert "2.22.3-1" in catalogue.versions_of("nvidia-fs-dkms")
    for name in ("nvidia-gds-12-4", "nvidia-gds-12-8", "nvidia-gds-13-0"):
        assert catalogue.versions_of(name)
    for name in ("nvidia-container-toolkit", "nvidia-container-toolkit-base"):
        assert catalogue.versions_of(name) == ["1.16.2-1", "1.17.8-1"]
    assert "1:3.3.9" in catalogue.versions_of("datacenter-gpu-manager")
    assert "1:4.2.3-1" in catalogue.versions_of("datacenter-gpu-manager-4-cuda12")


def test_bad_template_variable_is_a_config_error() -> None:
    text = load_catalogue().script_prologue
    bad = (
        "schema: 1\nsuite: s\ncomponent: main\narchitecture: amd64\nmaintainer: m <m@x>\n"
        f"script_prologue: {json.dumps(text)}\n"
        "packages:\n  - {name: pkg-@nope@, summary: x, versions: ['1.0-1']}\n"
    )
    with pytest.raises(ConfigError, match="@nope@"):
        parse_catalogue(bad)


# ------------------------------------------------------------------ index and signature


def test_packages_index_lists_every_version_with_its_relations(
    repo: RepoInfo, catalogue: Catalogue
) -> None:
    index = _index(repo)
    assert set(index) == {(p.name, p.version) for p in catalogue.packages}
    assert repo.packages == tuple((p.name, p.version) for p in catalogue.packages)
    fields = {
        "depends": "Depends",
        "conflicts": "Conflicts",
        "provides": "Provides",
        "replaces": "Replaces",
    }
    for pkg in catalogue.packages:
        entry = index[(pkg.name, pkg.version)]
        for key, field in fields.items():
            assert entry.get(field, "") == pkg.relation(key), (pkg.name, pkg.version, field)


def test_driver_packages_are_pinned_to_each_other(repo: RepoInfo) -> None:
    index = _index(repo)
    for branch, versions in DRIVERS.items():
        for upstream in versions:
            v = f"{upstream}-1"
            meta = index[(f"nvidia-driver-{branch}", v)]
            assert meta["Depends"] == (
                f"nvidia-dkms-{branch} (= {v}), nvidia-utils-{branch} (= {v}), "
                f"nvidia-compute-utils-{branch} (= {v})"
            )
            assert (
                f"nvidia-dkms-{branch}-open (= {v})"
                in index[(f"nvidia-driver-{branch}-open", v)]["Depends"]
            )
            assert f"nvidia-dkms-{branch}" in index[(f"nvidia-dkms-{branch}-open", v)]["Conflicts"]
            assert f"nvidia-dkms-{branch}-open" in index[(f"nvidia-dkms-{branch}", v)]["Conflicts"]


def test_inrelease_and_release_gpg_verify(repo: RepoInfo) -> None:
    dists = repo.out_dir / "dists" / repo.suite
    keyring = str(repo.public_keyring_path)
    subprocess.run(
        ["gpgv", "--keyring", keyring, str(dists / "InRelease")], check=True, capture_output=True
    )
    subprocess.run(
        ["gpgv", "--keyring", keyring, str(dists / "Release.gpg"), str(dists / "Release")],
        check=True,
        capture_output=True,
    )
    release = (dists / "Release").read_text()
    assert f"Suite: {repo.suite}" in release and "main/binary-amd64/Packages.gz" in release
    assert repo.public_key_path.read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")


@pytest.mark.parametrize("target", ["InRelease", "Release"])
def test_one_changed_byte_breaks_the_signature(repo: RepoInfo, tmp_path: Path, target: str) -> None:
    dists = repo.out_dir / "dists" / repo.suite
    data = bytearray((dists / target).read_bytes())
    pos = data.index(b"main/binary-amd64/Packages") + 1  # a byte of the signed text
    data[pos] ^= 0x01
    changed = tmp_path / target
    changed.write_bytes(bytes(data))
    cmd = ["gpgv", "--keyring", str(repo.public_keyring_path)]
    if target == "InRelease":
        cmd += [str(changed)]
    else:
        cmd += [str(dists / "Release.gpg"), str(changed)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode != 0
    assert "BAD signature" in res.stderr


# ------------------------------------------------------------------ package contents


def test_dkms_package_ships_module_descriptors(repo: RepoInfo, catalogue: Catalogue) -> None:
    for name, flavor in (("nvidia-dkms-550", "proprietary"), ("nvidia-dkms-550-open", "open")):
        deb = _deb(repo, catalogue, name, "550.127.08-1")
        members = {m.name for m in _data_tar(deb).getmembers()}
        assert {f"./lib/modules/gpuemu/{m}.ko" for m in NVIDIA_MODULES} <= members
        desc = _read(deb, "./lib/modules/gpuemu/nvidia.ko").splitlines()
        assert "version=550.127.08" in desc and f"flavor={flavor}" in desc
        assert any(line.startswith("description=") for line in desc)
        peermem = _read(deb, "./lib/modules/gpuemu/nvidia_peermem.ko").splitlines()
        assert "depends=nvidia,ib_core" in peermem


def test_dpkg_deb_listing_of_userspace_packages(repo: RepoInfo, catalogue: Catalogue) -> None:
    def listing(name: str, version: str) -> str:
        deb = _deb(repo, catalogue, name, version)
        return subprocess.run(
            ["dpkg-deb", "-c", str(deb)], check=True, capture_output=True, text=True
        ).stdout

    utils = listing("nvidia-utils-570", "570.133.20-1")
    assert "./usr/bin/nvidia-smi -> /opt/gpuemu/gpuemu" in utils
    assert "./usr/lib/gpuemu/userspace/nvml.version" in utils
    deb = _deb(repo, catalogue, "nvidia-utils-570", "570.133.20-1")
    assert _read(deb, "./usr/lib/gpuemu/userspace/nvml.version") == "570.133.20\n"

    compute = listing("nvidia-compute-utils-550", "550.54.15-1")
    assert "./usr/bin/nvidia-persistenced -> /opt/gpuemu/gpuemu" in compute
    assert "./lib/systemd/system/nvidia-persistenced.service" in compute

    fm = listing("nvidia-fabricmanager-580", "580.82.07-1")
    assert "./usr/bin/nv-fabricmanager -> /opt/gpuemu/gpuemu" in fm
    assert "./lib/systemd/system/nvidia-fabricmanager.service" in fm

    ofed = listing("doca-ofed", "3.0.0-058000")
    for tool in (
        "usr/sbin/ibstat",
        "usr/sbin/ibstatus",
        "usr/bin/ibv_devinfo",
        "usr/bin/mlnx_qos",
        "usr/bin/ib_write_bw",
    ):
        assert f"./{tool} -> /opt/gpuemu/gpuemu" in ofed
    for mod in ("ib_core", "mlx5_core", "mlx5_ib", "ib_uverbs", "rdma_cm"):
        assert f"./lib/modules/gpuemu/{mod}.ko" in ofed
    assert "./lib/systemd/system/openibd.service" in ofed

    dcgm = listing("datacenter-gpu-manager-4-core", "1:4.2.3-1")
    assert "./usr/bin/dcgmi -> /opt/gpuemu/gpuemu" in dcgm
    assert "./lib/systemd/system/nvidia-dcgm.service" in dcgm
    assert "./usr/bin/nvidia-ctk -> /opt/gpuemu/gpuemu" in listing(
        "nvidia-container-toolkit-base", "1.17.8-1"
    )
    assert "./lib/modules/gpuemu/nvidia_fs.ko" in listing("nvidia-fs-dkms", "2.22.3-1")


def test_imex_ships_with_each_driver_branch_from_r550(repo: RepoInfo, catalogue: Catalogue) -> None:
    for branch, versions in DRIVERS.items():
        want = [] if branch == "535" else [f"{v}-1" for v in versions]
        assert catalogue.versions_of(f"nvidia-imex-{branch}") == want
    deb = _deb(repo, catalogue, "nvidia-imex-570", "570.133.20-1")
    listing = subprocess.run(
        ["dpkg-deb", "-c", str(deb)], check=True, capture_output=True, text=True
    ).stdout
    assert "./usr/bin/nvidia-imex -> /opt/gpuemu/gpuemu" in listing
    assert _read(deb, "./usr/lib/gpuemu/userspace/imex.version") == "570.133.20\n"
    unit = _read(deb, "./lib/systemd/system/nvidia-imex.service")
    assert "Type=forking" in unit
    assert "ExecStart=/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg" in unit
    pkg = catalogue.get("nvidia-imex-570", "570.133.20-1")
    assert pkg.conffiles == ["/etc/nvidia-imex/config.cfg", "/etc/nvidia-imex/nodes_config.cfg"]
    # like fabric manager: not enabled by the package, restarted on upgrade when running
    assert "unit_enable" not in pkg.scripts["postinst"]
    assert "unit_invoke restart nvidia-imex.service" in pkg.scripts["postinst"]


def test_cuda_toolkit_ships_version_json_and_uses_alternatives(
    repo: RepoInfo, catalogue: Catalogue
) -> None:
    deb = _deb(repo, catalogue, "cuda-toolkit-12-4", "12.4.1-1")
    members = {m.name for m in _data_tar(deb).getmembers()}
    assert "./usr/local/cuda" not in members  # a symlink made by update-alternatives
    text = _read(deb, "./usr/local/cuda-12.4/version.json")
    assert '   "cuda" : {' in text  # the real file's layout
    data = json.loads(text)
    assert data["cuda"] == {"name": "CUDA SDK", "version": "12.4.1"}
    postinst = catalogue.get("cuda-toolkit-12-4", "12.4.1-1").scripts["postinst"]
    assert "update-alternatives --install /usr/local/cuda cuda" in postinst
    assert "/usr/local/cuda-12.4 124" in postinst


def test_openibd_stop_unloads_nvidia_peermem(catalogue: Catalogue) -> None:
    pkg = catalogue.get("doca-ofed", "2.9.1-018000")
    script = pkg.files["/etc/init.d/openibd"]
    assert script.mode == 0o755
    unload = next(line for line in script.content.splitlines() if line.startswith("UNLOAD="))
    assert unload.split('"')[1].split()[0] == "nvidia_peermem"
    assert "/etc/init.d/openibd" in pkg.conffiles
    assert "unit_active openibd.service" in pkg.scripts["postinst"]
    assert "restart openibd.service" in pkg.scripts["postinst"]


def test_maintainer_scripts_are_posix_sh(repo: RepoInfo, catalogue: Catalogue) -> None:
    checked = 0
    for pkg in catalogue.packages:
        deb = _deb(repo, catalogue, pkg.name, pkg.version)
        raw = subprocess.run(
            ["dpkg-deb", "--ctrl-tarfile", str(deb)], check=True, capture_output=True
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            members = [(m, tar.extractfile(m)) for m in tar.getmembers()]
        for member, fh in members:
            name = member.name.lstrip("./")
            if name not in ("preinst", "postinst", "prerm", "postrm"):
                continue
            assert fh is not None
            body = fh.read()
            assert member.mode & 0o111, (pkg.name, name)
            assert body.startswith(b"#!/bin/sh\nset -e\n"), (pkg.name, name)
            res = subprocess.run(["sh", "-n"], input=body, capture_output=True)
            assert res.returncode == 0, (pkg.name, name, res.stderr)
            checked += 1
    assert checked > 50
    # The shipped init script too.
    openibd = catalogue.get("doca-ofed", "3.0.0-058000").files["/etc/init.d/openibd"].content
    assert subprocess.run(["sh", "-n"], input=openibd.encode()).returncode == 0


def test_dkms_postinst_never_loads_modules(catalogue: Catalogue) -> None:
    for name in ("nvidia-dkms-550", "nvidia-dkms-550-open", "nvidia-fs-dkms"):
        pkg = catalogue.get(name, catalogue.versions_of(name)[0])
        assert "modprobe" not in pkg.scripts["postinst"]
        assert "rmmod" not in pkg.scripts["postinst"]
    compute = catalogue.get("nvidia-compute-utils-550", "550.54.15-1")
    assert "unit_enable nvidia-persistenced.service" in compute.scripts["postinst"]


# ------------------------------------------------------------------ real dpkg in a chroot

# Runs inside `unshare --mount`: a throw-away overlay of the host's root (nothing reaches
# the host), no /opt/gpuemu and no systemd - the "image build / bare chroot" case.
_CHROOT_SCRIPT = r"""
set -e
W=$1; R=$W/root
mkdir -p $W/upper $W/work $R
mount -t overlay overlay -o lowerdir=/,upperdir=$W/upper,workdir=$W/work $R || exit 77
mount -t tmpfs tmpfs $R/run
mount -t tmpfs tmpfs $R/tmp
mkdir -p $R/tmp/v1 $R/tmp/v2
cp $W/v1/*.deb $R/tmp/v1/
cp $W/v2/*.deb $R/tmp/v2/
chroot $R /bin/sh -e -c '
    [ ! -e /opt/gpuemu/gpuemu ]
    dpkg -i /tmp/v1/*.deb
    readlink /usr/bin/nvidia-smi
    readlink -f /usr/local/cuda
    cat /usr/lib/gpuemu/userspace/nvml.version
    test -L /etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service
    test -L /etc/systemd/system/multi-user.target.wants/openibd.service
    test ! -e /etc/systemd/system/multi-user.target.wants/nvidia-fabricmanager.service
    dpkg -i /tmp/v2/*.deb
    cat /usr/lib/gpuemu/userspace/nvml.version
    grep "^version=" /lib/modules/gpuemu/nvidia.ko
    dpkg -i /tmp/v2/*.deb
    dpkg -r cuda-toolkit-12-4 nvidia-compute-utils-550
    test ! -e /usr/local/cuda
    dpkg -P nvidia-compute-utils-550 doca-ofed
    test ! -e /etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service
    test ! -e /etc/init.d/openibd
    echo CHROOT-OK
'
"""


def test_real_dpkg_runs_the_scripts_in_a_bare_chroot(
    repo: RepoInfo, catalogue: Catalogue, tmp_path: Path
) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("unshare not available")
    sets = {
        "v1": [
            ("nvidia-dkms-550", "550.54.15-1"),
            ("nvidia-utils-550", "550.54.15-1"),
            ("nvidia-compute-utils-550", "550.54.15-1"),
            ("nvidia-fabricmanager-550", "550.54.15-1"),
            ("doca-ofed", "2.9.1-018000"),
            ("cuda-toolkit-12-4", "12.4.1-1"),
            ("datacenter-gpu-manager", "1:3.3.9"),
            ("nvidia-fs-dkms", "2.20.5-1"),
        ],
        "v2": [
            ("nvidia-dkms-550", "550.127.08-1"),
            ("nvidia-utils-550", "550.127.08-1"),
            ("nvidia-compute-utils-550", "550.127.08-1"),
            ("nvidia-fabricmanager-550", "550.127.08-1"),
            ("doca-ofed", "3.0.0-058000"),
        ],
    }
    for key, pkgs in sets.items():
        (tmp_path / key).mkdir()
        for name, version in pkgs:
            shutil.copy(_deb(repo, catalogue, name, version), tmp_path / key)
    res = subprocess.run(
        ["unshare", "--mount", "--fork", "sh", "-c", _CHROOT_SCRIPT, "sh", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if res.returncode == 77 or "unshare failed" in res.stderr:
        pytest.skip(f"no private overlay mount here: {res.stderr.strip()[-200:]}")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = res.stdout
    assert "CHROOT-OK" in out
    assert "/opt/gpuemu/gpuemu\n/usr/local/cuda-12.4\n550.54.15\n" in out
    assert "550.127.08\nversion=550.127.08\n" in out


# ------------------------------------------------------------------ apt round trip


def _apt(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    opts = [
        "-o",
        f"Dir={root}",
        "-o",
        f"Dir::State::status={root}/var/lib/dpkg/status",
        "-o",
        "Dir::Etc::sourceparts=-",
        "-o",
        "Debug::NoLocking=1",
        "-o",
        "APT::Sandbox::User=root",
    ]
    return subprocess.run([args[0], *opts, *args[1:]], capture_output=True, text=True)


def _apt_root(root: Path, repo: RepoInfo, keyring: Path) -> Path:
    for d in (
        "etc/apt/apt.conf.d",
        "etc/apt/preferences.d",
        "etc/apt/trusted.gpg.d",
        "var/lib/apt/lists/partial",
        "var/cache/apt/archives/partial",
        "var/lib/dpkg",
    ):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "var/lib/dpkg/status").touch()
    line = repo.sources_line(f"file:{repo.out_dir}", keyring)
    (root / "etc/apt/sources.list").write_text(line + "\n")
    return root


@pytest.mark.parametrize("kind", ["gpg", "asc"])
def test_apt_accepts_the_signed_repository(repo: RepoInfo, tmp_path: Path, kind: str) -> None:
    keyring = repo.public_keyring_path if kind == "gpg" else repo.public_key_path
    root = _apt_root(tmp_path / "root", repo, keyring)
    update = _apt(root, "apt-get", "update")
    out = update.stdout + update.stderr
    assert update.returncode == 0, out
    assert "NO_PUBKEY" not in out and "not signed" not in out and "W:" not in out, out
    lists = [p.name for p in (root / "var/lib/apt/lists").iterdir()]
    assert any(n.endswith("_InRelease") for n in lists), lists  # kept only once verified

    policy = _apt(root, "apt-cache", "policy", "nvidia-driver-550")
    assert policy.returncode == 0, policy.stderr
    for upstream in DRIVERS["550"]:
        assert f"{upstream}-1" in policy.stdout
    assert "Candidate: 550.144.03-1" in policy.stdout

    parts = ("nvidia-dkms-550", "nvidia-utils-550", "nvidia-compute-utils-550")
    latest = _apt(root, "apt-get", "-s", "install", "nvidia-driver-550")
    assert latest.returncode == 0, latest.stdout + latest.stderr
    for dep in parts:
        assert f"Inst {dep} (550.144.03-1" in latest.stdout
    # As with NVIDIA's repository, an older driver needs every part pinned: apt does
    # not walk back from the candidate to satisfy "(= 550.54.15-1)" on its own.
    alone = _apt(root, "apt-get", "-s", "install", "nvidia-driver-550=550.54.15-1")
    assert alone.returncode != 0
    pinned = [f"{p}=550.54.15-1" for p in ("nvidia-driver-550", *parts)]
    sim = _apt(root, "apt-get", "-s", "install", *pinned)
    assert sim.returncode == 0, sim.stdout + sim.stderr
    for dep in parts:
        assert f"Inst {dep} (550.54.15-1" in sim.stdout

    clash = _apt(root, "apt-get", "-s", "install", "nvidia-dkms-550", "nvidia-dkms-550-open")
    assert clash.returncode != 0


def test_apt_rejects_a_repository_signed_by_another_key(repo: RepoInfo, tmp_path: Path) -> None:
    other_home = tmp_path / "gnupg"
    try:
        other = ensure_lab_key(other_home)
        assert other != repo.fingerprint
        exported = subprocess.run(
            ["gpg", "--homedir", str(other_home), "--batch", "--export", other],
            check=True,
            capture_output=True,
        ).stdout
    finally:
        _kill_agent(other_home)
    wrong = tmp_path / "wrong.gpg"
    wrong.write_bytes(exported)
    root = _apt_root(tmp_path / "root", repo, wrong)
    update = _apt(root, "apt-get", "update")
    out = update.stdout + update.stderr
    assert "NO_PUBKEY" in out or "not signed" in out, out
    policy = _apt(root, "apt-cache", "policy", "nvidia-driver-550")
    assert "550.54.15-1" not in policy.stdout


# ------------------------------------------------------------------ cache and errors


def test_second_build_is_a_cache_hit(repo: RepoInfo, gnupghome: Path) -> None:
    packages = repo.out_dir / "dists" / repo.suite / "main" / "binary-amd64" / "Packages"
    inrelease = repo.out_dir / "dists" / repo.suite / "InRelease"
    before = (packages.stat().st_mtime_ns, inrelease.read_bytes())
    again = build_repo(repo.out_dir, gnupghome)
    assert again.rebuilt is False
    assert again.fingerprint == repo.fingerprint
    assert (packages.stat().st_mtime_ns, inrelease.read_bytes()) == before
    assert ensure_lab_key(gnupghome) == repo.fingerprint  # the key is made once


def test_changed_catalogue_rebuilds(tmp_path: Path, gnupghome: Path) -> None:
    text = CATALOGUE_PATH.read_text()
    small = text.split("\npackages:\n", 1)[0] + (
        "\npackages:\n  - {name: nvidia-fs, summary: meta, versions: ['2.20.5-1']}\n"
    )
    cat = tmp_path / "packages.yaml"
    cat.write_text(small)
    out = tmp_path / "repo"
    first = build_repo(out, gnupghome, cat)
    assert first.rebuilt and first.packages == (("nvidia-fs", "2.20.5-1"),)
    assert build_repo(out, gnupghome, cat).rebuilt is False
    cat.write_text(small.replace("'2.20.5-1'", "'2.20.5-1', '2.22.3-1'"))
    third = build_repo(out, gnupghome, cat)
    assert third.rebuilt and len(third.packages) == 2
    assert "2.22.3-1" in (out / "dists/gpuboot-lab/main/binary-amd64/Packages").read_text()


def test_tool_failures_become_run_errors() -> None:
    with pytest.raises(RunError) as missing:
        _run(["gpuboot-no-such-tool"], what="testing", hint="none")
    assert missing.value.hint and "apt-get install" in missing.value.hint
    with pytest.raises(RunError, match="exit 1") as failed:
        _run(["sh", "-c", "echo boom >&2; exit 1"], what="testing", hint="do X")
    assert "boom" in str(failed.value) and failed.value.hint == "do X"


def _agents_of(gnupghome: Path) -> list[int]:
    """Running gpg-agents whose home is ``gnupghome``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"gpg-agent") and str(gnupghome).encode() in argv:
            found.append(int(proc.name))
    return found


def test_a_build_leaves_no_gpg_agent_running(tmp_path: Path) -> None:
    home = tmp_path / "gnupg"
    info = build_repo(tmp_path / "repo", home)
    assert info.rebuilt and _agents_of(home) == []
    assert build_repo(tmp_path / "repo", home).rebuilt is False  # a cache hit reads keys too
    assert _agents_of(home) == []
