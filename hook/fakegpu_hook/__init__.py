"""FakeGPU's host side of container integration: the runtime shim around runc, the OCI hook, CDI and podman
hook files, and daemon.json editing.

Standard library only on every import path the runtime and the hook take: they run at each container start.
"""
