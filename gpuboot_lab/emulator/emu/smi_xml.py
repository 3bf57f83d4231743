"""nvidia-smi -q -x: the same tree as the text report, as nvsmi_device_v12.dtd XML."""

from __future__ import annotations

import time
from xml.sax.saxutils import escape

from . import model, smi_q
from .model import Gpu
from .smi_fields import Ctx


def _render(entries: list[smi_q.E], depth: int, out: list[str]) -> None:
    pad = "\t" * depth
    for e in entries:
        if e.only == "text":
            continue
        kids = [k for k in e.kids if k.only != "text"]
        if kids:
            out.append(f"{pad}<{e.tag}>")
            _render(kids, depth + 1, out)
            out.append(f"{pad}</{e.tag}>")
        elif e.value == "" or e.value is None:
            out.append(f"{pad}<{e.tag}>")
            out.append(f"{pad}</{e.tag}>")
        elif e.tag == "mig_devices":
            out.append(f"{pad}<{e.tag}>\n{pad}\t{escape(e.value)}\n{pad}</{e.tag}>")
        else:
            value = e.xml_value if e.xml_value is not None else e.value
            out.append(f"{pad}<{e.tag}>{escape(value)}</{e.tag}>")


def xml_report(
    gpus: list[Gpu], ctx: Ctx, driver: str, mig: dict[str, list[smi_q.E]] | None = None
) -> tuple[str, int]:
    head: list[str] = []
    rc = 0
    out = [
        '<?xml version="1.0" ?>',
        '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
        "<nvidia_smi_log>",
        f"\t<timestamp>{time.ctime()}</timestamp>",
        f"\t<driver_version>{driver}</driver_version>",
        f"\t<cuda_version>{model.cuda_version(driver)}</cuda_version>",
        f"\t<attached_gpus>{ctx.count}</attached_gpus>",
    ]
    shown = [g for g in gpus if not g.lost]
    for g in gpus:
        if g.lost:
            head.append(smi_q.lost_message(g))
            rc = 15
    for i, g in enumerate(shown):
        out.append(f'\t<gpu id="{g.bus_id}">')
        _render(smi_q.gpu_tree(g, ctx, driver, (mig or {}).get(g.bus_id)), 2, out)
        out.append("\t</gpu>")
        if i != len(shown) - 1:
            out.append("")
    out.append("")
    out.append("</nvidia_smi_log>")
    return "\n".join(head + out) + "\n", rc
