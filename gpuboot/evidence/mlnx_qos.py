"""``mlnx_qos -i <if>`` (MLNX_OFED / DOCA-OFED): trust state, DSCP->priority map, PFC per
priority, optional receive-buffer lines (newer releases) and the tc table (tsa, ETS bw,
priorities per tc).

The reading is the one the ``gpuboot.node.roce_qos`` module runs on the node (the
collection's module_utils mlnx_qos.py, stdlib only); here its errors become ParseError.
"""

from __future__ import annotations

from gpuboot.ansible.collections.ansible_collections.gpuboot.node.plugins.module_utils import (
    mlnx_qos as _qos,
)
from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text

__all__ = ["TOOL", "MlnxQos", "TrafficClass", "parse_mlnx_qos", "unreadable"]

TOOL = "mlnx_qos"
MlnxQos = _qos.MlnxQos
TrafficClass = _qos.TrafficClass
unreadable = _qos.unreadable


def parse_mlnx_qos(text: str) -> MlnxQos:
    require_text(TOOL, text)
    try:
        return _qos.parse_mlnx_qos(text)
    except _qos.MlnxQosParseError as exc:
        raise ParseError(TOOL, str(exc), hint="is this mlnx_qos -i <if> output?") from exc
