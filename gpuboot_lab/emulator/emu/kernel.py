"""Kernel-side shims: lsmod, modprobe, rmmod, modinfo, dmesg (kmod and util-linux formats)."""

from __future__ import annotations

import os
import sys
import time

from . import kmod, kmsg, state

LEVELS = ["emerg", "alert", "crit", "err", "warn", "notice", "info", "debug"]


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")


def lsmod(argv: list[str]) -> int:
    node = state.load()
    mods = kmod.loaded(node)
    out = ["Module                  Size  Used by"]
    # The kernel lists the most recently loaded module first.
    for name in sorted(mods, key=lambda m: -int(mods[m]["seq"])):
        users = kmod.holders(node, name)
        count = len(users) + kmod.extra_refs(node, name)
        line = f"{name:<19} {int(mods[name]['size']):>8}  {count}"
        if users:
            line += " " + ",".join(users)
        out.append(line)
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def modprobe(argv: list[str]) -> int:
    remove = quiet = verbose = dry = all_mods = False
    names: list[str] = []
    for arg in argv:
        if arg in ("-r", "--remove"):
            remove = True
        elif arg in ("-q", "--quiet"):
            quiet = True
        elif arg in ("-v", "--verbose"):
            verbose = True
        elif arg in ("-n", "--dry-run", "--show"):
            dry = True
        elif arg in ("-a", "--all"):
            all_mods = True
        elif arg in ("-b", "--use-blacklist", "-s", "--syslog", "-f", "--force"):
            continue
        elif arg.startswith("-"):
            _err(f"modprobe: ERROR: unknown option -- '{arg.lstrip('-')}'")
            return 1
        else:
            names.append(arg)
    if not names:
        _err("modprobe: ERROR: missing parameters. See -h.")
        return 1
    targets = names if (all_mods or remove) else names[:1]
    params = [] if (all_mods or remove) else names[1:]
    rc = 0
    with state.transaction() as node:
        for name in targets:
            info = kmod.installed(name)
            if info is None:
                if not quiet:
                    if remove:
                        _err(f"modprobe: FATAL: Module {kmod.norm(name)} not found.")
                    else:
                        _err(
                            f"modprobe: FATAL: Module {kmod.norm(name)} not found in "
                            f"directory /lib/modules/{kmod.release()}"
                        )
                rc = 1
                continue
            if verbose:
                verb = "rmmod" if remove else "insmod"
                sys.stdout.write(f"{verb} {info['_file']} {' '.join(params)}".rstrip() + "\n")
            if dry:
                continue
            try:
                if remove:
                    if kmod.norm(name) not in kmod.loaded(node):
                        if not quiet:
                            _err(f"modprobe: FATAL: Module {kmod.norm(name)} is not in kernel.")
                        rc = 1
                        continue
                    kmod.remove_with_deps(node, name)
                else:
                    kmod.load(node, name, params)
            except kmod.ModError as exc:
                if not quiet:
                    msg = str(exc)
                    if "in use" in msg:
                        msg = f"Module {kmod.norm(name)} is in use."
                    _err(f"modprobe: FATAL: {msg}")
                rc = 1
    return rc


def rmmod(argv: list[str]) -> int:
    names = [a for a in argv if not a.startswith("-")]
    if not names:
        _err("rmmod: ERROR: missing module name.")
        return 1
    rc = 0
    with state.transaction() as node:
        for name in names:
            try:
                kmod.unload(node, os.path.basename(name).removesuffix(".ko"))
            except kmod.ModError as exc:
                _err(f"rmmod: ERROR: {exc}")
                rc = 1
    return rc


MODINFO_ORDER = [
    "filename",
    "alias",
    "version",
    "supported",
    "license",
    "description",
    "author",
    "firmware",
    "srcversion",
    "depends",
    "retpoline",
    "intree",
    "name",
    "vermagic",
]


def modinfo(argv: list[str]) -> int:
    field = None
    names: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg in ("-F", "--field"):
            field = next(it, "")
        elif arg.startswith("--field="):
            field = arg.split("=", 1)[1]
        elif arg.startswith("-F") and len(arg) > 2:
            field = arg[2:]
        elif arg.startswith("-"):
            continue
        else:
            names.append(arg)
    if not names:
        _err("modinfo: ERROR: missing module or filename.")
        return 1
    rc = 0
    for name in names:
        info = kmod.installed(name)
        if info is None:
            _err(f"modinfo: ERROR: Module {name} not found.")
            rc = 1
            continue
        values = {
            "filename": info["_file"],
            "version": info.get("version", ""),
            "license": info.get("license", _license(name, info)),
            "description": info.get("description", ""),
            "author": info.get("author", ""),
            "srcversion": info.get("srcversion", _srcversion(name, info.get("version", ""))),
            "depends": info.get("depends", ""),
            "retpoline": "Y",
            "intree": "Y" if info.get("_intree") else "",
            "name": kmod.norm(name),
            "vermagic": f"{kmod.release()} SMP preempt mod_unload modversions ",
            "supported": "" if info.get("_intree") else "external",
        }
        for key, value in info.items():
            if (
                not key.startswith("_")
                and key not in values
                and key not in ("flavor", "size", "builddate", "autoload")
            ):
                values[key] = value
        if field is not None:
            if values.get(field):
                sys.stdout.write(values[field] + "\n")
            continue
        keys = [k for k in MODINFO_ORDER if values.get(k) or k == "depends"]
        keys += [k for k in values if k not in MODINFO_ORDER and values[k]]
        for key in keys:
            sys.stdout.write(f"{key + ':':<16}{values[key]}\n")
    return rc


def dmesg(argv: list[str]) -> int:
    fmt = "raw"
    decode = clear = notime = False
    levels: set[str] | None = None
    it = iter(argv)
    for arg in it:
        if arg in ("-T", "--ctime"):
            fmt = "ctime"
        elif arg.startswith("--time-format"):
            fmt = arg.split("=", 1)[1] if "=" in arg else next(it, "raw")
        elif arg in ("-x", "--decode"):
            decode = True
        elif arg in ("-c", "--read-clear", "-C", "--clear"):
            clear = True
        elif arg in ("-t", "--notime"):
            notime = True
        elif arg in ("-l", "--level"):
            levels = set(next(it, "").split(","))
        elif arg.startswith("--level="):
            levels = set(arg.split("=", 1)[1].split(","))
    if os.geteuid() != 0 and not os.environ.get("GPUEMU_ROOT"):
        # Debian sets kernel.dmesg_restrict=1
        _err("dmesg: read kernel buffer failed: Operation not permitted")
        return 1
    node = state.load()
    boot = float(node.vstate.get("boot_time") or time.time())
    out: list[str] = []
    for rec in kmsg.records():
        level = LEVELS[int(rec.get("p", 6)) & 7]
        if levels is not None and level not in levels:
            continue
        t = float(rec["t"])
        if notime:
            prefix = ""
        elif fmt == "ctime":
            prefix = "[" + time.strftime("%a %b %e %H:%M:%S %Y", time.localtime(boot + t)) + "] "
        elif fmt == "iso":
            wall = boot + t
            tm = time.localtime(wall)
            tz = time.strftime("%z", tm)
            prefix = (
                time.strftime("%Y-%m-%dT%H:%M:%S", tm)
                + f",{int(wall % 1 * 1e6):06d}"
                + f"{tz[:3]}:{tz[3:]} "
            )
        else:
            prefix = f"[{int(t):5d}.{round(t % 1 * 1e6) % 1000000:06d}] "
        if decode:
            prefix = f"{'kern':<6}:{level:<6}: " + prefix
        lines = str(rec["m"]).split("\n")
        out.append(prefix + lines[0])
        out.extend(" " * len(prefix) + extra for extra in lines[1:])
    if out:
        sys.stdout.write("\n".join(out) + "\n")
    if clear:
        kmsg.clear()
    return 0


def journalctl(argv: list[str]) -> int:
    """`journalctl -k` (`--dmesg`): the same kernel records in journald's short format,
    `Mon DD HH:MM:SS host kernel: message`, continuation lines indented under the message
    (only the kernel log is emulated: other journalctl uses are refused)."""
    if not ({"-k", "--dmesg"} & set(argv)):
        _err("journalctl: only -k/--dmesg (the kernel log) is emulated in this lab")
        return 1
    node = state.load()
    boot = float(node.vstate.get("boot_time") or time.time())
    host = os.uname().nodename.split(".")[0]
    out: list[str] = []
    for rec in kmsg.records():
        stamp = time.strftime("%b %d %H:%M:%S", time.localtime(boot + float(rec["t"])))
        prefix = f"{stamp} {host} kernel: "
        lines = str(rec["m"]).split("\n")
        out.append(prefix + lines[0])
        out.extend(" " * len(prefix) + extra for extra in lines[1:])
    sys.stdout.write("\n".join(out) + "\n" if out else "-- No entries --\n")
    return 0


def _srcversion(name: str, version: str) -> str:
    import hashlib  # here: a shim's start-up pays for what it uses

    return hashlib.md5(f"{name}-{version}".encode()).hexdigest()[:23].upper()


def _license(name: str, info: dict[str, str]) -> str:
    if info.get("flavor") == "open":
        return "Dual MIT/GPL"
    return "NVIDIA" if name.startswith("nvidia") else "GPL"
