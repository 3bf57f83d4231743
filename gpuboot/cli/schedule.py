"""`gpuboot schedule`: the scan on a calendar, as files to install (a systemd service +
timer pair, or with --kubernetes a CronJob manifest), printed or written to --dir."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuboot.cli import options
from gpuboot.cli.outcome import Outcome, err
from gpuboot.errors import EXIT_OK, BadInput

EPILOG = (
    "exit codes: 0 written or printed (--idle-check: no other run holds the hosts), "
    "2 bad input, 75 (--idle-check only) another gpuboot run holds one of the hosts. "
    "Scan options go after `--`, e.g. gpuboot schedule -i /etc/gpuboot/site.yml -- "
    "--kubeconfig /etc/gpuboot/kubeconfig --textfile-dir /var/lib/node_exporter/textfile_collector"
)
# the scan's options that name files: absolute for a unit (it runs from /), on the
# volume for a CronJob
PATH_OPTIONS = {
    "kubeconfig": "--kubeconfig",
    "textfile_dir": "--textfile-dir",
    "history": "--history",
    "sign_key": "--sign-key",
}


def register(verbs, common) -> None:
    p = verbs.add_parser(
        "schedule",
        parents=[common, options.targets(required=True, limit_help="the hosts each scan takes")],
        help="scheduled scans: a systemd service + timer pair, or a Kubernetes CronJob",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--every",
        default="hourly",
        metavar="WHEN",
        help="systemd: an OnCalendar event (hourly, daily, '*-*-* *:00/15:00'); "
        "--kubernetes: hourly, daily, weekly or five cron fields (default hourly)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--dir", metavar="DIR", help="write the files there")
    out.add_argument("--print", action="store_true", help="print them on stdout (the default)")
    p.add_argument("--name", default="gpuboot-scan", help="unit / CronJob name")
    units = p.add_argument_group("systemd")
    units.add_argument("--user", help="run the scan as this user (default root)")
    units.add_argument(
        "--gpuboot", metavar="PATH", help="the gpuboot executable (default: this one)"
    )
    units.add_argument(
        "--home", metavar="DIR", help="the unit's GPUBOOT_HOME (default: this one's)"
    )
    units.add_argument(
        "--idle-check",
        action="store_true",
        help="the unit's ExecCondition: exit 0 when no other gpuboot run holds the hosts, "
        "75 naming the holder when one does (the scan is skipped, the unit not failed)",
    )
    kube = p.add_argument_group("Kubernetes")
    kube.add_argument(
        "--kubernetes", action="store_true", help="a CronJob manifest (YAML) instead of units"
    )
    kube.add_argument("--image", help="with --kubernetes (required): an image holding gpuboot")
    kube.add_argument("--namespace", default="gpuboot", help="the CronJob's namespace")
    kube.add_argument(
        "--ssh-secret",
        default="gpuboot-ssh",
        metavar="NAME",
        help="the Secret with the SSH key (id_ed25519) and the nodes' host keys (known_hosts)",
    )
    kube.add_argument("--storage", default="10Gi", help="the GPUBOOT_HOME volume's size")
    kube.add_argument("--storage-class", help="the volume's storage class (default: the cluster's)")
    p.add_argument(
        "scan_args",
        nargs=argparse.REMAINDER,
        metavar="-- SCAN OPTIONS",
        help="options of `gpuboot scan` (after --), checked now",
    )
    p.set_defaults(func=run)


def run(args) -> Outcome:
    if args.idle_check:
        return _idle_check(args)
    scan_args = list(args.scan_args or [])
    if scan_args[:1] == ["--"]:
        scan_args = scan_args[1:]
    scan_ns = _checked_scan(args, scan_args)
    if args.kubernetes:
        files = _cronjob(args, scan_args, scan_ns)
    else:
        files = _units(args, scan_args, scan_ns)
    written = _write(args.dir, files) if args.dir else []
    doc = {
        "kind": "kubernetes" if args.kubernetes else "systemd",
        "files": files,
        "written": written,
        "success_exit_status": _reported(),
    }
    if written:
        text = "\n".join(f"wrote {w}" for w in written)
        text += "\n" + _next_step(args, written)
    else:
        text = "\n".join(files.values()).rstrip("\n")
    return Outcome(EXIT_OK, doc, text)


def _reported() -> list[int]:
    from gpuboot.schedule import reported_codes

    return reported_codes()


def _idle_check(args) -> Outcome:
    from gpuboot.schedule import EXIT_HOSTS_HELD
    from gpuboot.schedule.idle import holder

    held = holder(args.inventory, args.limit)
    if held is None:
        return Outcome(EXIT_OK, {"idle": True, "holder": None}, "")
    err(f"gpuboot: scheduled scan skipped: {held}")
    return Outcome(EXIT_HOSTS_HELD, {"idle": False, "holder": held}, "")


def _checked_scan(args, scan_args: list[str]) -> argparse.Namespace:
    """The scan options as `gpuboot scan` reads them: refused now (exit 2), not at the
    first timer."""
    given = ["scan", "-i", args.inventory, *(["--limit", args.limit] if args.limit else [])]
    try:
        ns = args.root.parse_args([*given, *scan_args])  # the tree this verb belongs to
    except BadInput as exc:
        raise BadInput(
            f"scan options after --: {exc.message}",
            where="gpuboot schedule",
            hint="give options `gpuboot scan --help` lists",
        ) from None
    if ns.inventory != args.inventory or ns.limit != args.limit or ns.json:
        raise BadInput(
            "-i, --limit and --json belong to gpuboot schedule itself, not after --",
            where="gpuboot schedule",
            hint="e.g. gpuboot schedule -i INV --limit GROUP -- --kubeconfig FILE",
        )
    from gpuboot.inventory import load_inventory, select_hosts

    select_hosts(load_inventory(args.inventory), args.limit)  # bad input now, not hourly
    return ns


def _units(args, scan_args: list[str], ns: argparse.Namespace) -> dict[str, str]:
    from gpuboot import paths
    from gpuboot.schedule import systemd

    for kube_only in ("image",):
        if getattr(args, kube_only):
            raise BadInput(
                f"--{kube_only} is for --kubernetes",
                where=f"--{kube_only}",
                hint="add --kubernetes",
            )
    for attr, flag in PATH_OPTIONS.items():
        value = getattr(ns, attr, None)
        if value and not Path(value).is_absolute():
            raise BadInput(
                f"{flag} {value} is a relative path: the unit runs from /",
                where=flag,
                hint=f"give it absolute: {flag} {Path(value).absolute()}",
            )
    exe = _executable(args.gpuboot)
    home = Path(args.home).absolute() if args.home else paths.home()
    target = ["-i", args.inventory, *(["--limit", args.limit] if args.limit else [])]
    writable = [Path(ns.textfile_dir)] if ns.textfile_dir else []
    if ns.history:
        writable.append(Path(ns.history).parent)
    _check_calendar(args.every)
    units = systemd.Units(
        name=args.name,
        scan=[exe, "scan", "-q", *target, *scan_args],
        idle_check=[exe, "schedule", "--idle-check", "-q", *target],
        every=args.every,
        home=home,
        writable=tuple(writable),
        user=args.user,
        description=f"gpuboot compliance scan of {Path(args.inventory).name}",
    )
    return systemd.files(units)


def _executable(given: str | None) -> str:
    import shutil

    if given:
        path = Path(given)
        if not path.is_absolute():
            raise BadInput(
                f"--gpuboot {given} is not an absolute path",
                where="--gpuboot",
                hint="e.g. --gpuboot /opt/gpuboot/.venv/bin/gpuboot",
            )
        return str(path)
    beside = Path(sys.executable).parent / "gpuboot"  # this venv's console script
    found = str(beside) if beside.exists() else shutil.which("gpuboot")
    if not found:
        raise BadInput(
            "cannot tell where the gpuboot executable is",
            where="--gpuboot",
            hint="give it: --gpuboot /opt/gpuboot/.venv/bin/gpuboot",
        )
    return str(Path(found).absolute())


def _check_calendar(every: str) -> None:
    """systemd's own reading of --every, where systemd-analyze is installed."""
    import shutil
    import subprocess

    from gpuboot.schedule.systemd import calendar

    calendar(every)  # the characters first: nothing odd reaches the command
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        return
    proc = subprocess.run(
        [analyze, "calendar", "--", every], capture_output=True, text=True, timeout=30
    )
    if proc.returncode != 0:
        raise BadInput(
            f"--every {every!r} is not a calendar event systemd accepts: "
            f"{proc.stderr.strip() or proc.stdout.strip()}",
            where="--every",
            hint="e.g. --every hourly, --every '*-*-* *:00/15:00' (systemd.time)",
        )


def _cronjob(args, scan_args: list[str], ns: argparse.Namespace) -> dict[str, str]:
    from gpuboot.schedule import kubernetes as k

    if not args.image:
        raise BadInput(
            "--kubernetes needs --image",
            where="--image",
            hint="an image holding gpuboot with its k8s extra and /bin/sh, e.g. "
            "--image registry.example/gpuboot:0.1.0",
        )
    for flag in ("user", "gpuboot", "home"):
        if getattr(args, flag):
            raise BadInput(
                f"--{flag} is for the systemd units, not --kubernetes",
                where=f"--{flag}",
                hint=f"leave --{flag} out: the CronJob's GPUBOOT_HOME is its volume, {k.HOME}",
            )
    if ns.kubeconfig:
        raise BadInput(
            "the CronJob reaches its cluster with its service account's kubeconfig",
            where="--kubeconfig",
            hint="leave --kubeconfig out with --kubernetes",
        )
    for attr, flag in PATH_OPTIONS.items():
        value = getattr(ns, attr, None)
        if value and not Path(value).is_relative_to(k.HOME):
            raise BadInput(
                f"{flag} {value} is not on the CronJob's volume",
                where=flag,
                hint=f"a path under {k.HOME}, e.g. {flag} {k.HOME}/{Path(value).name}",
            )
    job = k.CronJob(
        name=args.name,
        namespace=args.namespace,
        image=args.image,
        schedule=k.cron(args.every),
        inventory_text=_one_file_inventory(args.inventory),
        scan_args=(*(["--limit", args.limit] if args.limit else []), *scan_args),
        ssh_secret=args.ssh_secret,
        storage=args.storage,
        storage_class=args.storage_class,
        remediate=bool(ns.remediate),
        labels={},
    )
    return {f"{args.name}.yaml": k.to_yaml(job, k.manifests(job))}


def _one_file_inventory(inventory: str) -> str:
    """The inventory's text for the ConfigMap: one file, whole (group_vars/ and
    host_vars/ beside it would be lost in the pod: refused, with the way to one file)."""
    from gpuboot.inventory.files import VARS_DIRS
    from gpuboot.yamlsafe import decode_utf8, read_capped_bytes

    path = Path(inventory)
    hint = f"make it one file: ansible-inventory -i {path} --list --yaml --output site-all.yml"
    beside = [d for d in VARS_DIRS if (path.parent / d).is_dir()]
    if path.is_dir() or beside:
        raise BadInput(
            "a CronJob carries a one-file inventory (a ConfigMap key); "
            + (f"{', '.join(beside)} beside it would be lost" if beside else "this is a directory"),
            where=str(path),
            hint=hint,
        )
    data = read_capped_bytes(path, 1024 * 1024, "inventory", hint=hint)  # a ConfigMap's cap
    return decode_utf8(data, str(path), hint=hint)


def _write(directory: str, files: dict[str, str]) -> list[str]:
    from gpuboot.paths import fs_error

    where = Path(directory)
    try:
        where.mkdir(parents=True, exist_ok=True)
        written = []
        for name, text in files.items():
            (where / name).write_text(text)
            written.append(str(where / name))
    except OSError as exc:
        raise fs_error(exc, f"--dir {where}", hint="choose a --dir you can write") from exc
    return written


def _next_step(args, written: list[str]) -> str:
    if args.kubernetes:
        return f"then: kubectl apply -f {written[0]}"
    timer = next(w for w in written if w.endswith(".timer"))
    return (
        f"then: cp {' '.join(written)} /etc/systemd/system/ && systemctl daemon-reload && "
        f"systemctl enable --now {Path(timer).name}"
    )
