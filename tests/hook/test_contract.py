"""The container contract is written once: hook/fakegpu_hook/contract.py. The C fast path compiles a header
generated from it and the sh front is rendered from it; no other source holds a copy of its rules (behaviour is
compared by tests/hook/test_create_differential.py)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from fakegpu_hook import contract, front

from tests.conftest import REPO
from tests.native.conftest import native_build  # noqa: F401  (a fixture)

# Every source the runtime, the hook, the shims, the build and the images are made of; docs and tests may
# quote the rules.
SOURCES = [p for pattern in ("fakegpu/**/*.py", "hook/**/*.py", "tools/*.py", "native/**/*.c", "native/**/*.h",
                             "native/**/*.mk", "native/Makefile", "images/**/*", "Makefile")
           for p in REPO.glob(pattern) if p.is_file() and "build" not in p.relative_to(REPO).parts]

# One distinctive spelling of each rule, as code writes it (a string literal, not prose in a comment).
RULES = {
    "runc options with a value": r'"cgroup-manager"',
    "settings keys": r'"hook_path"',
    "settings variables": r'"FAKEGPU_HOOK_STAGE"',
    "the config file": r'"/etc/fakegpu/config\.json"',
    "off values": r'"void"\s*,\s*"none"|, "void"\)',
    "the compiled catalog's path": r'"data",\s*"catalog|"[^"\s]*data/catalog\.(tbl|json)"',
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rule_is_written_in_one_source(rule: str) -> None:
    pattern = re.compile(RULES[rule])
    holders = sorted(str(p.relative_to(REPO)) for p in SOURCES if pattern.search(p.read_text(errors="replace")))
    expected = ["fakegpu/locations.py"] if rule == "the compiled catalog's path" else [
        "hook/fakegpu_hook/contract.py"]
    assert holders == expected, f"{rule} written in {holders}"


def test_the_c_header_is_generated_from_the_contract(native_build: Path) -> None:  # noqa: F811
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import gen_contract
    finally:
        sys.path.remove(str(REPO / "tools"))
    built = (native_build / "gen" / "fg_contract.h").read_text()
    assert built == gen_contract.header()
    options = ", ".join(f'"{o}"' for o in contract.RUNC_OPTIONS_WITH_VALUE)
    assert f"#define FG_RUNC_OPTIONS_WITH_VALUE {options}" in built
    for key, (variable, _) in contract.SETTINGS.items():
        assert f"X({key}, \"{variable}\"" in built


def test_the_sh_front_carries_the_contracts_values() -> None:
    text = front.render_runtime_front("/usr/bin/python3", "/x/runtime", ["/a"])
    assert "@" not in text.replace('"$@"', "").replace("$@", ""), "a placeholder was left unrendered"
    options = "|".join(f"-{o}|--{o}" for o in contract.RUNC_OPTIONS_WITH_VALUE)
    assert f"        {options}) skip=1 ;;" in text
    variable, default = contract.SETTINGS["low_level_runtime"]
    assert f"low=${{{variable}:-}}" in text and f"low=${{low:-{default}}}" in text
    assert f"conf=${{{contract.CONFIG_VARIABLE}:-{contract.DEFAULT_CONFIG}}}" in text
