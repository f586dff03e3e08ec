"""The GPU catalog: every board FakeGPU can pretend to be.

The YAML files under profiles/ are the source of truth; `fakegpu.profiles.compile` validates them and writes
the compiled catalog (fakegpu/data/catalog.json) that this package reads with the standard library only, so
the OCI hook can resolve devices without importing YAML or jsonschema.
"""

from fakegpu.profiles.catalog import Catalog, Profile, load_catalog

__all__ = ["Catalog", "Profile", "load_catalog"]
