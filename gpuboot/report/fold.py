"""Long per-link reasons folded for people: "GPU 0: link(s) 0,1,...,17 inactive; GPU 1: ..."
reads "GPU 0-1 links 0-17 inactive", and NVLink error counters on 144 links read
"GPU 0-7 links 0-17: crc_errors 57, replay_errors 1-12" (a count, or the range of counts
across the links); "GPU 0: all NVLinks inactive" on eight GPUs reads "GPU 0-7: all NVLinks
inactive". Pure: the full reason stays in --json and the reports; only terminal and Markdown
summaries fold."""

from __future__ import annotations

import re

# NVL-001: "GPU 3: link(s) 3,5 inactive"; NVL-002: "GPU 0 link 4: crc_flit=3, replay=1"
_LINKS = re.compile(r"GPU (\d+): link\(s\) ([\d,]+) (.+)")
_COUNTERS = re.compile(r"GPU (\d+) link (\d+): ((?:\w+=\d+)(?:, \w+=\d+)*)")
# NVL-001 and others: "GPU 6: all NVLinks inactive", the same words for several GPUs
_GPU = re.compile(r"GPU (\d+): (.+)")


def ranges(numbers) -> str:
    """0,1,2,3,7 -> "0-3,7"."""
    nums = sorted(set(numbers))
    if not nums:
        return ""
    out, start = [], None
    for prev, cur in zip(nums, [*nums[1:], None], strict=True):
        start = prev if start is None else start
        if cur != prev + 1:
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
    return ",".join(out)


def _span(values: list[int]) -> str:
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def fold_reason(reason: str) -> str:
    """``reason`` with its per-GPU link parts folded; any other part kept as it is, in its
    place (the first folded part stands where the first of its kind stood)."""
    parts = reason.split("; ")
    down: dict[tuple[tuple[int, ...], str], list[int]] = {}  # (links, what) -> GPUs
    same: dict[str, list[int]] = {}  # what -> GPUs
    counts: dict[int, dict[int, dict[str, int]]] = {}  # GPU -> link -> counter -> value
    out: list[str | tuple[str, ...]] = []
    for part in parts:
        if m := _LINKS.fullmatch(part):
            key = (tuple(int(x) for x in m[2].split(",") if x), m[3])
            if not down:
                out.append(("down",))
            down.setdefault(key, []).append(int(m[1]))
        elif m := _COUNTERS.fullmatch(part):
            if not counts:
                out.append(("counters",))
            pairs = (kv.split("=") for kv in m[3].split(", "))
            counts.setdefault(int(m[1]), {})[int(m[2])] = {k: int(v) for k, v in pairs}
        elif m := _GPU.fullmatch(part):
            if m[2] not in same:
                out.append(("same", m[2]))
            same.setdefault(m[2], []).append(int(m[1]))
        else:
            out.append(part)
    text = []
    for item in out:
        if item == ("down",):
            text += [
                f"GPU {ranges(gpus)} link{'s' if len(links) > 1 else ''} {ranges(links)} {what}"
                for (links, what), gpus in down.items()
            ]
        elif item == ("counters",):
            text += _fold_counters(counts)
        elif isinstance(item, tuple):
            text.append(f"GPU {ranges(same[item[1]])}: {item[1]}")
        else:
            text.append(str(item))
    return "; ".join(text)


def _fold_counters(counts: dict[int, dict[int, dict[str, int]]]) -> list[str]:
    """GPUs whose erring links and counter names match share one part; each counter shows
    its count, or the range of counts across those links."""
    groups: dict[tuple[tuple[int, ...], tuple[str, ...]], list[int]] = {}
    for gpu, links in counts.items():
        names = tuple(sorted({k for c in links.values() for k in c}))
        groups.setdefault((tuple(sorted(links)), names), []).append(gpu)
    out = []
    for (links, names), gpus in groups.items():
        spans = [
            f"{n} {_span([counts[g][lk][n] for g in gpus for lk in links if n in counts[g][lk]])}"
            for n in names
        ]
        word = "links" if len(links) > 1 else "link"
        out.append(f"GPU {ranges(gpus)} {word} {ranges(links)}: {', '.join(spans)}")
    return out
