"""Which backend a command talks to: the one named (`--backend`), else the one `up` recorded in the cluster's state
folder, else Docker. So `fakegpu cluster run NAME` finds a Kubernetes cluster's pods without repeating where."""

from __future__ import annotations

import json

from fakegpu.cluster import models as m
from fakegpu.cluster.controller import BACKENDS, Controller


def recorded_backend(name: str | None) -> dict:
    if not name:
        return {}
    try:
        meta = json.loads((m.state_root() / m.check_name(name) / "cluster.json").read_text())
    except (OSError, ValueError):
        return {}
    backend = meta.get("backend")
    return backend if isinstance(backend, dict) else {}


def open_controller(name: str | None = None, backend: str | None = None, kubeconfig: str | None = None,
                    context: str | None = None, namespace: str | None = None) -> Controller:
    recorded = recorded_backend(name) if backend is None else {}
    kind = backend or recorded.get("kind") or "docker"
    if kind not in BACKENDS:
        raise m.ClusterUsageError(f"--backend must be one of {', '.join(BACKENDS)}, got {kind!r}")
    if kind == "docker":
        if kubeconfig or context or namespace:
            raise m.ClusterUsageError("--kubeconfig, --context and --namespace go with --backend k8s")
        return Controller()
    from fakegpu.cluster.k8s_backend import KubernetesBackend

    return Controller(backend=KubernetesBackend(
        kubeconfig or recorded.get("kubeconfig"), context or recorded.get("context"),
        namespace or recorded.get("namespace")))
