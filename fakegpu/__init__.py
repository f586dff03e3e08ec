"""FakeGPU: configurable fake NVIDIA GPUs for machines that have none.

Importing this package stays cheap (no torch, no docker, no YAML): the OCI hook imports it at every
container start.
"""

__version__ = "0.1.0"
