"""The gpuboot command line: the only place that prints for humans and exits.

Exit codes: 0 all good; 1 a node failed (verdict FAIL/ERROR or a failed host);
2 bad input (usage, config, inventory, stack); 3 the run itself broke.
Heavy modules (ansible, ansible_runner, testinfra) are imported inside the verbs so
`gpuboot --help` stays quick.

Layout: ``parser`` (the argument tree), ``options`` (option groups shared by verbs),
one module per verb, ``render`` (human text), ``boundary`` (errors -> messages, output).
"""

from __future__ import annotations

from gpuboot.cli.boundary import entry, main
from gpuboot.cli.outcome import Outcome
from gpuboot.cli.outcome import progress as _progress  # the lab's verbs import this name
from gpuboot.cli.parser import build_parser

__all__ = ["Outcome", "_progress", "build_parser", "entry", "main"]
