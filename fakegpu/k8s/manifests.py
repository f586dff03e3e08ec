"""The Kubernetes objects `fakegpu k8s render` writes, as plain dicts: the cluster's side (Namespace, RuntimeClass,
the device plugin's DaemonSet) and example workloads (a Pod, its podman twin, a 2-node torchrun Job, a Kubeflow
PyTorchJob).

Inputs are checked by render.py before they get here; these functions only assemble. Every path the DaemonSet
mounts is the constant its reader uses (the plugin's folders, the runtime's config), so the two cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fakegpu.k8s.node_config import RUNTIME_HANDLER
from fakegpu.k8s.plugin import DEFAULT_PLUGIN_DIR, DEFAULT_STATE_DIR

Obj = dict[str, Any]

PART_OF = {"app.kubernetes.io/part-of": "fakegpu"}
PLUGIN_NAME = "fakegpu-device-plugin"
# Where a node keeps CDI specs that its engine applies at run time (containerd 1.7+, CRI-O).
CDI_DIR = "/var/run/cdi"
# The plugin compiles its gRPC messages at first use when its package holds none (a wheel built elsewhere); with
# a read-only root that goes to $XDG_CACHE_HOME, a scratch volume.
CACHE_DIR = "/var/cache/fakegpu"
DDP_SCRIPT = "ddp_train.py"
# The example Pod's image: any image, since the runtime brings nvidia-smi and the GPUs. Not fakegpu/cuda: its own
# ENV FAKEGPU_DEVICES would decide alone (FakeGPU's variable comes before NVIDIA_VISIBLE_DEVICES), and the pod
# would see that GPU rather than the ones the device plugin allocated.
POD_IMAGE = "debian:bookworm-slim"
RENDEZVOUS_PORT = 29500


@dataclass(frozen=True)
class Cluster:
    """What the rendered objects are made of, every value already checked."""

    namespace: str
    label_key: str
    label_value: str
    image: str
    workload_image: str
    mig_strategy: str
    resource_name: str
    example_resource: str  # what the examples ask for: the first resource the node advertises
    gpus_per_pod: int
    example_devices: tuple[str, ...]  # those GPUs by inventory index ("0", "0:1" for a MIG device), for podman
    config_dir: str  # the folder of the runtime's host config on the nodes (/etc/fakegpu)


def namespace(c: Cluster) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": c.namespace, "labels": dict(PART_OF)}}


def runtime_class(c: Cluster) -> Obj:
    """Pods naming it run under FakeGPU's runtime and are only placed on nodes whose engine has the handler."""
    return {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": RUNTIME_HANDLER, "labels": dict(PART_OF)},
            "handler": RUNTIME_HANDLER,
            "scheduling": {"nodeSelector": {c.label_key: c.label_value}}}


def _host_path(name: str, path: str, kind: str) -> Obj:
    return {"name": name, "hostPath": {"path": path, "type": kind}}


def plugin_volumes(config_dir: str) -> list[tuple[Obj, Obj]]:
    """(volume, mount) pairs of the plugin's container, each mounted where the plugin looks on the host."""
    pairs = [
        # the kubelet's registration socket and the plugin's own sockets
        (_host_path("device-plugins", DEFAULT_PLUGIN_DIR, "Directory"), False),
        # the runtime's host config, whose inventory the plugin advertises (written by the node setup script)
        (_host_path("fakegpu-config", config_dir, "Directory"), True),
        # the fault board a host-side `fakegpu fault inject` writes; read-write: the board is mapped that way
        (_host_path("fault-board", DEFAULT_STATE_DIR, "DirectoryOrCreate"), False),
        # CDI specs; read-only while the plugin only hands out NVIDIA_VISIBLE_DEVICES
        (_host_path("cdi", CDI_DIR, "DirectoryOrCreate"), True),
        ({"name": "cache", "emptyDir": {"sizeLimit": "64Mi"}}, False),
    ]
    out = []
    for volume, read_only in pairs:
        path = volume["hostPath"]["path"] if "hostPath" in volume else CACHE_DIR
        mount: Obj = {"name": volume["name"], "mountPath": path}
        if read_only:
            mount["readOnly"] = True
        out.append((volume, mount))
    return out


def daemon_set(c: Cluster) -> Obj:
    labels = {"app.kubernetes.io/name": PLUGIN_NAME, **PART_OF}
    volumes = plugin_volumes(c.config_dir)
    command = ["fakegpu", "device-plugin", "--mig-strategy", c.mig_strategy, "--resource-name", c.resource_name,
               "--plugin-dir", DEFAULT_PLUGIN_DIR, "--state-dir", DEFAULT_STATE_DIR]
    container = {
        "name": "device-plugin",
        "image": c.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        # FAKEGPU_RUNTIME empty: the plugin imports no torch (fakegpu/pytorch's own default is fakecuda)
        "env": [{"name": "XDG_CACHE_HOME", "value": CACHE_DIR}, {"name": "PYTHONUNBUFFERED", "value": "1"},
                {"name": "FAKEGPU_RUNTIME", "value": ""}],
        # A Python gRPC server holding a few sockets: a little CPU at registration, ~60 MiB resident.
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "256Mi"}},
        # Root only to own the sockets it creates in the root-owned kubelet folder (an owner needs no capability
        # there); nothing else: no privileges, no capabilities, no writes outside its volumes.
        "securityContext": {"privileged": False, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsUser": 0, "runAsNonRoot": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [m for _, m in volumes],
    }
    pod = {
        "priorityClassName": "system-node-critical",
        "nodeSelector": {c.label_key: c.label_value},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "CriticalAddonsOnly", "operator": "Exists"}],
        "automountServiceAccountToken": False,  # it speaks to the kubelet's socket, never to the API server
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": [v for v, _ in volumes],
    }
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": PLUGIN_NAME, "namespace": c.namespace, "labels": labels},
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": PLUGIN_NAME}},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}


def cluster_objects(c: Cluster) -> list[Obj]:
    return [namespace(c), runtime_class(c), daemon_set(c)]


def _limits(c: Cluster) -> Obj:
    return {"limits": {c.example_resource: c.gpus_per_pod}}


def example_pod(c: Cluster) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "fakegpu-smi", "labels": dict(PART_OF)},
            "spec": {"runtimeClassName": RUNTIME_HANDLER, "restartPolicy": "Never",
                     "containers": [{"name": "nvidia-smi", "image": POD_IMAGE, "command": ["nvidia-smi", "-L"],
                                     "resources": _limits(c)}]}}


def podman_pod(c: Cluster) -> Obj:
    """The example Pod for `podman kube play`, which has no device plugin to set the container's devices and no
    RuntimeClass: the Pod names its GPUs itself (NVIDIA_VISIBLE_DEVICES, indices of the host's inventory), and
    FakeGPU's hooks.d hook (`fakegpu hook podman-config`), which podman runs for every container, acts on it."""
    pod = example_pod(c)
    pod["metadata"]["name"] = "fakegpu-smi-podman"
    del pod["spec"]["runtimeClassName"]
    container = pod["spec"]["containers"][0]
    del container["resources"]
    container["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES",
                         "value": ",".join(c.example_devices)}]
    return pod


def _script_volume() -> tuple[Obj, Obj]:
    return ({"name": "script", "configMap": {"name": "fakegpu-ddp-script"}},
            {"name": "script", "mountPath": "/workspace", "readOnly": True})


def script_config_map(script: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "fakegpu-ddp-script", "labels": dict(PART_OF)}, "data": {DDP_SCRIPT: script}}


def ddp_job(c: Cluster, script: str, nodes: int = 2) -> list[Obj]:
    """An Indexed Job of `nodes` pods, pod i being torchrun's node rank i, and the headless Service whose DNS
    names them (<job>-<index>.<service>) so every pod finds rank 0 for rendezvous."""
    name = "fakegpu-ddp"
    labels = {"app.kubernetes.io/name": name, **PART_OF}
    volume, mount = _script_volume()
    master = f"{name}-0.{name}"
    container = {
        "name": "trainer",
        "image": c.workload_image,
        "command": ["torchrun", "--nnodes", str(nodes), "--nproc-per-node", str(c.gpus_per_pod),
                    # the Job controller sets JOB_COMPLETION_INDEX in each pod; the kubelet expands $(...) in commands
                    "--node-rank", "$(JOB_COMPLETION_INDEX)",
                    "--master-addr", master, "--master-port", str(RENDEZVOUS_PORT),
                    f"/workspace/{DDP_SCRIPT}"],
        "env": [{"name": "STEPS", "value": "3"}, {"name": "PYTHONUNBUFFERED", "value": "1"}],
        "ports": [{"name": "rendezvous", "containerPort": RENDEZVOUS_PORT}],
        "resources": _limits(c),
        "volumeMounts": [mount],
    }
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": dict(labels)},
               "spec": {"clusterIP": "None", "selector": {"app.kubernetes.io/name": name},
                        # rank 0's name must resolve before it is Ready: the other ranks dial it while it starts
                        "publishNotReadyAddresses": True,
                        "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT}]}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": dict(labels)},
           "spec": {"completionMode": "Indexed", "completions": nodes, "parallelism": nodes,
                    # a rank that fails leaves the others waiting at a collective: fail the Job, do not retry one
                    "backoffLimit": 0,
                    "template": {"metadata": {"labels": dict(labels)},
                                 "spec": {"runtimeClassName": RUNTIME_HANDLER, "restartPolicy": "Never",
                                          "subdomain": name, "containers": [container], "volumes": [volume]}}}}
    return [script_config_map(script), service, job]


def pytorch_job(c: Cluster, script: str, nodes: int = 2) -> list[Obj]:
    """The same training as a Kubeflow PyTorchJob (training operator v1): it sets torchrun's PET_* variables
    (nodes, rank, master) itself. A CRD, so kubernetes-validate has no schema for it."""
    volume, mount = _script_volume()

    def replica(count: int) -> Obj:
        container = {"name": "pytorch", "image": c.workload_image,
                     "command": ["torchrun", "--nproc-per-node", str(c.gpus_per_pod), f"/workspace/{DDP_SCRIPT}"],
                     "env": [{"name": "STEPS", "value": "3"}], "resources": _limits(c), "volumeMounts": [mount]}
        return {"replicas": count, "restartPolicy": "Never",
                "template": {"spec": {"runtimeClassName": RUNTIME_HANDLER, "containers": [container],
                                      "volumes": [volume]}}}

    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "fakegpu-ddp-kubeflow", "labels": dict(PART_OF)},
           "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(nodes - 1)}}}
    return [script_config_map(script), job]


# ---- `fakegpu cluster up --backend k8s`: a rehearsal's nodes as pods ------------------------------------------

REHEARSAL_CONTAINER = "node"


def rehearsal_service(cluster: str, namespace: str, labels: dict[str, str], selector: dict[str, str]) -> Obj:
    """The headless Service that names the node pods (node-0.<service>) for torchrun's rendezvous."""
    name = f"fakegpu-{cluster}"
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "labels": {**labels, **PART_OF}},
            "spec": {"clusterIP": "None", "selector": dict(selector),
                     # node-0's name must resolve before it is Ready: the others dial it while it starts
                     "publishNotReadyAddresses": True,
                     "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT}]}}


def rehearsal_pod(cluster: str, namespace: str, rank: int, image: str, resource: str, gpus: int,
                  env: dict[str, str], labels: dict[str, str], annotations: dict[str, str]) -> Obj:
    """Node `rank` of a rehearsal: a pod idling (as a Docker node does) until `cluster run` execs a job in it, with
    the GPUs the device plugin hands out under the `fakegpu` RuntimeClass."""
    container = {
        "name": REHEARSAL_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sleep", "infinity"],
        "workingDir": "/workspace",
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "ports": [{"name": "rendezvous", "containerPort": RENDEZVOUS_PORT}],
        # a quantity, which the API (and the official client's models) carry as a string
        "resources": {"limits": {resource: str(gpus)}},
        "volumeMounts": [{"name": "reports", "mountPath": env["FAKEGPU_REPORT_DIR"]},
                         {"name": "workspace", "mountPath": "/workspace"},
                         {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"fakegpu-{cluster}-node-{rank}", "namespace": namespace,
                         "labels": {**labels, **PART_OF}, "annotations": dict(annotations)},
            "spec": {"runtimeClassName": RUNTIME_HANDLER, "hostname": f"node-{rank}", "subdomain": f"fakegpu-{cluster}",
                     # a node that stops is a failed node, as with Docker: never restarted behind the job's back
                     "restartPolicy": "Never",
                     # `sleep` as pid 1 ignores SIGTERM: without this, every `down` would wait out 30 s per pod
                     "terminationGracePeriodSeconds": 2,
                     "enableServiceLinks": False,
                     "containers": [container],
                     "volumes": [{"name": "reports", "emptyDir": {}}, {"name": "workspace", "emptyDir": {}},
                                 # DataLoader workers pass tensors through /dev/shm; a container's default is 64 MB
                                 {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]}}
