"""Where a checkout keeps what its build makes, for every part that looks there: the compiled catalog, the
native build's libraries and programs. Standard library only: the container runtime imports it at every start.

An installed wheel has no native/ folder; the runtime's settings (`native_lib_dir`) and $FAKEGPU_NATIVE_DIR name
the libraries then.
"""

from __future__ import annotations

import os

PACKAGE_DIR = os.path.dirname(os.path.realpath(__file__))
CHECKOUT = os.path.dirname(PACKAGE_DIR)
# fakegpu/profiles/compile.py writes both from profiles/*.yaml: JSON for Python, the table for the C readers.
COMPILED_CATALOG = os.path.join(PACKAGE_DIR, "data", "catalog.json")
COMPILED_CATALOG_TABLE = os.path.join(PACKAGE_DIR, "data", "catalog.tbl")
NATIVE_BUILD = os.path.join(CHECKOUT, "native", "build")
NATIVE_LIB_DIR = os.path.join(NATIVE_BUILD, "lib")
NATIVE_BIN_DIR = os.path.join(NATIVE_BUILD, "bin")


def native_lib_dir(environ: dict[str, str] | None = None) -> str:
    """The shims to use: $FAKEGPU_NATIVE_DIR, else the checkout's native/build/lib."""
    return (os.environ if environ is None else environ).get("FAKEGPU_NATIVE_DIR") or NATIVE_LIB_DIR
