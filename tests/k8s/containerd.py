"""A private containerd for tests: its own root, state, sockets and config under one folder, the CRI plugin on
(with FakeGPU's runtime handler), driven over the CRI API as a kubelet drives it. The machine's own containerd
(Docker's) is never touched. This machine's root lacks CAP_SYS_RESOURCE, hence restrict_oom_score_adj."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import grpc

from fakegpu.k8s.node_config import containerd_runtime
from fakegpu.k8s.proto import load
from tests.conftest import mounts_under

# A sandbox's infrastructure process: waits for a signal, as Kubernetes' pause does.
PAUSE_C = r"""
#include <signal.h>
#include <unistd.h>
static void done(int sig) { (void)sig; _exit(0); }
int main(void) {
    signal(SIGTERM, done);
    signal(SIGINT, done);
    for (;;) pause();
}
"""


def config(folder: Path, sandbox_image: str, runtime_path: str) -> str:
    cni = folder / "cni"
    return f"""version = 2
root = "{folder / 'root'}"
state = "{folder / 'state'}"
[grpc]
  address = "{folder / 'containerd.sock'}"
[ttrpc]
  address = "{folder / 'containerd.sock.ttrpc'}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{folder / 'opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{cni}"
  conf_dir = "{cni}"
[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
""" + containerd_runtime(runtime_path, 2)


class PrivateContainerd:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.socket = folder / "containerd.sock"
        self.process: subprocess.Popen | None = None
        self.pb2, self.glue = load("cri")
        self.channel: grpc.Channel | None = None

    def start(self, sandbox_image: str, runtime_path: str, timeout_s: float = 60) -> PrivateContainerd:
        (self.folder / "cni").mkdir(parents=True, exist_ok=True)
        path = self.folder / "config.toml"
        path.write_text(config(self.folder, sandbox_image, runtime_path))
        self.log = open(self.folder / "containerd.log", "w")  # closed in stop()
        self.process = subprocess.Popen(["containerd", "--config", str(path)], stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        self.channel = grpc.insecure_channel(f"unix:{self.socket}")
        self.runtime = self.glue.RuntimeServiceStub(self.channel)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.runtime.Version(self.pb2.VersionRequest(version="v1"), timeout=2)
                return self
            except grpc.RpcError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"private containerd did not answer:\n{self.logs()}") from None
                time.sleep(0.2)

    def logs(self) -> str:
        return (self.folder / "containerd.log").read_text(errors="replace")[-4000:]

    def import_image(self, docker_tag: str) -> None:
        save = subprocess.Popen(["docker", "save", docker_tag], stdout=subprocess.PIPE)
        result = subprocess.run(["ctr", "-a", str(self.socket), "-n", "k8s.io", "images", "import", "-"],
                                stdin=save.stdout, capture_output=True, text=True, timeout=300)
        save.stdout.close()
        assert save.wait(timeout=60) == 0 and result.returncode == 0, f"import of {docker_tag}: {result.stderr}"

    def stop(self) -> None:
        if self.channel is not None:
            self.channel.close()
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if getattr(self, "log", None):
            self.log.close()
        for point in mounts_under(self.folder):
            subprocess.run(["umount", "-l", point], check=False)
        shutil.rmtree(self.folder, ignore_errors=True)


class Pod:
    """A sandbox (RunPodSandbox with a runtime handler, host network: no CNI) and its containers."""

    def __init__(self, cri: PrivateContainerd, name: str, handler: str) -> None:
        self.cri, self.pb2, self.containers = cri, cri.pb2, []
        pb2 = self.pb2
        self.config = pb2.PodSandboxConfig(
            metadata=pb2.PodSandboxMetadata(name=name, uid=f"uid-{name}", namespace="default"),
            log_directory=str(cri.folder / "logs" / name),  # no hostname: a host-network pod has the host's
            linux=pb2.LinuxPodSandboxConfig(security_context=pb2.LinuxSandboxSecurityContext(
                namespace_options=pb2.NamespaceOption(network=pb2.NODE))))
        self.id = cri.runtime.RunPodSandbox(pb2.RunPodSandboxRequest(config=self.config, runtime_handler=handler),
                                            timeout=120).pod_sandbox_id

    def run(self, name: str, image: str, command: list[str], envs: dict[str, str]) -> str:
        pb2, runtime = self.pb2, self.cri.runtime
        created = runtime.CreateContainer(pb2.CreateContainerRequest(
            pod_sandbox_id=self.id, sandbox_config=self.config, config=pb2.ContainerConfig(
                metadata=pb2.ContainerMetadata(name=name), image=pb2.ImageSpec(image=image), command=command,
                envs=[pb2.KeyValue(key=k, value=v) for k, v in envs.items()], log_path=f"{name}.log")),
            timeout=120).container_id
        self.containers.append(created)
        runtime.StartContainer(pb2.StartContainerRequest(container_id=created), timeout=120)
        return created

    def exec(self, container: str, cmd: list[str]) -> tuple[int, str, str]:
        answer = self.cri.runtime.ExecSync(self.pb2.ExecSyncRequest(container_id=container, cmd=cmd, timeout=60),
                                           timeout=90)
        return answer.exit_code, answer.stdout.decode(errors="replace"), answer.stderr.decode(errors="replace")

    def remove(self) -> None:
        with contextlib.suppress(grpc.RpcError):
            self.cri.runtime.StopPodSandbox(self.pb2.StopPodSandboxRequest(pod_sandbox_id=self.id), timeout=60)
        self.cri.runtime.RemovePodSandbox(self.pb2.RemovePodSandboxRequest(pod_sandbox_id=self.id), timeout=60)
