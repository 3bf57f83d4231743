"""Build the lab's GPG-signed apt repository from ``packages.yaml``.

Layout of ``out_dir`` (served to lab nodes as a file:// or http:// apt source)::

    pool/main/<package>/<package>_<version>_amd64.deb
    dists/<suite>/main/binary-amd64/Packages, Packages.gz
    dists/<suite>/Release, InRelease (clearsigned), Release.gpg (detached)
    gpuboot-lab-archive-keyring.asc / .gpg   public key, armored and dearmored
    .gpuboot-lab-stamp                        content hash of the last build

Tools: ``dpkg-deb`` (dpkg), ``apt-ftparchive`` (apt-utils), ``gpg`` (gnupg). Nodes
verify the signature through ``signed-by=`` the exported keyring.
"""

from __future__ import annotations

import dataclasses
import fcntl
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from gpuboot.errors import RunError
from gpuboot_lab import catalogue as catalogue_mod
from gpuboot_lab.catalogue import CATALOGUE_PATH, Catalogue, PackageVersion, load_catalogue

KEY_UID = "gpuboot lab repository <lab@gpuboot.invalid>"
KEYRING_NAME = "gpuboot-lab-archive-keyring"
STAMP_NAME = ".gpuboot-lab-stamp"
# Fixed timestamps inside the .debs: the same catalogue gives the same bytes.
SOURCE_DATE_EPOCH = "1735689600"
_TOOLS_HINT = "install the repository tools: apt-get install -y dpkg-dev apt-utils gnupg"


@dataclasses.dataclass(frozen=True)
class RepoInfo:
    """A built repository and what a node needs to use it."""

    out_dir: Path
    suite: str
    component: str
    architecture: str
    fingerprint: str
    public_key_path: Path  # armored (.asc)
    public_keyring_path: Path  # dearmored (.gpg), for signed-by=
    packages: tuple[tuple[str, str], ...]  # (name, version), catalogue order
    rebuilt: bool  # False when the stamp matched and nothing was rebuilt

    def sources_line(self, uri: str, keyring: str | Path) -> str:
        """One-line apt source, e.g. for ``/etc/apt/sources.list.d/gpuboot-lab.list``."""
        return (
            f"deb [arch={self.architecture} signed-by={keyring}] {uri} "
            f"{self.suite} {self.component}"
        )

    def sources_deb822(self, uri: str, keyring: str | Path) -> str:
        """The same source as a deb822 ``.sources`` file."""
        return (
            f"Types: deb\nURIs: {uri}\nSuites: {self.suite}\nComponents: {self.component}\n"
            f"Architectures: {self.architecture}\nSigned-By: {keyring}\n"
        )


def _run(
    cmd: Sequence[str | Path],
    *,
    what: str,
    hint: str,
    cwd: Path | None = None,
    stdin: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run a command, capture its output, raise RunError (with stderr) on failure."""
    env = {**os.environ, "LC_ALL": "C", "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}
    try:
        return subprocess.run(
            [str(c) for c in cmd],
            cwd=cwd,
            input=stdin,
            env=env,
            check=True,
            capture_output=True,
        )
    except FileNotFoundError as exc:
        raise RunError(f"{what}: {cmd[0]} not found", where="lab repo", hint=_TOOLS_HINT) from exc
    except subprocess.CalledProcessError as exc:
        err = (exc.stderr or b"").decode(errors="replace").strip()
        raise RunError(
            f"{what} failed (exit {exc.returncode}): {err[-2000:]}", where="lab repo", hint=hint
        ) from exc


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise builders (and key creation) sharing a directory."""
    with open(path, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _gpg(gnupghome: Path, *args: str | Path) -> list[str | Path]:
    return [
        "gpg",
        "--homedir",
        gnupghome,
        "--batch",
        "--no-tty",
        "--pinentry-mode",
        "loopback",
        "--passphrase",
        "",
        *args,
    ]


def _find_key(gnupghome: Path) -> str | None:
    res = _run(
        _gpg(gnupghome, "--with-colons", "--list-secret-keys"),
        what="listing lab signing keys",
        hint=f"check GNUPGHOME {gnupghome} (owned by you, mode 0700)",
    )
    fpr: str | None = None
    for line in res.stdout.decode(errors="replace").splitlines():
        fields = line.split(":")
        if fields[0] == "sec":
            fpr = None
        elif fields[0] == "fpr" and fpr is None:
            fpr = fields[9]
        elif fields[0] == "uid" and fpr and fields[9] == KEY_UID:
            return fpr
    return None


def ensure_lab_key(gnupghome: Path) -> str:
    """Create the lab's passphrase-less Ed25519 signing key once; return its fingerprint."""
    gnupghome = Path(gnupghome)
    gnupghome.mkdir(parents=True, exist_ok=True, mode=0o700)
    gnupghome.chmod(0o700)
    with _locked(gnupghome / ".gpuboot-lab.lock"):
        fpr = _find_key(gnupghome)
        if fpr:
            return fpr
        _run(
            _gpg(gnupghome, "--quick-gen-key", KEY_UID, "ed25519", "sign", "never"),
            what="creating the lab signing key",
            hint=f"check that gpg works with --homedir {gnupghome}",
        )
        fpr = _find_key(gnupghome)
    if not fpr:
        raise RunError(
            "lab signing key was created but cannot be found",
            where=str(gnupghome),
            hint="remove the GNUPGHOME directory and build again",
        )
    return fpr


@contextmanager
def lab_key(gnupghome: Path) -> Iterator[str]:
    """The lab key's fingerprint for one build. gpg starts an agent for any secret-key use;
    it is stopped when the build ends, so a lab up leaves no process behind. Builds take
    this lock (apart from ensure_lab_key's) so one never stops the agent under another."""
    gnupghome = Path(gnupghome)
    gnupghome.mkdir(parents=True, exist_ok=True, mode=0o700)
    with _locked(gnupghome / ".gpuboot-lab-agent.lock"):
        try:
            yield ensure_lab_key(gnupghome)
        finally:
            _stop_agent(gnupghome)


def _stop_agent(gnupghome: Path, timeout: float = 10.0) -> None:
    """Stop the home's gpg-agent and wait for it to end: ``gpgconf --kill`` only asks, and
    an agent still shutting down when the build returns is a process the lab left behind."""
    asked = subprocess.run(
        ["gpg-connect-agent", "--homedir", gnupghome, "--no-autostart", "GETINFO pid", "/bye"],
        capture_output=True,
        text=True,
        check=False,
    )
    pids = [
        int(line[2:])
        for line in asked.stdout.splitlines()
        if line[2:].isdigit() and line.startswith("D ")
    ]
    subprocess.run(
        ["gpgconf", "--homedir", gnupghome, "--kill", "gpg-agent"], capture_output=True, check=False
    )
    deadline = time.monotonic() + timeout
    while pids and _running(pids[0]) and time.monotonic() < deadline:
        time.sleep(0.02)


def _running(pid: int) -> bool:
    """``pid`` is alive: it exists and is not a zombie waiting for its parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def cache_hit(stamp: Path, digest: str, expected) -> bool:
    """A repository built from ``digest`` is in place: its stamp says so, its files exist."""
    return (
        stamp.is_file()
        and json.loads(stamp.read_text() or "{}").get("hash") == digest
        and all(p.is_file() for p in expected)
    )


def _content_hash(catalogue_path: Path, fingerprint: str, builder: str = __file__) -> str:
    """What a cached repository was built from: the catalogue, its builder, the key."""
    h = hashlib.sha256()
    for path in (catalogue_path, Path(builder), Path(catalogue_mod.__file__)):
        h.update(path.read_bytes())
        h.update(b"\0")
    h.update(fingerprint.encode())
    return h.hexdigest()


def deb_filename(pkg: PackageVersion, arch: str) -> str:
    """``name_version_arch.deb`` with the epoch dropped, as Debian names them."""
    version = pkg.version.split(":", 1)[1] if ":" in pkg.version else pkg.version
    return f"{pkg.name}_{version}_{arch}.deb"


def _control(pkg: PackageVersion, cat: Catalogue, installed_kib: int) -> str:
    lines = [
        f"Package: {pkg.name}",
        f"Version: {pkg.version}",
        f"Architecture: {cat.architecture}",
        f"Maintainer: {cat.maintainer}",
        f"Installed-Size: {installed_kib}",
        f"Section: {pkg.section}",
        "Priority: optional",
    ]
    for key in catalogue_mod.RELATION_KEYS:
        if pkg.relations.get(key):
            field = "-".join(part.capitalize() for part in key.split("_"))
            lines.append(f"{field}: {pkg.relation(key)}")
    body = pkg.description or (
        "Emulated package of the gpuboot lab: ships kernel module descriptors, "
        "version files, tool shims and units for the lab's hardware emulator, "
        "no NVIDIA binaries."
    )
    paragraphs = [textwrap.wrap(par, 76) for par in body.split("\n\n")]
    long = "\n .\n".join("\n".join(f" {line}" for line in par) for par in paragraphs if par)
    lines.append(f"Description: {pkg.summary}\n{long}")
    return "\n".join(lines) + "\n"


def _mkdirs(root: Path, rel: Path) -> None:
    cur = root
    for part in rel.parts:
        cur = cur / part
        if not cur.is_dir():
            cur.mkdir()
            cur.chmod(0o755)


def _build_deb(pkg: PackageVersion, cat: Catalogue, stage: Path, dest: Path) -> Path:
    root = stage / f"{pkg.name}_{pkg.version.replace(':', '_')}"
    root.mkdir()
    root.chmod(0o755)
    size = 0
    for path, entry in pkg.files.items():
        rel = Path(path.lstrip("/"))
        _mkdirs(root, rel.parent)
        data = entry.content.encode()
        (root / rel).write_bytes(data)
        (root / rel).chmod(entry.mode)
        size += len(data)
    for path, target in pkg.links.items():
        rel = Path(path.lstrip("/"))
        _mkdirs(root, rel.parent)
        os.symlink(target, root / rel)
    debian = root / "DEBIAN"
    _mkdirs(root, Path("DEBIAN"))
    control = _control(pkg, cat, max(1, (size + 1023) // 1024 + len(pkg.links)))
    (debian / "control").write_text(control)
    if pkg.conffiles:
        (debian / "conffiles").write_text("".join(f"{p}\n" for p in pkg.conffiles))
    for name, body in pkg.scripts.items():
        script = debian / name
        script.write_text(cat.script_prologue.rstrip("\n") + "\n\n" + body.rstrip("\n") + "\n")
        script.chmod(0o755)
    for p in debian.iterdir():
        if p.name not in catalogue_mod.SCRIPT_NAMES:
            p.chmod(0o644)
    out = dest / pkg.name / deb_filename(pkg, cat.architecture)
    out.parent.mkdir(parents=True, exist_ok=True)
    _run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", root, out],
        what=f"building {pkg.name} {pkg.version}",
        hint="check the package's entry in gpuboot_lab/packages.yaml",
    )
    return out


def _release(cat: Catalogue, dists: Path, cwd: Path) -> bytes:
    opts = {
        "Origin": cat.origin,
        "Label": cat.label,
        "Suite": cat.suite,
        "Codename": cat.suite,
        "Architectures": cat.architecture,
        "Components": cat.component,
        "Description": f"{cat.label} (gpuboot lab, not NVIDIA's repository)",
    }
    args: list[str | Path] = ["apt-ftparchive"]
    for key, value in opts.items():
        args += ["-o", f"APT::FTPArchive::Release::{key}={value}"]
    args += ["release", dists.relative_to(cwd)]
    return _run(args, what="writing Release", hint=_TOOLS_HINT, cwd=cwd).stdout


def _sign(gnupghome: Path, fingerprint: str, release: Path) -> None:
    hint = f"check the lab key {fingerprint} in {gnupghome}"
    base = ["--local-user", fingerprint, "--digest-algo", "SHA512", "--yes"]
    _run(
        _gpg(gnupghome, *base, "--clearsign", "--output", release.with_name("InRelease"), release),
        what="signing InRelease",
        hint=hint,
    )
    _run(
        _gpg(
            gnupghome,
            *base,
            "--armor",
            "--detach-sign",
            "--output",
            release.with_name("Release.gpg"),
            release,
        ),
        what="signing Release.gpg",
        hint=hint,
    )


def _export_key(gnupghome: Path, fingerprint: str, out_dir: Path) -> tuple[Path, Path]:
    hint = f"check the lab key {fingerprint} in {gnupghome}"
    asc = out_dir / f"{KEYRING_NAME}.asc"
    gpg_path = out_dir / f"{KEYRING_NAME}.gpg"
    armored = _run(
        _gpg(gnupghome, "--armor", "--export", fingerprint),
        what="exporting the public key",
        hint=hint,
    ).stdout
    binary = _run(
        _gpg(gnupghome, "--export", fingerprint), what="exporting the public keyring", hint=hint
    ).stdout
    if not binary:
        raise RunError("exported public key is empty", where=str(gnupghome), hint=hint)
    asc.write_bytes(armored)
    gpg_path.write_bytes(binary)
    asc.chmod(0o644)
    gpg_path.chmod(0o644)
    return asc, gpg_path


def build_repo(out_dir: Path, gnupghome: Path, catalogue_path: Path = CATALOGUE_PATH) -> RepoInfo:
    """Build (or reuse, when nothing changed) the signed lab repository in ``out_dir``."""
    with lab_key(Path(gnupghome)) as fingerprint:
        return _build_repo(Path(out_dir), Path(gnupghome), fingerprint, catalogue_path)


def _build_repo(out_dir: Path, gnupghome: Path, fingerprint: str, catalogue_path: Path) -> RepoInfo:
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    cat = load_catalogue(catalogue_path)
    digest = _content_hash(catalogue_path, fingerprint)
    dists = out_dir / "dists" / cat.suite
    stamp = out_dir / STAMP_NAME
    info = RepoInfo(
        out_dir=out_dir,
        suite=cat.suite,
        component=cat.component,
        architecture=cat.architecture,
        fingerprint=fingerprint,
        public_key_path=out_dir / f"{KEYRING_NAME}.asc",
        public_keyring_path=out_dir / f"{KEYRING_NAME}.gpg",
        packages=tuple((p.name, p.version) for p in cat.packages),
        rebuilt=True,
    )
    with _locked(out_dir / ".gpuboot-lab.lock"):
        expected = (dists / "InRelease", dists / "Release.gpg", info.public_keyring_path)
        if cache_hit(stamp, digest, expected):
            return dataclasses.replace(info, rebuilt=False)
        stamp.unlink(missing_ok=True)
        # Rebuilt in place (not swapped) so a bind mount of out_dir stays valid.
        for sub in ("pool", "dists"):
            shutil.rmtree(out_dir / sub, ignore_errors=True)
        pool = out_dir / "pool" / cat.component
        pool.mkdir(parents=True)
        workers = min(8, (os.cpu_count() or 2) * 2)
        with (
            tempfile.TemporaryDirectory(prefix=".stage-", dir=out_dir) as tmp,
            ThreadPoolExecutor(max_workers=workers) as ex,
        ):
            list(ex.map(lambda p: _build_deb(p, cat, Path(tmp), pool), cat.packages))
        binary = dists / cat.component / f"binary-{cat.architecture}"
        binary.mkdir(parents=True)
        packages = _run(
            ["apt-ftparchive", "packages", pool.relative_to(out_dir)],
            what="writing Packages",
            hint=_TOOLS_HINT,
            cwd=out_dir,
        ).stdout
        (binary / "Packages").write_bytes(packages)
        with (
            open(binary / "Packages.gz", "wb") as raw,
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz,
        ):
            gz.write(packages)
        release = _release(cat, dists, out_dir)
        (dists / "Release").write_bytes(release)
        _sign(Path(gnupghome), fingerprint, dists / "Release")
        _export_key(Path(gnupghome), fingerprint, out_dir)
        stamp.write_text(json.dumps({"hash": digest, "packages": len(cat.packages)}) + "\n")
    return info
