"""Build the lab's GPG-signed RPM repositories (EL lab nodes) from ``packages.yaml``.

The same catalogue as the apt repository (:mod:`gpuboot_lab.repo`): every entry's rpm
(:attr:`Catalogue.rpms`) carries the deb's files, kernel-module descriptors, tools and
units; its maintainer-script bodies run from %pre/%post/%preun/%postun with Debian's
arguments derived from rpm's ``$1`` (:data:`SCRIPTLETS`). Layout of ``out_dir`` (served
at ``http://<repo>/rpm/``)::

    Packages/<name>-<version>-<release>.<arch>.rpm   every rpm, signed with the lab key
    rhel8/x86_64/, rhel9/x86_64/    Packages/ (hard links), repodata/ with modules.yaml
    rhel10/x86_64/                  the same without modules.yaml (EL10: no modularity)
    */repodata/repomd.xml.asc       detached signature of repomd.xml (repo_gpgcheck=1)
    RPM-GPG-KEY-gpuboot-lab         the lab's public key, armored (gpgkey=)
    .gpuboot-lab-stamp              content hash of the last build

Tools: ``rpmbuild`` and ``rpmsign`` (Debian's rpm), ``createrepo_c`` and ``modifyrepo_c``
(createrepo-c), ``gpg``. The key is the apt repository's (one lab key per GPUBOOT_HOME).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from gpuboot.errors import RunError
from gpuboot_lab import catalogue as catalogue_mod
from gpuboot_lab.catalogue import CATALOGUE_PATH, Catalogue, PackageVersion, load_catalogue
from gpuboot_lab.repo import _content_hash, _gpg, _locked, _run, cache_hit, lab_key

KEY_NAME = "RPM-GPG-KEY-gpuboot-lab"
STAMP_NAME = ".gpuboot-lab-stamp"
ARCH = "x86_64"
MODULE = "nvidia-driver"
# EL major -> repository tree; only EL8/EL9 have module streams (EL10 dropped modularity).
TREES = {"8": "rhel8", "9": "rhel9", "10": "rhel10"}
MODULAR = ("8", "9")
TOOLS = ("rpmbuild", "rpmsign", "createrepo_c", "modifyrepo_c", "gpg")
_TOOLS_HINT = "install the rpm repository tools: apt-get install -y rpm createrepo-c gnupg"
# The profiles of NVIDIA's nvidia-driver streams (their modules.yaml, written by NVIDIA's
# genmodules.py in yum-packaging-precompiled-kmod): default lists every driver package of
# the branch and the stream's kmod, ks the same without cuda-drivers (the lab has none),
# fm default plus fabric manager and NSCQ (NVSwitch systems:
# `dnf module install nvidia-driver:<stream>/fm`). NVIDIA's src profile (the kmod sources
# or headers) is left out: the lab serves no nvidia-kmod-source/-headers rpm.
PROFILES = {
    "default": "Default installation",
    "ks": "Installation via kickstart",
    "fm": "FabricManager installation",
}

# Debian maintainer script -> (rpm scriptlet, shell that turns rpm's $1 - the number of
# instances of the package left after the transaction - into Debian's arguments).
# Each body runs in a subshell (its `exit 0` ends the body, not the scriptlet). rpm has
# no purge: an erase removes config files, so postrm sees remove, then purge.
SCRIPTLETS = {
    "preinst": ("pre", 'if [ "$1" -gt 1 ]; then set -- upgrade old; else set -- install; fi'),
    "postinst": (
        "post",
        'if [ "$1" -gt 1 ]; then set -- configure old; else set -- configure ""; fi',
    ),
    "prerm": ("preun", 'if [ "$1" -eq 0 ]; then set -- remove; else set -- upgrade new; fi'),
    "postrm": ("postun", 'if [ "$1" -eq 0 ]; then set -- remove; else set -- upgrade new; fi'),
}


@dataclasses.dataclass(frozen=True)
class RpmRepoInfo:
    """Built RPM repositories and what an EL node needs to use them."""

    out_dir: Path
    fingerprint: str
    public_key_path: Path  # armored
    rpms: tuple[tuple[str, str], ...]  # (name, epoch:version-release), catalogue order
    rebuilt: bool

    def tree(self, major: str) -> Path:
        return self.out_dir / TREES[major] / ARCH

    def url_path(self, major: str) -> str:
        """The tree's path under the repository server's root."""
        return f"{self.out_dir.name}/{TREES[major]}/{ARCH}/"


def rpm_filename(pkg: PackageVersion) -> str:
    _, version, release = pkg.evr
    return f"{pkg.name}-{version}-{release}.{ARCH}.rpm"


def nevra(pkg: PackageVersion) -> str:
    """``name-epoch:version-release.arch``, as modulemd artifacts name an rpm."""
    epoch, version, release = pkg.evr
    return f"{pkg.name}-{epoch}:{version}-{release}.{ARCH}"


def _esc(text: str) -> str:
    """Catalogue text inside a spec: rpm expands macros everywhere, comments included."""
    return text.replace("%", "%%")


def scriptlet(pkg: PackageVersion, cat: Catalogue, deb_name: str) -> tuple[str, str]:
    """The rpm scriptlet (section, text) running the body of Debian script ``deb_name``."""
    section, mapping = SCRIPTLETS[deb_name]
    body = _esc(pkg.scripts[deb_name].rstrip("\n"))
    lines = [
        _esc(cat.rpm_script_prologue.rstrip("\n")),
        "RPM_COUNT=$1",
        "RPM_PACKAGE=%{name}",
        mapping,
        f"(\n{body}\n)",
    ]
    if deb_name == "postrm":  # an erase: the same body again as purge
        lines.append(f'if [ "$RPM_COUNT" -eq 0 ]; then\nset -- purge\n(\n{body}\n)\nfi')
    return section, "\n".join(lines) + "\n"


def spec(pkg: PackageVersion, cat: Catalogue, stage: Path) -> str:
    """The spec building ``pkg`` from the files staged in ``stage``."""
    epoch, version, release = pkg.evr
    head = [f"Name: {pkg.name}"]
    if epoch != "0":
        head.append(f"Epoch: {epoch}")
    head += [
        f"Version: {version}",
        f"Release: {release}",
        f"Summary: {_esc(pkg.summary)}",
        "License: gpuboot-lab-emulation",
        f"Packager: {_esc(cat.maintainer)}",
        # Only what the catalogue says: no dependency generator on emulated payloads.
        "AutoReqProv: no",
    ]
    for key in catalogue_mod.RPM_RELATION_KEYS:
        head += [f"{key.capitalize()}: {_esc(rel)}" for rel in pkg.relations.get(key, [])]
    description = pkg.description or (
        "Emulated package of the gpuboot lab: ships kernel module descriptors, version "
        "files, tool shims and units for the lab's hardware emulator, no NVIDIA binaries."
    )
    parts = ["\n".join(head), f"%description\n{_esc(description)}"]
    parts.append(f'%install\ncp -a "{stage}/." "%{{buildroot}}/"')
    for deb_name in catalogue_mod.SCRIPT_NAMES:
        if deb_name in pkg.scripts:
            section, text = scriptlet(pkg, cat, deb_name)
            parts.append(f"%{section}\n{text}")
    files = ["%files", "%defattr(-,root,root,-)"]
    for path in sorted([*pkg.files, *pkg.links]):
        files.append(f'%config(noreplace) "{path}"' if path.startswith("/etc/") else f'"{path}"')
    parts.append("\n".join(files))
    return "\n\n".join(parts) + "\n"


def _stage(pkg: PackageVersion, root: Path) -> None:
    root.mkdir(parents=True)
    for path, entry in pkg.files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(entry.content)
        target.chmod(entry.mode)
    for path, link in pkg.links.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(link, target)


def _build_rpm(pkg: PackageVersion, cat: Catalogue, work: Path, dest: Path) -> Path:
    top = work / nevra(pkg).replace(":", "_")
    _stage(pkg, top / "stage")
    spec_path = top / f"{pkg.name}.spec"
    spec_path.write_text(spec(pkg, cat, top / "stage"))
    defines = {
        "_topdir": str(top),
        "_rpmdir": str(dest),
        "_build_name_fmt": "%%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm",
        "_binary_payload": "w1.gzdio",
        "_build_id_links": "none",
        "debug_package": "%{nil}",
        "__os_install_post": "%{nil}",
        "use_source_date_epoch_as_buildtime": "1",
        "clamp_mtime_to_source_epoch": "1",
    }
    args: list[str | Path] = ["rpmbuild", "--quiet", "--target", ARCH]
    for key, value in defines.items():
        args += ["--define", f"{key} {value}"]
    _run(
        [*args, "-bb", spec_path],
        what=f"building {pkg.name} {pkg.version} (rpm)",
        hint="check the package's entry (and its redhat: mapping) in gpuboot_lab/packages.yaml",
    )
    out = dest / rpm_filename(pkg)
    if not out.is_file():
        raise RunError(f"rpmbuild wrote no {out.name}", where=str(dest), hint=_TOOLS_HINT)
    return out


def _sign_rpms(gnupghome: Path, fingerprint: str, rpms: list[Path]) -> None:
    extra = f"--batch --no-tty --pinentry-mode loopback --passphrase '' --homedir {gnupghome}"
    _run(
        [
            "rpmsign",
            "--define",
            f"__gpg {shutil.which('gpg')}",
            "--define",
            f"_gpg_name {fingerprint}",
            "--define",
            f"_gpg_path {gnupghome}",
            "--define",
            f"_gpg_sign_cmd_extra_args {extra}",
            "--addsign",
            *rpms,
        ],
        what="signing the rpms",
        hint=f"check the lab key {fingerprint} in {gnupghome}",
    )


def modules_yaml(cat: Catalogue) -> str:
    """modulemd v2 documents: one per nvidia-driver stream, listing every release of its
    branch (its artifacts) and NVIDIA's profiles (:data:`PROFILES`): an rpm in every one
    unless the catalogue names its profiles (fabric manager and NSCQ: fm only)."""
    streams: dict[str, list[PackageVersion]] = {}
    for pkg in cat.rpms:
        for stream in pkg.streams:
            streams.setdefault(stream, []).append(pkg)
    docs = []
    for stream in sorted(streams):
        pkgs = streams[stream]
        profiles: dict[str, set[str]] = {}
        for pkg in pkgs:
            for profile in pkg.profiles or PROFILES:
                profiles.setdefault(profile, set()).add(pkg.name)
        artifacts = sorted(nevra(p) for p in pkgs)
        context = hashlib.sha256("\n".join(artifacts).encode()).hexdigest()[:8]
        branch, _, flavour = stream.partition("-")
        docs.append(
            {
                "document": "modulemd",
                "version": 2,
                "data": {
                    "name": MODULE,
                    "stream": stream,
                    "version": 1,
                    "context": context,
                    "arch": ARCH,
                    "summary": f"NVIDIA driver {branch} branch, {flavour} kernel modules",
                    "description": (
                        f"The {branch} driver branch with "
                        f"{'open' if flavour == 'open' else 'proprietary'} kernel modules "
                        "built by DKMS (gpuboot lab: emulated packages)."
                    ),
                    "license": {"module": ["MIT"]},
                    "profiles": {
                        name: {"description": PROFILES[name], "rpms": sorted(profiles[name])}
                        for name in PROFILES
                        if name in profiles
                    },
                    "api": {"rpms": sorted({p.name for p in pkgs})},
                    "artifacts": {"rpms": artifacts},
                },
            }
        )
    return yaml.safe_dump_all(docs, explicit_start=True, explicit_end=True, sort_keys=False)


def _tree(
    tree: Path, rpms: list[Path], modules: str | None, gnupghome: Path, fingerprint: str
) -> None:
    packages = tree / "Packages"
    packages.mkdir(parents=True)
    for rpm in rpms:
        os.link(rpm, packages / rpm.name)
    hint = "check createrepo_c/modifyrepo_c (apt-get install -y createrepo-c)"
    _run(
        ["createrepo_c", "--quiet", "--no-database", "--general-compress-type", "gz", tree],
        what=f"createrepo_c {tree.parent.name}",
        hint=hint,
    )
    repodata = tree / "repodata"
    if modules is not None:
        (tree / "modules.yaml").write_text(modules)
        _run(
            ["modifyrepo_c", "--mdtype", "modules", tree / "modules.yaml", repodata],
            what=f"modifyrepo_c {tree.parent.name}",
            hint=hint,
        )
        (tree / "modules.yaml").unlink()
    _run(
        _gpg(
            gnupghome,
            "--local-user",
            fingerprint,
            "--yes",
            "--armor",
            "--detach-sign",
            "--output",
            repodata / "repomd.xml.asc",
            repodata / "repomd.xml",
        ),
        what="signing repomd.xml",
        hint=f"check the lab key {fingerprint} in {gnupghome}",
    )


def build_rpm_repo(
    out_dir: Path, gnupghome: Path, catalogue_path: Path = CATALOGUE_PATH
) -> RpmRepoInfo:
    """Build (or reuse, when nothing changed) the signed EL repositories in ``out_dir``."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        raise RunError(f"missing {', '.join(missing)}", where="lab rpm repo", hint=_TOOLS_HINT)
    with lab_key(Path(gnupghome)) as fingerprint:
        return _build_rpm_repo(Path(out_dir), Path(gnupghome), fingerprint, catalogue_path)


def _build_rpm_repo(
    out_dir: Path, gnupghome: Path, fingerprint: str, catalogue_path: Path
) -> RpmRepoInfo:
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    cat = load_catalogue(catalogue_path)
    digest = _content_hash(catalogue_path, fingerprint, __file__)
    info = RpmRepoInfo(
        out_dir=out_dir,
        fingerprint=fingerprint,
        public_key_path=out_dir / KEY_NAME,
        rpms=tuple((p.name, p.version) for p in cat.rpms),
        rebuilt=True,
    )
    stamp = out_dir / STAMP_NAME
    with _locked(out_dir / ".gpuboot-lab.lock"):
        expected = [info.public_key_path] + [
            info.tree(m) / "repodata" / "repomd.xml.asc" for m in TREES
        ]
        if cache_hit(stamp, digest, expected):
            return dataclasses.replace(info, rebuilt=False)
        stamp.unlink(missing_ok=True)
        # Rebuilt in place (not swapped) so the repository server's bind mount stays valid.
        for sub in ("Packages", *TREES.values()):
            shutil.rmtree(out_dir / sub, ignore_errors=True)
        pool = out_dir / "Packages"
        pool.mkdir()
        workers = min(8, (os.cpu_count() or 2) * 2)
        with (
            tempfile.TemporaryDirectory(prefix=".stage-", dir=out_dir) as tmp,
            ThreadPoolExecutor(max_workers=workers) as ex,
        ):
            rpms = list(ex.map(lambda p: _build_rpm(p, cat, Path(tmp), pool), cat.rpms))
        _sign_rpms(Path(gnupghome), fingerprint, rpms)
        modules = modules_yaml(cat)
        for major, name in TREES.items():
            _tree(
                out_dir / name / ARCH,
                rpms,
                modules if major in MODULAR else None,
                Path(gnupghome),
                fingerprint,
            )
        armored = _run(
            _gpg(Path(gnupghome), "--armor", "--export", fingerprint),
            what="exporting the public key",
            hint=f"check the lab key {fingerprint} in {gnupghome}",
        ).stdout
        info.public_key_path.write_bytes(armored)
        info.public_key_path.chmod(0o644)
        stamp.write_text(json.dumps({"hash": digest, "rpms": len(rpms)}) + "\n")
    return info
