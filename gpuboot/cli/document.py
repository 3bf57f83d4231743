"""The JSON document of a certify or scan run, composed once, where it is printed: the
run's typed result and what the verb did after it (files written, a calibration, the join
gate's actions) stay separate and typed until then; nothing edits the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class RunDocument:
    result: Any  # gpuboot.results.RunReport (certify) or gpuboot.scan.ScanResult: to_dict()
    written: dict[str, Path] = field(default_factory=dict)  # report name -> file
    calibration: dict[str, Any] | None = None
    gate: list[Any] | None = None  # gpuboot.k8s.GateAction, one per node gated

    def to_dict(self) -> dict[str, Any]:
        doc = {
            **self.result.to_dict(),
            "reports": {name: str(p) for name, p in self.written.items()},
        }
        if self.calibration is not None:
            doc["calibration"] = self.calibration
        if self.gate is not None:
            doc["k8s_gate"] = [a.to_dict() for a in self.gate]
        return doc
