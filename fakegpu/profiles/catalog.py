"""Read the compiled GPU catalog and look profiles up by id, alias or board name.

Standard library only: the OCI hook imports this at every container start.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache

from fakegpu import locations
from fakegpu.errors import CatalogError, UnknownProfile
from fakegpu.profiles.matching import closest, normalise

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on the hook's path, at every container start
    from collections.abc import Iterator, Mapping
    from typing import Any

CATALOG_FORMAT = 1
# os.path rather than pathlib, and no dataclasses: this module is on the hook's import path, where every
# millisecond is paid at each container start.
COMPILED_CATALOG = locations.COMPILED_CATALOG


class Profile:
    """One board. `data` is the compiled profile document (schema in profiles/schema.json)."""

    __slots__ = ("data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data

    def __repr__(self) -> str:
        return f"Profile({self.id!r})"

    @property
    def id(self) -> str:
        return self.data["id"]

    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def aliases(self) -> list[str]:
        return list(self.data["aliases"])

    @property
    def architecture(self) -> str:
        return self.data["architecture"]

    @property
    def segment(self) -> str:
        return self.data["segment"]

    @property
    def compute_capability(self) -> tuple[int, int]:
        major, minor = self.data["compute_capability"].split(".")
        return int(major), int(minor)

    @property
    def memory_total_bytes(self) -> int:
        """Total as NVML and nvidia-smi report it."""
        return self.data["memory"]["total_bytes"]

    @property
    def cuda_total_bytes(self) -> int:
        """Total as the CUDA runtime (cudaDeviceProp.totalGlobalMem, torch total_memory) reports it."""
        return self.data["memory"]["cuda_total_bytes"]

    @property
    def sm_count(self) -> int:
        return self.data["sm_count"]

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.data))


class Catalog:
    """The set of profiles with one lookup rule: id, alias, or board name, case and spacing ignored."""

    def __init__(self, profiles: list[Profile]) -> None:
        self._profiles = sorted(profiles, key=lambda p: p.id)
        self._index: dict[str, Profile] = {}
        for p in self._profiles:
            for key in (p.id, *p.aliases, p.name):
                self._index.setdefault(normalise(key), p)

    def __iter__(self) -> Iterator[Profile]:
        return iter(self._profiles)

    def __len__(self) -> int:
        return len(self._profiles)

    def find(self, name: str) -> Profile | None:
        return self._index.get(normalise(name))

    def get(self, name: str) -> Profile:
        """The profile called `name`, or UnknownProfile with the closest names."""
        found = self.find(name)
        if found is None:
            raise UnknownProfile(name, self.suggest(name))
        return found

    def lookup_names(self) -> list[str]:
        """Every short name a user may type: ids and aliases."""
        return sorted({k for p in self._profiles for k in (p.id, *p.aliases)})

    def suggest(self, name: str, limit: int = 3) -> list[str]:
        return closest(name, self.lookup_names(), limit=limit)

    def select(self, architecture: str | None = None, segment: str | None = None) -> list[Profile]:
        return [
            p
            for p in self._profiles
            if (architecture is None or p.architecture == architecture.lower())
            and (segment is None or p.segment == segment.lower())
        ]


def read_catalog(path: str | os.PathLike[str]) -> Catalog:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError as exc:
        raise CatalogError(f"compiled catalog not found at {path}; run `make catalog`") from exc
    except json.JSONDecodeError as exc:
        raise CatalogError(f"compiled catalog {path} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != CATALOG_FORMAT:
        raise CatalogError(f"compiled catalog {path} has format {doc.get('format')!r}, expected {CATALOG_FORMAT}")
    return Catalog([Profile(p) for p in doc["profiles"]])


@lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    """The packaged catalog, read once per process."""
    return read_catalog(COMPILED_CATALOG)
