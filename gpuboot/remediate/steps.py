"""The real steps of the ladder on one node, as ``ladder.climb`` injects them: reconcile
(install --tags of the failing rules), reset (a play that stops the GPU's users and runs
nvidia-smi -r), reboot (drained first on a cluster, then the install's reboot role),
reinstall (install --full --allow-reboot), each followed by a fresh certify that must pass
within a timeout; quarantine marks the node for hardware work.

A step on a cluster node first reads the node (another tool's marker or a human's cancel
since the climb began: stop), passes the disruption gate (gpuboot.k8s.budget) and holds
the node's Lease (gpuboot.k8s.lease) until the certify after it is done; without a
kubeconfig no cluster step is taken (a reboot drains nothing, nothing is labelled). Each
step is appended to the remediation history and, on a cluster node, to its actions
annotation.

Every play a step runs on the node (install's, the reset, the reboot) takes the node's own
lease first: another controller holding it leaves the node untouched and the step held,
not failed, so the ladder does not climb to a harsher rung over a busy node.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuboot.errors import BadInput, GpubootError
from gpuboot.inventory import Inventory
from gpuboot.remediate import cluster, plays, record
from gpuboot.remediate import ladder as LD
from gpuboot.results import RunReport
from gpuboot.runner import HostResult
from gpuboot.verdict import UNKNOWN, Status

CERTIFY_TIMEOUT_S = 600.0  # a node back from a reboot may need minutes to load its driver
CERTIFY_RETRY_S = 15.0


class Held(Exception):
    """The step was not taken: the drain before a reboot was refused (budget, ownership),
    or another controller holds the node's lease; or what it did is not known: the executor
    running it was lost."""


def _raise_if_held(played: HostResult) -> None:
    if why := plays.held(played):
        raise Held(why)


@dataclass
class Cluster:
    api: Any  # gpuboot.k8s.gate.Api
    limits: Any  # gpuboot.k8s.budget.Limits | None
    kubeconfig: str
    context: str | None
    sign_key: Path | None


class Steps:
    """The steps of one node, as ``ladder.climb`` calls them: (result, detail)."""

    def __init__(
        self,
        inv: Inventory,
        host: str,
        name: str,
        fault: LD.Fault,
        *,
        cluster_: Cluster | None,
        history: Path,
        certify_timeout_s: float,
        progress: Callable[[str], None],
        urgent: bool = False,
    ) -> None:
        self.inv, self.host, self.name, self.fault = inv, host, name, fault
        self.cluster, self.history = cluster_, history
        self.certify_timeout_s, self.progress = certify_timeout_s, progress
        self.urgent = urgent  # a critical fault: a human's cancel does not stop it

    def __call__(self, step: str) -> tuple[str, str]:
        self.progress(f"{self.host}: {step}")
        if self.cluster is None:
            result, detail = self._step(step)
        else:
            result, detail = self._cluster_step(step)
        rec = {**record.entry(step, result, self.fault.key), "host": self.host, "detail": detail}
        record.append(self.history, [rec])
        if self.cluster is not None and result != LD.HELD:
            with contextlib.suppress(
                self.cluster.api.api_error, *self.cluster.api.transport_errors
            ):
                if step != LD.QUARANTINE:  # the quarantine wrote its own mark
                    cluster.mark(self.cluster.api, self.name, step, result, self._why())
        return result, detail

    def _cluster_step(self, step: str) -> tuple[str, str]:
        from gpuboot.k8s import lease, ownership
        from gpuboot.k8s.client import describe
        from gpuboot.remediate.hold import release_command

        api = self.cluster.api  # type: ignore[union-attr]
        outcome = None
        try:
            node = cluster.read_node(api, self.name)
            why = ownership.foreign_marker(node) or (
                None if self.urgent else ownership.cancelled(node)
            )
            if why:
                return LD.HELD, f"not touched: {why}"
            held_back = cluster.admit(api, self.name, self.cluster.limits)  # type: ignore[union-attr]
            if step == LD.QUARANTINE:
                changes = cluster.quarantine(
                    api, self.name, self._why(), take_out=held_back is None
                )
                return LD.DONE, "; ".join(changes)
            if held_back:
                return LD.HELD, f"held back by the disruption gate: {held_back}"
            with lease.held(api, self.name):
                # NVSentinel stands aside while gpuboot maintains the node, then resumes
                cluster.send(api, self.name, ownership.pause_nvsentinel(node))
                outcome = self._step(step)
                after = cluster.read_node(api, self.name)
                cluster.send(api, self.name, ownership.resume_nvsentinel(after))
            return outcome
        except lease.LeaseHeld as exc:
            return LD.HELD, f"another remediator holds the node's Lease: {exc.holder}"
        except (api.api_error, *api.transport_errors, ValueError) as exc:
            if outcome is None:
                return LD.HELD, f"nothing done: {describe(exc, api)}"
            # the step was taken: its result stands, what was left on the node is said
            release = release_command(
                self.name,
                self.cluster.kubeconfig,  # type: ignore[union-attr]
                self.cluster.context,  # type: ignore[union-attr]
                None,
            )
            return outcome[0], (
                f"{outcome[1]}; then the API failed ({describe(exc, api)}): NVSentinel's "
                f"label or gpuboot's Lease may be left, `{release}` clears them"
            )

    def _why(self) -> str:
        return f"{self.fault.key} ({', '.join(self.fault.rules) or 'no rule'})"

    def _step(self, step: str) -> tuple[str, str]:
        try:
            if step == LD.QUARANTINE:
                return LD.DONE, "recorded in the remediation history (no cluster)"
            done = {
                LD.RECONCILE: self._reconcile,
                LD.RESET: self._reset,
                LD.REBOOT: self._reboot,
                LD.REINSTALL: self._reinstall,
            }[step]()
        except Held as exc:
            return LD.HELD, str(exc)
        except BadInput as exc:  # refused before the node was touched (a skewed executor)
            return LD.HELD, f"not done: {exc}"
        except GpubootError as exc:
            return LD.FAILED, f"{step} broke: {exc}"
        if done:
            return LD.FAILED, done
        return self._certify()

    def _install(self, **kw: Any) -> str | None:
        from gpuboot.install import Drain, install
        from gpuboot.runner import broken_hosts

        drain = None
        if self.cluster is not None:
            drain = Drain(kubeconfig=self.cluster.kubeconfig, context=self.cluster.context)
        result = install(str(self.inv.path), limit=self.host, drain=drain, **kw)
        if (r := result.hosts.get(self.host)) is not None:
            _raise_if_held(r)  # refused at the lease, or unknown: its executor was lost
        if broken_hosts(result.hosts):
            r = result.hosts[self.host]
            return f"install failed at {r.failed_task or r.task}: {r.reason}"
        return None

    def _reconcile(self) -> str | None:
        from gpuboot.ids import remediation

        tags = tuple(r for r in self.fault.rules if remediation(r)["fix_tasks"])
        return self._install(tags=tags)

    def _reinstall(self) -> str | None:
        return self._install(full=True, allow_reboot=True)

    def _reset(self) -> str | None:
        played = plays.reset_gpus(self.inv, self.host, self.fault.gpus)
        _raise_if_held(played)
        if played.status in ("failed", "unreachable"):
            return f"GPU reset failed at {played.failed_task or played.task}: {played.reason}"
        return None

    def _reboot(self) -> str | None:
        if self.cluster is not None:
            from gpuboot.k8s.drain import drain

            out = drain(
                [self.host],
                kubeconfig=self.cluster.kubeconfig,
                context=self.cluster.context,
                node_names={self.host: self.name},
                limits=self.cluster.limits,
            )[self.host]
            if out.held:
                raise Held(f"not rebooted: the drain was held back: {out.held}")
            if out.error:
                return f"not rebooted: the drain failed: {out.error}"
        played = plays.reboot(self.inv, self.host, self._why())
        _raise_if_held(played)
        if played.status in ("failed", "unreachable"):
            return f"reboot failed at {played.failed_task or played.task}: {played.reason}"
        return None

    def _certify(self) -> tuple[str, str]:
        """A fresh certify of the node: PASS (or WARN) -> passed; FAIL -> failed; ERROR is
        tried again until the timeout (a node still booting), then unknown; UNKNOWN (the
        node's executor was lost) is unknown at once: another try would not reach it."""
        from gpuboot import certify

        deadline = time.monotonic() + self.certify_timeout_s
        while True:
            report = certify.certify(self.inv, limit=self.host)
            node = report.nodes[0]
            if node.verdict in (Status.PASS, Status.WARN):
                return LD.PASSED, self._back_in_service(report)
            if node.verdict == Status.FAIL:
                rules = sorted(node.failing())
                return LD.FAILED, f"certify after it: FAIL ({', '.join(rules)})"
            if node.verdict == UNKNOWN:
                return LD.UNKNOWN, "certify after it could not judge: its executor was lost"
            if time.monotonic() + CERTIFY_RETRY_S > deadline:
                return (
                    LD.UNKNOWN,
                    f"certify could not judge the node within {self.certify_timeout_s:.0f} s",
                )
            time.sleep(CERTIFY_RETRY_S)

    def _back_in_service(self, report: RunReport) -> str:
        if self.cluster is None:
            return f"certified (run {report.run_id})"
        if self.cluster.sign_key is None:
            return (
                f"certified (run {report.run_id}); not returned to service without a signing "
                f"key: gpuboot certify -i {self.inv.path} --limit {self.host} "
                f"--kubeconfig {self.cluster.kubeconfig} --sign-key KEY"
            )
        from gpuboot.cli.gate import certificates
        from gpuboot.k8s import apply_gate
        from gpuboot.report import write_reports
        from gpuboot.report.extent import policies

        assert report.run_dir is not None
        written = write_reports(report, report.run_dir / "reports", key_path=self.cluster.sign_key)
        actions = apply_gate(
            report,
            certificates=certificates(written),
            kubeconfig=self.cluster.kubeconfig,
            context=self.cluster.context,
            node_names={self.host: self.name},
            # a certify of one node has no pair partner: its group's policy decides
            accept_partial=policies(self.inv),
            limits=self.cluster.limits,
        )
        errors = [a.error for a in actions if a.error]
        if errors:
            return f"certified (run {report.run_id}); the gate could not release it: {errors[0]}"
        return f"certified (run {report.run_id}) and back in service"
