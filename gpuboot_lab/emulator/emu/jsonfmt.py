"""JSON in JsonCpp's styled layout (tabs, `"key" : value`, containers on their own lines),
which is how the NVIDIA tools built on JsonCpp (nvbandwidth, dcgmi -j) print it."""

from __future__ import annotations

import json
from typing import Any


def dumps(value: Any) -> str:
    return _value(value, 0) + "\n"


def _scalar(value: Any) -> str:
    if isinstance(value, float):
        text = f"{value:.17g}"  # JsonCpp writes doubles with 17 significant digits
        return text if any(c in text for c in ".e") else text + ".0"
    return json.dumps(value)


def _value(value: Any, depth: int) -> str:
    pad = "\t" * depth
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = []
        for key, item in sorted(value.items()):  # JsonCpp objects are key-ordered maps
            head = f"{pad}\t{json.dumps(key)} :"
            if isinstance(item, dict | list) and item:
                items.append(f"{head}\n{pad}\t{_value(item, depth + 1)}")
            else:
                items.append(f"{head} {_value(item, depth + 1)}")
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list):
        if not value:
            return "[]"
        items = [f"{pad}\t{_value(item, depth + 1)}" for item in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return _scalar(value)
