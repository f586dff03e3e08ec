"""Rehearsing failure and watching it: the metrics exporter (exporter.py) today; fault plans and the telemetry
model join it here."""
