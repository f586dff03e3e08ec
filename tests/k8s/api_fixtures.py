"""Recorded exchanges with a Kubernetes API server (core/v1), in the wire form the API reference gives: the paths
and verbs of pods, services and pods/exec, list and watch documents (PodList with metadata.resourceVersion; watch
events {"type", "object"}), objects as the server returns them (uid, resourceVersion, creationTimestamp, status),
and Status bodies for errors (409 AlreadyExists, 404 NotFound, 403 Forbidden). Queries are what the official
client sends: camelCase names, booleans as the client writes them."""

from __future__ import annotations

import copy
import io
import json
import tarfile
from typing import Any

from tests.k8s.api_server import Exchange

NS = "rehearse"
IMAGE = "registry.example:5000/fakegpu/pytorch:0.1.0"
CREATED = "2026-12-06T01:00:00Z"
RUN = "0123456789ab"


def pods_path(name: str | None = None, sub: str = "") -> str:
    return f"/api/v1/namespaces/{NS}/pods" + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


def services_path(name: str | None = None) -> str:
    return f"/api/v1/namespaces/{NS}/services" + (f"/{name}" if name else "")


def selector(cluster: str | None) -> dict[str, list[str]]:
    return {"labelSelector": [f"fakegpu.cluster={cluster}" if cluster else "fakegpu.cluster"]}


def status(code: int, reason: str, message: str, kind: str | None = None, name: str | None = None) -> dict:
    details = {k: v for k, v in (("name", name), ("kind", kind)) if v}
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": details, "code": code}


def pod_name(cluster: str, rank: int) -> str:
    return f"fakegpu-{cluster}-node-{rank}"


def pod(cluster: str, rank: int, phase: str, rv: int, nodes: int = 2, exit_code: int | None = None,
        deleting: bool = False) -> dict[str, Any]:
    """A node pod as GET returns it; its env is what `run` substitutes $NODE_RANK from."""
    if phase == "Pending":
        state, ready = {"waiting": {"reason": "ContainerCreating"}}, False
    elif phase == "Running":
        state, ready = {"running": {"startedAt": CREATED}}, True
    else:
        state, ready = {"terminated": {"exitCode": exit_code if exit_code is not None else 0,
                                       "reason": "Completed" if phase == "Succeeded" else "Error",
                                       "startedAt": CREATED, "finishedAt": CREATED}}, False
    env = {"MASTER_ADDR": f"node-0.fakegpu-{cluster}", "MASTER_PORT": "29500", "NNODES": str(nodes),
           "NODE_RANK": str(rank), "NPROC_PER_NODE": "4", "FAKEGPU_RUNTIME": "fakecuda",
           "FAKEGPU_REPORT_DIR": "/fakegpu/reports", "FAKEGPU_CLUSTER": cluster}
    meta = {"name": pod_name(cluster, rank), "namespace": NS, "uid": f"5c1e{rank:04d}-0000-4000-8000-00000000000{rank}",
            "resourceVersion": str(rv), "creationTimestamp": CREATED,
            "labels": {"fakegpu.cluster": cluster, "fakegpu.run": RUN, "fakegpu.node": str(rank),
                       "fakegpu.mode": "fakecuda", "fakegpu.nnodes": str(nodes),
                       "app.kubernetes.io/part-of": "fakegpu"},
            "annotations": {"fakegpu.devices": "a100:4"}}
    if deleting:
        meta["deletionTimestamp"], meta["deletionGracePeriodSeconds"] = CREATED, 2
    return {
        "kind": "Pod", "apiVersion": "v1", "metadata": meta,
        "spec": {"runtimeClassName": "fakegpu", "hostname": f"node-{rank}", "subdomain": f"fakegpu-{cluster}",
                 "restartPolicy": "Never", "terminationGracePeriodSeconds": 2, "nodeName": f"gpu-node-{rank}",
                 "schedulerName": "default-scheduler", "enableServiceLinks": False,
                 "containers": [{"name": "node", "image": IMAGE, "command": ["sleep", "infinity"],
                                 "env": [{"name": k, "value": v} for k, v in env.items()],
                                 "resources": {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": "4"}},
                                 "imagePullPolicy": "IfNotPresent", "terminationMessagePolicy": "File"}]},
        "status": {"phase": phase, "qosClass": "BestEffort", "hostIP": "10.0.0.1" + str(rank),
                   "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": CREATED}],
                   "containerStatuses": [{"name": "node", "state": state, "ready": ready, "restartCount": 0,
                                          "image": IMAGE, "imageID": "", "started": ready}]},
    }


def service(cluster: str, rv: int = 90) -> dict[str, Any]:
    return {"kind": "Service", "apiVersion": "v1",
            "metadata": {"name": f"fakegpu-{cluster}", "namespace": NS, "uid": "5e7c0000-0000-4000-8000-000000000000",
                         "resourceVersion": str(rv), "creationTimestamp": CREATED,
                         "labels": {"fakegpu.cluster": cluster, "fakegpu.run": RUN,
                                    "app.kubernetes.io/part-of": "fakegpu"}},
            "spec": {"clusterIP": "None", "clusterIPs": ["None"], "type": "ClusterIP",
                     "selector": {"fakegpu.cluster": cluster}, "publishNotReadyAddresses": True,
                     "ports": [{"name": "rendezvous", "protocol": "TCP", "port": 29500, "targetPort": 29500}],
                     "sessionAffinity": "None", "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack"},
            "status": {"loadBalancer": {}}}


def listing(kind: str, items: list[dict], rv: int = 100) -> dict[str, Any]:
    def bare(o: dict) -> dict:  # items of a list carry no kind/apiVersion of their own
        return {k: v for k, v in o.items() if k not in ("kind", "apiVersion")}

    return {"kind": f"{kind}List", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)},
            "items": [bare(i) for i in items]}


def list_pods(cluster: str | None, items: list[dict], rv: int = 100) -> Exchange:
    return Exchange("GET", pods_path(), selector(cluster), response=listing("Pod", items, rv))


def list_services(cluster: str | None, items: list[dict]) -> Exchange:
    return Exchange("GET", services_path(), selector(cluster), response=listing("Service", items))


def watch_pods(cluster: str, since: int, events: list[tuple[str, dict]], timeout_s: int = 300) -> Exchange:
    query = {**selector(cluster), "resourceVersion": [str(since)], "timeoutSeconds": [str(timeout_s)],
             "watch": ["true"]}
    return Exchange("GET", pods_path(), query, watch=[{"type": t, "object": o} for t, o in events])


def create_service(cluster: str, status_code: int = 201, response: dict | None = None) -> Exchange:
    body = {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"fakegpu-{cluster}", "labels": {"fakegpu.cluster": cluster}},
            "spec": {"clusterIP": "None", "selector": {"fakegpu.cluster": cluster}}}
    return Exchange("POST", services_path(), body=body, status=status_code, response=response or service(cluster))


def create_pod(cluster: str, rank: int, gpus: int = 4, status_code: int = 201,
               response: dict | None = None) -> Exchange:
    """What must be on the wire: the RuntimeClass, the GPU limit, the rank's labels and DNS name."""
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name(cluster, rank),
                         "labels": {"fakegpu.cluster": cluster, "fakegpu.node": str(rank)},
                         "annotations": {"fakegpu.devices": f"a100:{gpus}"}},
            "spec": {"runtimeClassName": "fakegpu", "hostname": f"node-{rank}", "subdomain": f"fakegpu-{cluster}",
                     "restartPolicy": "Never",
                     "containers": [{"name": "node", "image": IMAGE, "command": ["sleep", "infinity"],
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}
    return Exchange("POST", pods_path(), body=body, status=status_code,
                    response=response or pod(cluster, rank, "Pending", 100 + rank))


def delete(path: str, obj: dict | None, name: str, kind: str) -> Exchange:
    if obj is None:
        return Exchange("DELETE", path, status=404, response=status(404, "NotFound", f'{kind} "{name}" not found',
                                                                    kind, name))
    return Exchange("DELETE", path, response=obj)


def delete_pod(cluster: str, rank: int, found: bool = True) -> Exchange:
    name = pod_name(cluster, rank)
    return delete(pods_path(name), pod(cluster, rank, "Running", 300, deleting=True) if found else None, name, "pods")


def delete_service(cluster: str, found: bool = True) -> Exchange:
    name = f"fakegpu-{cluster}"
    return delete(services_path(name), service(cluster) if found else None, name, "services")


def read_pod(cluster: str, rank: int, phase: str = "Running", exit_code: int | None = None,
             optional: bool = False) -> Exchange:
    return Exchange("GET", pods_path(pod_name(cluster, rank)),
                    response=pod(cluster, rank, phase, 200, exit_code=exit_code), optional=optional)


def exec_query(argv: list[str]) -> dict[str, list[str]]:
    return {"command": argv, "container": ["node"], "stderr": ["true"], "stdin": ["false"], "stdout": ["true"],
            "tty": ["false"]}


def exec_in(cluster: str, rank: int, argv: list[str], out: list[tuple[int, bytes]], exit_code: int = 0,
            optional: bool = False) -> Exchange:
    if exit_code == 0:
        end = {"metadata": {}, "status": "Success"}
    else:
        end = {"metadata": {}, "status": "Failure",
               "message": f"command terminated with non-zero exit code: exit status {exit_code}",
               "reason": "NonZeroExitCode", "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]}}
    return Exchange("GET", pods_path(pod_name(cluster, rank), "exec"), exec_query(argv), exec_out=out,
                    exec_status=end, optional=optional)


def tar_of(files: dict[str, dict]) -> bytes:
    """A node's report folder as `tar cf - .` writes it: ./ first, then ./<file>."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        top = tarfile.TarInfo("./")
        top.type = tarfile.DIRTYPE
        archive.addfile(top)
        for name, doc in files.items():
            data = json.dumps(doc).encode()
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def running(cluster: str, nodes: int = 2) -> list[dict]:
    return [pod(cluster, r, "Running", 110 + r, nodes) for r in range(nodes)]


def copy_of(obj: dict) -> dict:
    return copy.deepcopy(obj)
