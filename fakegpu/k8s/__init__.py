"""Kubernetes through its own mechanisms: a device plugin that advertises the node's fake GPUs (and MIG devices)
to the kubelet and tells it how a container gets the ones it was given.

The rules (which resources a node advertises under a MIG strategy, what Allocate returns, which devices go well
together) are plain functions in resources.py, allocation.py and topology.py; plugin.py puts them behind the
kubelet's gRPC API, whose messages proto.py compiles from deviceplugin.proto.
"""
