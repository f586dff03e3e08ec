"""Workspace profiles (fakegpu/profiles/workspace_profiles.yaml): the built-in figures, how a stack picks them,
a user's file before the built-in entries, its errors, and native mode's compiled copy."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from fakegpu.cli.main import app
from fakegpu.errors import CatalogError
from fakegpu.fakecuda.runtime import Runtime
from fakegpu.profiles import workspace_profiles as wp
from fakegpu.profiles.workspace_profiles import Range, WorkspaceProfileError, builtin, version_numbers

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
KiB = 1 << 10


def test_the_builtin_file_passes_its_schema_and_covers_every_catalog_gpu():
    jsonschema.Draft202012Validator.check_schema(wp.schema())
    assert wp.check_builtin() == []


@pytest.mark.parametrize(("cc", "context_mib", "lazy_mib", "cublas"), [
    ((6, 1), 250, (44, 31, 3), 8320 * KiB),
    ((7, 5), 300, (53, 38, 4), 8320 * KiB),
    ((8, 0), 420, (74, 53, 6), 8320 * KiB),
    ((8, 9), 420, (74, 53, 6), 8320 * KiB),
    ((9, 0), 518, (92, 66, 8), 32 * MiB),  # the H200 capture
    ((10, 0), 560, (99, 71, 8), 32 * MiB),
    ((12, 0), 560, (99, 71, 8), 8320 * KiB),
])
def test_builtin_figures_are_the_former_overhead_model(cc, context_mib, lazy_mib, cublas):
    # the values fakegpu/cuda_overheads.py computed before they became data
    over = builtin().overheads(cc)
    assert over.context_bytes() == context_mib * MiB
    assert tuple(over.lazy_bytes(p) for p in wp.LAZY_PARTS) == tuple(m * MiB for m in lazy_mib)
    assert over.non_pytorch_bytes() == (context_mib + lazy_mib[0] + lazy_mib[1]) * MiB
    assert over.non_pytorch_bytes(cudnn=True) == (context_mib + sum(lazy_mib)) * MiB
    assert over.cublas_workspace_bytes() == cublas and over.cublaslt_workspace_bytes() == 1 * MiB


def test_derived_lazy_parts_are_the_stated_share_of_the_measured_context():
    # "context x part/518, whole MiB": the H200's shares applied to each generation's context
    measured = {e.name: e for e in builtin().entries}["hopper"].figures
    for entry in builtin().entries:
        for part in wp.LAZY_PARTS:
            figure = entry.figures.get(f"context_{part}")
            if figure is None or figure.basis != "derived":
                continue
            share = measured[f"context_{part}"].value / measured["context_created"].value
            want = int(entry.figures["context_created"].value * share) // MiB * MiB
            assert figure.value == want, (entry.name, part)


def test_every_figure_says_where_it_comes_from():
    for entry in builtin().entries:
        for figure in entry.figures.values():
            assert figure.basis in wp.BASES and len(figure.text) > 20, (entry.name, figure.name)


def test_the_workspace_policy_follows_the_torch_release():
    def policy(torch: str) -> tuple[str, bool]:
        over = builtin().overheads((9, 0), torch=torch)
        return over.workspace_policy, over.cublaslt_shares_workspace

    assert policy("2.11.0+cu130") == ("held", False)  # the capture's release
    assert policy("2.14.1") == ("held", False)
    assert policy("2.15.0+cu132") == ("per_call", True)
    assert policy("2.16.0.dev20270101") == ("per_call", True)


def test_ranges_compare_at_the_clause_precision():
    assert version_numbers("2.11.0+cu130") == (2, 11, 0) and version_numbers("cpu") == ()
    below = Range.parse("<2.15")
    assert (2, 14, 3) in below and (2, 15, 1) not in below
    assert (12, 8) in Range.parse("12") and (13, 0) not in Range.parse("12")
    ampere = Range.parse(">=8.0, <9.0")
    assert (8, 9) in ampere and (9, 0) not in ampere
    assert (10, 3) not in Range.parse("10.0") and (10, 0) in Range.parse("==10.0")
    with pytest.raises(ValueError, match="not a version range"):
        Range.parse("~=2.15")


def test_the_stack_takes_cuda_from_the_torch_wheel_and_defaults_from_the_file():
    profiles = builtin()
    s = profiles.stack((9, 0), torch="2.10.0+cu128")
    assert (s.torch, s.cuda, s.architecture) == ("2.10.0+cu128", "12.8", "hopper")
    assert dict(s.origins)["cuda"] == "torch 2.10.0+cu128's wheel tag"
    s = profiles.stack()
    assert (s.torch, s.cuda, s.compute_capability) == ("2.11.0+cu130", "13.0", wp.DEFAULT_COMPUTE_CAPABILITY)
    assert profiles.stack((8, 0), torch="2.15", cuda="12.6").cuda == "12.6"


USER = """\
format: 1
entries:
  - name: my-a100
    description: measured on our A100 with torch 2.11 and CUDA 12.8
    match: {compute_capability: "8.0", torch: "2.11"}
    figures:
      context_created: {value: 512MiB, source: "nvidia-smi after torch.cuda.init() on our A100"}
      cublas_workspace: {value: 32MiB, source: "torch.backends.cuda.cublas_workspace_size() here"}
  - name: everything-held
    figures:
      workspace_policy: {value: held, assumed: "we run with TORCH_CUBLAS_WORKSPACE_CACHE=1"}
"""


def test_a_user_file_comes_before_the_builtin_entries_for_its_stack(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(USER)
    profiles = wp.load([path])
    over = profiles.overheads((8, 0), torch="2.11.0+cu128")
    assert over.context_bytes() == 512 * MiB and over.cublas_workspace_bytes() == 32 * MiB
    mine = over.applied["context_created"]
    assert (mine.entry.name, mine.entry.where) == ("my-a100", f"{path}:3")
    assert "a user's entry" in mine.why and "cc 8.0 in '8.0'" in mine.why
    assert mine.over == ("ampere-ada (built-in)",)
    # figures the file does not give fall through to the built-in entries
    assert over.lazy_bytes("first_launch") == 74 * MiB and over.applied["context_cublas"].entry.name == "ampere-ada"
    # a user's entry matching every stack still comes before the more specific built-in one (torch >= 2.15)
    assert profiles.overheads((9, 0), torch="2.15.0").applied["workspace_policy"].entry.name == "everything-held"
    # another stack: the built-in figures
    assert profiles.overheads((8, 0), torch="2.15.0").context_bytes() == 420 * MiB
    assert profiles.overheads((8, 6), torch="2.11.0").context_bytes() == 420 * MiB
    assert over.user_entries() == ["everything-held", "my-a100"]


def test_among_user_entries_the_most_specific_then_the_later_and_files_set_the_default_stack(tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.json"
    first.write_text(USER)
    second.write_text(json.dumps({"format": 1, "default_stack": {"torch": "2.11.0+cu126"}, "entries": [
        {"name": "b", "match": {"architecture": "ampere"},
         "figures": {"context_created": {"value": 600 * MiB, "source": "ours"}}}]}))
    profiles = wp.load([first, second])
    s = profiles.stack((8, 0))
    assert (s.torch, s.cuda) == ("2.11.0+cu126", "12.6") and "b.json" in dict(s.origins)["torch"]
    # my-a100 (compute capability and torch) is more specific than b (architecture), whatever the file order
    assert profiles.resolve(s).applied["context_created"].entry.name == "my-a100"
    assert profiles.overheads((8, 6)).applied["context_created"].entry.name == "b"
    # equally specific: the later file's entry
    third = tmp_path / "c.yaml"
    third.write_text(USER.replace("512MiB", "500MiB"))
    assert wp.load([first, second, third]).resolve(s).context_bytes() == 500 * MiB
    assert wp.load([third, second, first]).resolve(s).context_bytes() == 512 * MiB


def _problems(tmp_path, text: str, name: str = "bad.yaml") -> list[str]:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(WorkspaceProfileError) as caught:
        wp.load([path])
    return caught.value.problems


def test_user_file_errors_name_file_line_and_key_with_a_close_match(tmp_path):
    bad = USER.replace("cublas_workspace:", "cublas_worksapce:").replace('torch: "2.11"', 'torh: "2.11"')
    problems = _problems(tmp_path, bad)
    assert problems == [
        f"{tmp_path / 'bad.yaml'}:5: entries[0].match.torh: unknown key 'torh'; did you mean 'torch'? (accepted: "
        "torch, cuda, compute_capability, architecture)",
        f"{tmp_path / 'bad.yaml'}:8: entries[0].figures.cublas_worksapce: unknown key 'cublas_worksapce'; did you "
        "mean 'cublas_workspace'? (accepted: context_created, context_first_launch, context_cublas, context_cudnn, "
        "cublas_workspace, cublaslt_workspace, workspace_policy, cublaslt_shares_workspace)",
    ]
    where = f"{tmp_path / 'bad.yaml'}:"
    policy = _problems(tmp_path, USER.replace("value: held", "value: helt"))
    assert policy == [f"{where}11: entries[1].figures.workspace_policy.value: 'helt' is not accepted; did you mean "
                      "'held'? (expected one of: held, per_call)"]
    unsourced = _problems(tmp_path, USER.replace(', source: "nvidia-smi after torch.cuda.init() on our A100"', ""))
    assert unsourced == [f"{where}7: entries[0].figures.context_created: say where the figure comes from with one "
                         "of source, derived, assumed"]
    size = _problems(tmp_path, USER.replace("512MiB", "512M"))
    assert size[0].startswith(f"{where}7: entries[0].figures.context_created.value: '512M' is not a size (512MiB "
                              "or 512MB?)")
    rng = _problems(tmp_path, USER.replace('"8.0"', '"sm80"'))
    assert rng[0].startswith(f"{where}5: entries[0].match.compute_capability: 'sm80' is not accepted; expected a "
                             "version range")
    twice = _problems(tmp_path, USER.replace("everything-held", "my-a100"))
    assert twice == [f"{where}9: entries[1].name: 'my-a100' names entry 0 already; names must differ"]
    assert _problems(tmp_path, "format: 1\nentries: [\n", "cut.yaml")[0].startswith(f"{tmp_path / 'cut.yaml'}:3: "
                                                                                     "not valid YAML")
    assert _problems(tmp_path, USER, "mine.txt") == [f"{tmp_path / 'mine.txt'}: a workspace-profiles file is "
                                                     ".yaml, .yml, .json; this one is .txt"]


def test_the_cli_lists_shows_and_validates(tmp_path):
    runner = CliRunner()
    path = tmp_path / "mine.yaml"
    path.write_text(USER)
    listed = runner.invoke(app, ["workspace-profiles", "list", "--file", str(path)])
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.splitlines()[2].startswith("my-a100 ")  # a user's entries first
    shown = runner.invoke(app, ["workspace-profiles", "show", "--profile", "a100", "--torch", "2.11.0+cu128",
                                "--file", str(path), "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)["data"]
    assert data["figures"]["context_created"]["entry"] == "my-a100"
    assert data["figures"]["context_created"]["source"] == "nvidia-smi after torch.cuda.init() on our A100"
    assert data["stack"]["cuda"] == "12.8" and data["stack"]["from"]["cuda"] == "torch 2.11.0+cu128's wheel tag"
    ok = runner.invoke(app, ["workspace-profiles", "validate", str(path)])
    assert ok.exit_code == 0 and ok.stdout.strip() == f"{path}: ok, 2 entries"
    assert runner.invoke(app, ["workspace-profiles", "validate"]).exit_code == 0
    path.write_text(USER.replace("torch:", "torh:"))
    bad = runner.invoke(app, ["workspace-profiles", "validate", str(path)])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert f"{path}:5: entries[0].match.torh: unknown key 'torh'; did you mean 'torch'?" in bad.stderr


@pytest.mark.parametrize(("option", "value"), [("--torch", "2.x"), ("--torch", "2"), ("--torch", "2.15.x"),
                                               ("--cuda", "12.x"), ("--cuda", "12")])
def test_a_version_that_is_not_major_minor_is_refused_not_cut_short(option, value):
    # "2.x" was read as its leading "2", which every 2.y range matches
    result = CliRunner().invoke(app, ["workspace-profiles", "show", option, value])
    what = "torch" if option == "--torch" else "CUDA"
    assert result.exit_code == 2 and result.stdout == ""
    assert f"{what} version {value!r} is not a version; accepted: MAJOR.MINOR in digits" in result.stderr


@pytest.mark.parametrize("torch", ["2.15", "2.15.0", "2.11.0+cu130", "2.5.0a0+git1234abc", "2.6.0.dev20241112+cu124",
                                   "2.4.0rc1", "2.14.1"])
def test_torch_versions_as_wheels_spell_them_are_accepted(torch):
    assert builtin().stack(torch=torch).torch == torch


def test_a_stack_no_entry_covers_is_a_clear_error(tmp_path):
    profiles = wp.WorkspaceProfiles([e for e in builtin().entries if e.name != "hopper"], builtin().default_stack)
    with pytest.raises(CatalogError, match=r"no entry gives context_created for torch 2\.11\.0.*capability 9\.0"):
        profiles.overheads((9, 0))


def test_fakecuda_takes_the_user_file_from_the_environment(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(USER)
    env = {"FAKEGPU_WORKSPACE_PROFILES": str(path), "FAKEGPU_STATE_DIR": str(tmp_path / "state")}
    rt = Runtime.from_spec("a100", env)
    rt.torch_version, rt.cuda_version = "2.11.0+cu128", "12.8"  # what the torch layer sets
    assert rt.context_bytes(0) == 512 * MiB
    rt.loaded(0, "first_launch")
    assert rt.context_bytes(0) == (512 + 74) * MiB
    rt.torch_version = "2.15.0+cu132"  # another stack: the built-in figure
    assert rt.overheads(0).context_bytes() == 420 * MiB
    with pytest.raises(WorkspaceProfileError, match="no such workspace-profiles file"):
        Runtime.from_spec("a100", {**env, "FAKEGPU_WORKSPACE_PROFILES": str(tmp_path / "missing.yaml")})


def test_native_modes_table_is_generated_from_the_builtin_profiles():
    # libcuda's context figures are tools/gen_contract.py's FG_CUDA_CONTEXT_TABLE, never a hand copy
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_contract
    finally:
        sys.path.remove(str(ROOT / "tools"))
    rows = re.findall(r"X\((\d+), (\d+), (\d+)ULL, (\d+)ULL, (\d+)ULL, (\d+)ULL\)", gen_contract.header())
    assert len(rows) >= 18
    for major, minor, *figures in rows:
        over = builtin().overheads((int(major), int(minor)))
        assert [int(f) for f in figures] == [over.context_bytes(), *(over.lazy_bytes(p) for p in wp.LAZY_PARTS)]
    assert [tuple(map(int, r[:2])) for r in rows] == sorted(tuple(map(int, r[:2])) for r in rows)
    built = ROOT / "native" / "build" / "gen" / "fg_contract.h"
    if built.exists():  # the build's copy is the generator's (make native regenerates it when the YAML changes)
        assert "FG_CUDA_CONTEXT_TABLE" in built.read_text()


def _readme_examples() -> list[tuple[str, str]]:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## CUDA context and cuBLAS workspaces per stack: `workspace-profiles`")
    section = readme[start:readme.index("\n## ", start + 1)].splitlines()
    out = []
    for i, line in enumerate(section):
        if line.startswith("    $ fakegpu "):
            shown = []
            for later in section[i + 1:]:
                if later.startswith("    $ ") or (later and not later.startswith("    ")):
                    break
                shown.append(later[4:])
            out.append((line[len("    $ "):], "\n".join(shown).strip("\n")))
    return out


README_EXAMPLES = _readme_examples()


def test_the_readme_section_has_its_examples():
    assert [c for c, _ in README_EXAMPLES] == [
        "fakegpu workspace-profiles show --profile h200",
        "fakegpu workspace-profiles validate examples/workspace-profiles/my-stack.yaml",
        "fakegpu workspace-profiles show --profile a100 --file examples/workspace-profiles/my-stack.yaml"]


@pytest.mark.parametrize(("command", "shown"), README_EXAMPLES, ids=[c for c, _ in README_EXAMPLES])
def test_each_readme_example_prints_what_the_readme_shows(command, shown, monkeypatch):
    import shlex

    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(app, shlex.split(command)[1:])
    assert result.exit_code == 0, result.output
    assert "\n".join(line.rstrip() for line in result.stdout.splitlines()).strip("\n") == shown


def test_fakegpu_run_checks_the_users_file_before_a_fakecuda_child_starts(tmp_path, monkeypatch):
    # fakecuda reads the variable at interpreter start, where a broken file could only be printed and skipped
    from fakegpu import launcher

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text(USER)
    launch = launcher.prepare("a100", mode="fakecuda", base_env={"FAKEGPU_WORKSPACE_PROFILES": "mine.yaml"})
    try:
        assert launch.env["FAKEGPU_WORKSPACE_PROFILES"] == str(tmp_path / "mine.yaml")  # the child may chdir
    finally:
        launch.cleanup()
    (tmp_path / "mine.yaml").write_text(USER.replace("torch:", "torh:"))
    with pytest.raises(WorkspaceProfileError, match=r"mine\.yaml:5: entries\[0\]\.match\.torh: unknown key"):
        launcher.prepare("a100", mode="fakecuda", base_env={"FAKEGPU_WORKSPACE_PROFILES": "mine.yaml"})


def test_fakecuda_reads_the_built_in_profiles_without_pyyaml(tmp_path) -> None:
    """fakecuda runs in the user's interpreter, which need not have PyYAML nor jsonschema: the built-in entries
    ship as JSON; a user's file given as JSON reads there, with or without jsonschema (`fakegpu run` checked it
    against the schema first); a file of the wrong shape is still a clear error without it."""
    import subprocess

    import yaml

    example = Path(__file__).resolve().parents[2] / "examples" / "workspace-profiles" / "my-stack.yaml"
    user = tmp_path / "stack.json"
    user.write_text(json.dumps(yaml.safe_load(example.read_text(encoding="utf-8"))), encoding="utf-8")
    code = ("import sys; sys.modules['yaml'] = None\n"
            "if sys.argv[2] != 'user': sys.modules['jsonschema'] = None\n"
            "from fakegpu.profiles import workspace_profiles as w\n"
            "files = [sys.argv[1]] if sys.argv[2] != 'bare' else []\n"
            "p = w.load(files).overheads((8, 0), torch='2.6.0+cu124')\n"
            "print(p.value('context_created') >> 20)\n")
    for kind, mib in (("bare", "420"), ("user", "480"), ("user-without-jsonschema", "480")):
        proc = subprocess.run([sys.executable, "-c", code, str(user), kind], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [mib], kind
    # without jsonschema: the rules that need no schema still name file:line, a wrong shape says what to run
    doc = json.loads(user.read_text(encoding="utf-8"))
    doc["entries"].append(dict(doc["entries"][0]))
    user.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", code, str(user), "no-jsonschema"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0 and "names entry 0 already; names must differ" in proc.stderr, proc.stderr
    user.write_text(json.dumps({"format": 1, "entries": [{"name": "x", "figures": 3}]}), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", code, str(user), "no-jsonschema"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0 and f"`fakegpu workspace-profiles validate {user}` names each problem" in proc.stderr
