"""Static memory estimators: will a model fit, for inference or training, before anything runs.

Inputs are safetensors headers and config files only; weights are never read.
"""
