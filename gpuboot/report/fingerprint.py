"""Hardware/firmware fingerprint of one host, read from its evidence-bundle probe files, and
the differences between two (a certificate presented for a node whose hardware changed).

Only what the bundle holds is reported, each part from the existing evidence parsers; a
part whose probe is absent is left out and one whose output cannot be read is listed
under ``unreadable`` (a certificate must not claim facts nobody observed).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gpuboot.bundle.names import DPKG_FILE, IBSTAT_FILE, NVIDIA_VERSION_FILE, RPM_FILE
from gpuboot.bundle.store import read_file_capped
from gpuboot.errors import GpubootError
from gpuboot.evidence.forms import files_of, parser_of, query_fields
from gpuboot.evidence.ibstat import parse_ibstat
from gpuboot.evidence.ibv_devinfo import parse_ibv_devinfo
from gpuboot.evidence.modules import parse_nvidia_version
from gpuboot.evidence.nvidia_smi_csv import parse_query_gpu_csv
from gpuboot.evidence.topo import parse_topo_matrix

# Packages that make up the GPU/network stack; the full package list is kept as a digest.
_STACK_PKG = re.compile(
    r"nvidia|cuda|nccl|cudnn|dcgm|datacenter-gpu-manager|doca|mlnx|ofed|rdma|ibverbs|"
    r"infiniband|perftest|nscq|fabric-?manager|gds|^mft|^linux-(image|modules)-|^kernel"
)


def _text(path: Path) -> str:
    """A bundle file as the rules read it: a regular file within the cap, never a link's
    target (BundleError: the part is listed as unreadable)."""
    return read_file_capped(path).decode(errors="replace")


def _held(files: dict[str, Path], kind: str, *forms: str) -> tuple[Path | None, str]:
    """The file of one evidence kind (of ``forms``, if named) the rules would read first,
    and its form (gpuboot.evidence.forms)."""
    for name, form in files_of(kind, files):
        if not forms or form in forms:
            return files[name], form
    return None, ""


def _gpus_from_csv(path: Path) -> list[dict[str, Any]]:
    # certify names the file without the field list (the csv has a header): no fields.
    fields = query_fields(path.name)
    table = parse_query_gpu_csv(_text(path), list(fields) if fields else None)
    gpus = []
    for row in table.rows:
        gpus.append(
            {
                "index": row.index,
                "name": row.text("name"),
                "uuid": row.text("uuid"),
                "serial": row.text("serial"),
                "pci_bus_id": row.text("pci.bus_id"),
                "vbios": row.text("vbios_version"),
                "pcie_link": {
                    "gen_current": row.pcie_gen_current,
                    "gen_max": row.pcie_gen_max,
                    "width_current": row.pcie_width_current,
                    "width_max": row.pcie_width_max,
                },
            }
        )
    return gpus


def _field(fields: dict[str, str | None], *keys: str) -> str | None:
    return next((fields[k] for k in keys if fields.get(k)), None)


def _gpus_from_q(path: Path, form: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    q = parser_of("smi_q", form)(_text(path))
    gpus = [
        {
            "index": i,
            "name": g.product_name,
            "uuid": g.uuid,
            "serial": _field(g.fields, "Serial Number", "serial"),
            "pci_bus_id": g.bus_id or None,
            "vbios": _field(g.fields, "VBIOS Version", "vbios_version"),
            "pcie_link": {
                "gen_current": g.pcie_gen_current,
                "gen_max": g.pcie_gen_max,
                "width_current": g.pcie_width_current,
                "width_max": g.pcie_width_max,
            },
        }
        for i, g in enumerate(q.gpus)
    ]
    return gpus, {"driver_version": q.driver_version, "cuda_version": q.cuda_version}


def _fill(gpus: list[dict[str, Any]], other: list[dict[str, Any]]) -> None:
    """Complete csv rows from nvidia-smi -q (the csv field list varies by probe)."""
    by_bus = {str(g["pci_bus_id"]).upper(): g for g in other if g.get("pci_bus_id")}
    for i, gpu in enumerate(gpus):
        match = by_bus.get(str(gpu.get("pci_bus_id")).upper()) or (
            other[i] if i < len(other) else None
        )
        for key, value in (match or {}).items():
            if gpu.get(key) is None:
                gpu[key] = value


def _nics(path: Path) -> list[dict[str, Any]]:
    if path.name == IBSTAT_FILE:
        stat = parse_ibstat(_text(path))
        return [
            {
                "device": ca.name,
                "ca_type": ca.ca_type,
                "firmware": ca.firmware,
                "node_guid": ca.node_guid,
                "ports": [
                    {"port": p.port, "rate_gbits_s": p.rate_gbits_s, "link_layer": p.link_layer}
                    for p in ca.ports
                ],
            }
            for ca in stat.cas
        ]
    return [
        {
            "device": d.hca_id,
            "vendor_part_id": d.vendor_part_id,
            "firmware": d.fw_ver,
            "board_id": d.board_id,
            "ports": [{"port": p.port, "link_layer": p.link_layer} for p in d.ports],
        }
        for d in parse_ibv_devinfo(_text(path))
    ]


def _pcie_topology(path: Path) -> dict[str, Any]:
    topo = parse_topo_matrix(_text(path))
    return {
        "devices": list(topo.devices),
        "links": {dev: dict(sorted(row.links.items())) for dev, row in topo.rows.items()},
        "nic_names": dict(topo.nic_names),
    }


def _stack(path: Path) -> dict[str, Any]:
    """``dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}'`` lines."""
    installed: dict[str, str] = {}
    for line in _text(path).splitlines():
        parts = line.split("\t")
        if len(parts) < 2 or not parts[0].strip():
            continue
        status = parts[2].strip() if len(parts) > 2 else "ii"
        if len(status) >= 2 and status[1] == "i":  # second letter: actually installed
            installed[parts[0].strip()] = parts[1].strip()
    return _stack_of(installed)


def _rpm_stack(path: Path) -> dict[str, Any]:
    """``rpm -qa --qf`` lines (EL nodes), versions as ``[epoch:]version-release``."""
    from gpuboot.evidence.packages import installed_rpm_versions

    return _stack_of(installed_rpm_versions(_text(path)))


def _stack_of(installed: dict[str, str | tuple[str, ...]]) -> dict[str, Any]:
    # An EL installonly name (the kernel's) may be installed in several versions: a list.
    versions = {p: v if isinstance(v, str) else list(v) for p, v in sorted(installed.items())}
    listing = "".join(
        f"{p}\t{v if isinstance(v, str) else ' '.join(v)}\n" for p, v in versions.items()
    )
    return {
        "packages": {p: v for p, v in versions.items() if _STACK_PKG.search(p)},
        "package_count": len(installed),
        "all_packages_sha256": hashlib.sha256(listing.encode()).hexdigest(),
    }


def host_fingerprint(host_dir: Path, names: Iterable[str] | None = None) -> dict[str, Any]:
    """Fingerprint of ``<bundle>/<host>``: GPUs, driver, NICs, PCIe tree, installed stack.
    ``names``: read only these files (those MANIFEST.json lists): a file added since the
    run must not speak for the node."""
    wanted = None if names is None else set(names)
    files = {
        p.name: p
        for p in host_dir.iterdir()
        if p.is_file() and (wanted is None or p.name in wanted)
    }
    out: dict[str, Any] = {}
    unreadable: dict[str, str] = {}

    def part(path: Path | None, fn: Callable[[Path], Any]) -> Any:
        if path is None:
            return None
        try:
            return fn(path)
        except (GpubootError, ValueError, UnicodeError) as exc:
            unreadable[path.name] = str(exc)
            return None

    q_path, q_form = _held(files, "smi_q")
    q = part(q_path, lambda p: _gpus_from_q(p, q_form))
    gpus = part(_held(files, "query_gpu")[0], _gpus_from_csv)
    if gpus is None and q is not None:
        gpus = q[0]
    elif gpus is not None and q is not None:
        _fill(gpus, q[0])
    if gpus is not None:
        out["gpus"] = gpus
    driver: dict[str, Any] = dict(q[1]) if q else {}
    if module := part(
        files.get(NVIDIA_VERSION_FILE),
        lambda p: parse_nvidia_version(_text(p)),
    ):
        driver.update(kernel_module_version=module.version, kernel_module_flavor=module.flavor)
    if driver:
        out["driver"] = driver
    nic_path = files.get(IBSTAT_FILE) or _held(files, "nics", "ibv_devinfo")[0]
    if (nics := part(nic_path, _nics)) is not None:
        out["nics"] = nics
    if topo := part(_held(files, "topo")[0], _pcie_topology):
        out["pcie_topology"] = topo
    if stack := part(files.get(DPKG_FILE), _stack) or part(files.get(RPM_FILE), _rpm_stack):
        out["stack"] = stack
    if unreadable:
        out["unreadable"] = dict(sorted(unreadable.items()))
    return out


_GPU_IDENTITY = ("name", "uuid", "serial", "pci_bus_id", "vbios")
_NIC_IDENTITY = ("ca_type", "firmware", "node_guid", "vendor_part_id", "board_id")


def identity(fp: dict[str, Any]) -> dict[str, Any]:
    """The facts of a fingerprint that name the node's hardware and stack, flat: each GPU
    (serial, UUID, slot, VBIOS, maximum PCIe link), each NIC (GUID, firmware), where they
    sit (GPU to NIC paths, NVLink bonds), the driver
    and the stack's package versions. Not the live PCIe link (an idle GPU trains down to
    save power) nor the digest of every package (an unrelated update changes no GPU)."""
    out: dict[str, Any] = {}
    for i, gpu in enumerate(fp.get("gpus") or []):
        out |= {f"GPU {i} {k}": gpu.get(k) for k in _GPU_IDENTITY}
        link = gpu.get("pcie_link") or {}
        out[f"GPU {i} PCIe max"] = f"Gen{link.get('gen_max')} x{link.get('width_max')}"
    for nic in fp.get("nics") or []:
        out |= {f"NIC {nic.get('device')} {k}": nic.get(k) for k in _NIC_IDENTITY if k in nic}
    out |= placement(fp.get("pcie_topology") or {})
    out |= {f"driver {k}": v for k, v in (fp.get("driver") or {}).items()}
    packages = (fp.get("stack") or {}).get("packages") or {}
    out |= {f"package {name}": version for name, version in packages.items()}
    return out


def placement(topo: dict[str, Any]) -> dict[str, str]:
    """Where the parts sit relative to each other (nvidia-smi topo -m): each GPU's path to
    each NIC, by the NIC's name, and each GPU pair's NVLink bond. Two NICs that swap slots
    keep their GUIDs and names but not their GPUs: the rail a GPU's traffic takes changes."""
    links = topo.get("links") if isinstance(topo.get("links"), dict) else {}
    names = topo.get("nic_names") if isinstance(topo.get("nic_names"), dict) else {}
    out: dict[str, str] = {}
    for dev, row in sorted(links.items()):
        if not str(dev).startswith("GPU") or not isinstance(row, dict):
            continue
        for other, how in sorted(row.items()):
            if str(other).startswith("NIC"):
                out[f"{dev} to {names.get(other, other)}"] = str(how)
            elif str(other).startswith("GPU") and str(dev) < str(other):
                out[f"{dev} to {other}"] = str(how)
    return out


def differences(certified: dict[str, Any], observed: dict[str, Any]) -> list[str]:
    """Each identity fact that differs between two fingerprints, named with both values
    (absent on one side counts: a GPU gone, or nothing observed, is a difference)."""
    was, now = identity(certified), identity(observed)
    return [
        f"{key}: certified {was.get(key)!r}, now {now.get(key)!r}"
        for key in sorted(was.keys() | now.keys())
        if was.get(key) != now.get(key)
    ]
