"""Metrics of the agent runtime client (it runs in the agent's process, not the server's).

``turnkeeper_agent_send_partial_held_total{target_type}`` counts logical sends that
stopped at a held chunk (seed section 4.5): only the client knows that several rows
form one logical send. `AgentRuntimeClient` takes any `RuntimeMetrics`; `ClientMetrics`
is the Prometheus one, with a registry of its own for the process that exposes it (the
MCP tool server of an agent runtime).

Example:
    >>> metrics = ClientMetrics()
    >>> client = AgentRuntimeClient(url, token, metrics=metrics)  # doctest: +SKIP
    >>> generate_latest(metrics.registry)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CollectorRegistry, Counter

from turnkeeper.adapters.observability.metrics import TARGET_TYPE_THREAD


class RuntimeMetrics(Protocol):
    """What the runtime client reports."""

    def partial_held(self, target_type: str) -> None:
        """Count a logical send that stopped at a held chunk after accepted ones.

        Args:
            target_type: the kind of target (``thread``).
        """
        ...


class ClientMetrics:
    """The runtime client's Prometheus metrics.

    Args:
        registry: where the counter is registered (a new registry when None).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.partial_held_total = Counter(
            "turnkeeper_agent_send_partial_held",
            "Logical (chunked) sends that stopped at a held chunk after accepted ones.",
            ["target_type"],
            registry=self.registry,
        )
        self.partial_held_total.labels(target_type=TARGET_TYPE_THREAD)

    def partial_held(self, target_type: str) -> None:
        """Count a partial-held logical send."""
        label = target_type if target_type == TARGET_TYPE_THREAD else "other"
        self.partial_held_total.labels(target_type=label).inc()


__all__ = ["ClientMetrics", "RuntimeMetrics"]
