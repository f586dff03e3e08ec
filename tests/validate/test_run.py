"""Real runs of small manifests through the CLI: per-profile expectations on FakeGPU's nvidia-smi, a failing
check naming case, axis values and check, timeouts that end the whole process tree, -j, --fail-fast, and the
exit codes 0, 1 and 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakegpu import reports
from tests.conftest import REPO

pytestmark = pytest.mark.native
SMI = REPO / "native" / "build" / "bin" / "nvidia-smi"

SMI_SCRIPT = """\
import os, subprocess
out = subprocess.run([os.environ["SMI"], "--query-gpu=name,memory.total", "--format=csv"],
                     capture_output=True, text=True, check=True).stdout
print(out, end="")
"""

SMI_MANIFEST = f"""\
defaults:
  env: {{SMI: "{SMI}"}}
  timeout: 60
matrix:
  profile: [t4, a100]
  include:
    - {{profile: t4, board: Tesla T4, mib: 15360}}
    - {{profile: a100, board: NVIDIA A100-SXM4-80GB, mib: 81920}}
cases:
  - name: smi
    command: ["{{python}}", smi.py]
    expect:
      stdout_contains: "name, memory.total [MiB]"
      stdout_matches: '^{{board}}, {{mib}} MiB$'
"""


def _validate(tmp_path: Path, manifest: str, *args: str, name: str = "validate.yaml") -> tuple[
        subprocess.CompletedProcess[str], dict | None]:
    (tmp_path / name).write_text(manifest)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    proc = subprocess.run([sys.executable, "-m", "fakegpu", "validate", name, "--out", "out", *args],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=180)
    report = tmp_path / "out" / "report.json"
    return proc, json.loads(report.read_text()) if report.exists() else None


@pytest.fixture
def smi_dir(tmp_path: Path) -> Path:
    if not SMI.exists():
        pytest.fail(f"{SMI} not built: make native")
    (tmp_path / "smi.py").write_text(SMI_SCRIPT)
    return tmp_path


def test_two_profiles_each_see_their_own_board(smi_dir: Path) -> None:
    proc, report = _validate(smi_dir, SMI_MANIFEST, "-j", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert sorted(line.split()[2] for line in lines[:2]) == ["smi[profile=a100]", "smi[profile=t4]"]
    assert all(line.split()[1] == "PASSED" for line in lines[:2])
    assert lines[2].startswith("2 cases: 2 passed in ") and lines[2].endswith("report: out/report.json")
    reports.validate(report, "validate")
    assert report["schema"] == "fakegpu.validate/v1" and report["exit_code"] == 0
    by_id = {c["id"]: c for c in report["cases"]}
    t4 = by_id["smi[profile=t4]"]
    assert Path(t4["stdout_log"]).read_text() == "name, memory.total [MiB]\nTesla T4, 15360 MiB\n"
    assert [c["check"] for c in t4["checks"]] == [
        "exit code 0", "stdout contains 'name, memory.total [MiB]'", "stdout matches /^Tesla T4, 15360 MiB$/"]
    assert by_id["smi[profile=a100]"]["checks"][2]["check"] == "stdout matches /^NVIDIA A100-SXM4-80GB, 81920 MiB$/"


def test_a_failed_expectation_exits_1_naming_case_axes_and_check(smi_dir: Path) -> None:
    wrong = SMI_MANIFEST.replace("mib: 81920", "mib: 40960")
    proc, report = _validate(smi_dir, wrong, "--json")
    assert proc.returncode == 1, proc.stderr
    failed = [line for line in proc.stderr.splitlines() if " FAILED " in line]
    assert len(failed) == 1 and "smi[profile=a100]" in failed[0]
    assert "stdout matches /^NVIDIA A100-SXM4-80GB, 40960 MiB$/: no match in stdout" in failed[0]
    doc = json.loads(proc.stdout)  # --json: the envelope around the same report
    assert (doc["command"], doc["exit_code"], doc["status"]) == ("validate", 1, "error")
    assert doc["data"]["summary"] == report["summary"] == {
        "total": 2, "passed": 1, "failed": 1, "timeout": 0, "error": 0, "skipped": 0}
    reports.validate(doc)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


HANG = """\
import os, subprocess, sys, time
folder = sys.argv[1]
# one grandchild in the case's process group, one that left it for a session of its own
kids = [subprocess.Popen(["sleep", "300"]), subprocess.Popen(["sleep", "301"], start_new_session=True)]
with open(os.path.join(folder, "pids"), "w") as f:
    f.write(" ".join(str(p) for p in [os.getpid(), *(k.pid for k in kids)]))
time.sleep(300)
"""


def test_a_timeout_ends_the_whole_process_tree(tmp_path: Path) -> None:
    (tmp_path / "hang.py").write_text(HANG)
    manifest = """\
matrix: {profile: [t4]}
cases:
  - name: hang
    timeout: 4
    command: ["{python}", hang.py, "{case_dir}"]
"""
    started = time.monotonic()
    proc, report = _validate(tmp_path, manifest)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert time.monotonic() - started < 60
    [case] = report["cases"]
    assert case["status"] == "timeout" and case["checks"] == []
    assert case["message"].startswith("ran past its timeout of 4 s; ended it (pid ")
    assert "and 2 processes it started: SIGTERM, SIGKILL after 2 s" in case["message"]
    pids = [int(p) for p in (tmp_path / "out" / "cases" / "hang_profile=t4_" / "pids").read_text().split()]
    assert len(pids) == 3
    assert [p for p in pids if _alive(p)] == []
    assert "TIMEOUT hang[profile=t4]" in proc.stdout


def test_jobs_run_cases_at_once_and_fail_fast_skips_the_rest(tmp_path: Path) -> None:
    stamp = "import sys, time; open(sys.argv[1], 'w').write(f'{time.time()} '); time.sleep(1.5); " \
            "open(sys.argv[1], 'a').write(f'{time.time()}')"
    manifest = f"""\
matrix: {{profile: [t4, a100]}}
cases:
  - name: stamp
    command: ["{{python}}", -c, "{stamp}", "{{case_dir}}/t"]
"""
    proc, report = _validate(tmp_path, manifest, "-j", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (a0, a1), (b0, b1) = ([float(x) for x in Path(c["cwd"], c["command"][-1]).read_text().split()]
                          for c in report["cases"])
    assert a0 < b1 and b0 < a1, "the two cases did not overlap under -j 2"

    failing = """\
matrix: {profile: [t4, a100, h100]}
cases:
  - name: nope
    command: ["false"]
"""
    proc, report = _validate(tmp_path, failing, "--fail-fast")
    assert proc.returncode == 1
    assert [c["status"] for c in report["cases"]] == ["failed", "skipped", "skipped"]
    assert report["cases"][1]["message"] == "not run: an earlier case failed (--fail-fast)"
    assert "2 cases not run" not in proc.stdout and "3 cases: 1 failed, 2 skipped" in proc.stdout


@pytest.mark.parametrize(("edit", "says"), [
    (lambda m: m.replace("command:", "comand:"),
     ":4: cases[0].comand: unknown key 'comand'; did you mean 'command'?"),
    (lambda m: m.replace('["true"]', '["no-such-program-xyz"]'),
     ":3: a[profile=t4]: program 'no-such-program-xyz' not found (not on PATH)"),
    (lambda m: m + "    cwd: missing-folder\n", ":5: a[profile=t4]: cwd "),
    (lambda m: "defaults: {cwd: nowhere}\n" + m, ":1: a[profile=t4]: cwd "),
    (lambda m: m.replace('["true"]', '["./missing.sh"]'),
     ":3: a[profile=t4]: program './missing.sh' not found (not an executable file)"),
])
def test_bad_manifests_exit_2_with_one_line_and_no_traceback(tmp_path: Path, edit, says: str) -> None:
    good = 'matrix: {profile: [t4]}\ncases:\n  - name: a\n    command: ["true"]\n'
    proc, report = _validate(tmp_path, edit(good))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert report is None and proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"fakegpu validate: error: {tmp_path / 'validate.yaml'}:") or line.startswith(
        "fakegpu validate: error: validate.yaml:"), line
    assert says in line and "Traceback" not in proc.stderr


def test_all_pass_exits_0_and_usage_errors_exit_2(tmp_path: Path) -> None:
    good = 'matrix: {profile: [t4]}\ncases:\n  - name: a\n    command: ["true"]\n'
    assert _validate(tmp_path, good)[0].returncode == 0
    proc, _ = _validate(tmp_path, good, "--filter", "zzz")
    assert proc.returncode == 2 and "--filter zzz selects none of the 1 cases (e.g. a[profile=t4])" in proc.stderr
    proc, _ = _validate(tmp_path, good, "-j", "0")
    assert proc.returncode == 2 and "--jobs 0: at least 1" in proc.stderr
    proc, _ = _validate(tmp_path, good.replace("name:", "nmae:"), "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == doc["exit_code"] == 2 and doc["data"] is None
    [error] = doc["errors"]
    assert error["code"] == "invalid-manifest" and "unknown key 'nmae'; did you mean 'name'?" in error["message"]
    reports.validate(doc)


def test_an_out_that_is_a_file_or_a_report_that_is_a_folder_is_refused_before_any_case_runs(tmp_path: Path) -> None:
    good = 'matrix: {profile: [t4]}\ncases:\n  - name: a\n    mode: fakecuda\n    command: [touch, ran]\n'
    (tmp_path / "out").write_text("not a folder")
    proc, _ = _validate(tmp_path, good)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ("fakegpu validate: error: --out out: exists and is not a folder; name a folder for "
                           "report.json and the cases' logs\n")
    assert not (tmp_path / "ran").exists() and (tmp_path / "out").read_text() == "not a folder"
    (tmp_path / "out").unlink()
    (tmp_path / "junit").mkdir()
    proc, _ = _validate(tmp_path, good, "--junit", "junit")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "fakegpu validate: error: --junit junit: is a folder; name the file to write\n"
    assert not (tmp_path / "ran").exists()


def test_an_out_that_cannot_be_made_is_refused_before_any_case_runs(tmp_path: Path) -> None:
    good = 'matrix: {profile: [t4]}\ncases:\n  - name: a\n    mode: fakecuda\n    command: [touch, ran]\n'
    (tmp_path / "file").write_text("")
    proc, _ = _validate(tmp_path, good, "--out", "file/out")  # the last --out wins
    assert proc.returncode == 1 and proc.stderr == "fakegpu validate: error: cannot write file/out: Not a directory\n"
    assert not (tmp_path / "ran").exists()


def test_an_error_in_a_worker_reaches_the_caller_not_the_thread_hook(tmp_path: Path, monkeypatch) -> None:
    from fakegpu.validate import plan, runner

    (tmp_path / "v.yaml").write_text('matrix: {profile: [t4]}\ncases:\n  - name: a\n    command: ["true"]\n')
    cases = plan(tmp_path / "v.yaml", tmp_path / "out").cases

    def boom(case, stop=None):
        raise PermissionError(13, "Permission denied", str(tmp_path / "out"))

    monkeypatch.setattr(runner, "run_case", boom)
    with pytest.raises(PermissionError):
        runner.run_cases(cases, jobs=2)


def test_the_readme_example_is_the_example_file_and_runs_as_shown(tmp_path: Path) -> None:
    import textwrap

    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## A test matrix for CI: `fakegpu validate`"):]
    block = section[section.index("beside it):\n\n") + len("beside it):\n\n"):section.index("    $ fakegpu validate")]
    example = REPO / "examples" / "validate" / "validate.yaml"
    manifest = "".join(line for line in example.read_text().splitlines(True) if not line.startswith("#"))
    assert textwrap.dedent(block).strip() == manifest.strip()

    shown = section[section.index("    $ fakegpu validate"):].split("\n\n", 1)[0].splitlines()
    assert shown[0] == "    $ fakegpu validate examples/validate/validate.yaml -j 2"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    proc = subprocess.run([sys.executable, "-m", "fakegpu", "validate", "examples/validate/validate.yaml", "-j", "2",
                           "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = proc.stdout.splitlines()
    # the same cases, passed, in the same words (the order of -j 2 and the seconds may differ)
    assert sorted(line.split()[1:3] for line in ran[:-1]) == sorted(line.split()[1:3] for line in shown[1:-1])
    assert ran[-1].split(" in ")[0] == shown[-1].strip().split(" in ")[0] == "4 cases: 4 passed"


def test_sigterm_to_validate_ends_the_running_cases_trees(tmp_path: Path) -> None:
    (tmp_path / "hang.py").write_text(HANG)
    (tmp_path / "validate.yaml").write_text(
        'matrix: {profile: [t4]}\ncases:\n  - name: hang\n    command: ["{python}", hang.py, "{case_dir}"]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    proc = subprocess.Popen([sys.executable, "-m", "fakegpu", "validate", "validate.yaml", "--out", "out"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids_file = tmp_path / "out" / "cases" / "hang_profile=t4_" / "pids"
    deadline = time.monotonic() + 60
    while not (pids_file.exists() and len(pids_file.read_text().split()) == 3) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [int(p) for p in pids_file.read_text().split()]
    proc.terminate()  # as a CI runner cancels a job
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted; the running cases were ended" in err and "Traceback" not in err
    assert [p for p in pids if _alive(p)] == []


def test_the_mode_axis_runs_each_mode_and_a_case_that_cannot_start_is_an_error(tmp_path: Path) -> None:
    show = "import os; print(os.environ.get('FAKEGPU_RUNTIME', 'none'), 'LD_PRELOAD' in os.environ)"
    manifest = f"""\
matrix:
  profile: [t4]
  mode: [native, fakecuda]
  include:
    - {{mode: native, runtime: none True}}
    - {{mode: fakecuda, runtime: fakecuda False}}
cases:
  - name: env
    command: ["{{python}}", -c, "{show}"]
    expect: {{stdout_contains: "{{runtime}}"}}
"""
    proc, report = _validate(tmp_path, manifest, "-j", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {c["id"]: c["mode"] for c in report["cases"]} == {"env[profile=t4,mode=native]": "native",
                                                            "env[profile=t4,mode=fakecuda]": "fakecuda"}

    # native mode without FakeGPU's libraries: the case cannot start; it says why and the run fails
    (tmp_path / "v2.yaml").write_text('matrix: {profile: [t4]}\ncases:\n  - name: a\n    command: ["true"]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKEGPU_") and k != "LD_PRELOAD"}
    proc = subprocess.run([sys.executable, "-m", "fakegpu", "validate", "v2.yaml", "--out", "out2"], cwd=tmp_path,
                          capture_output=True, text=True, env={**env, "FAKEGPU_NATIVE_DIR": str(tmp_path)}, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"ERROR   a[profile=t4] 0.0 s: native mode needs FakeGPU's CUDA libraries in {tmp_path}" in proc.stdout
    [case] = json.loads((tmp_path / "out2" / "report.json").read_text())["cases"]
    assert (case["status"], case["exit_code"], case["checks"]) == ("error", None, [])


def _can_unshare() -> bool:
    import shutil

    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare(CLONE_NEWNS), as fakegpu-procfs does")
def test_a_case_is_started_as_fakegpu_run_starts_it(tmp_path: Path) -> None:
    # As root, fakegpu run gives the command the fake GPUs' /proc/driver/nvidia (fakegpu-procfs): so does a case.
    manifest = """\
matrix: {profile: [t4]}
cases:
  - name: proc
    command: [cat, /proc/driver/nvidia/version]
    expect: {stdout_contains: "Kernel Module  580.95.05"}
"""
    proc, _ = _validate(tmp_path, manifest)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rerun_failed_runs_only_the_cases_that_did_not_pass_last_time(tmp_path: Path) -> None:
    manifest = """\
matrix:
  profile: [t4, a100, h100]
  include:
    - {result: "true"}
    - {profile: a100, result: "false"}
cases:
  - name: first
    command: ["{result}"]
  - name: second
    command: ["true"]
"""
    proc, report = _validate(tmp_path, manifest)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert [c["id"] for c in report["cases"] if c["status"] != "passed"] == ["first[profile=a100]"]

    # fixed: only the failed case runs again, and passes; the new report holds it alone
    fixed = manifest.replace('{profile: a100, result: "false"}', '{profile: a100, result: "true"}')
    proc, report = _validate(tmp_path, fixed, "--rerun-failed")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "--rerun-failed: 1 of the 1 case that did not pass in the last run"
    assert lines[1].startswith("[1/1] PASSED  first[profile=a100] ")
    assert [c["id"] for c in report["cases"]] == ["first[profile=a100]"]
    assert report["rerun"]["rerun"] == ["first[profile=a100]"] and report["rerun"]["not_in_manifest"] == []
    reports.validate(report, "validate")

    # nothing left that did not pass: nothing runs, the report stays
    before = (tmp_path / "out" / "report.json").read_text()
    proc, _ = _validate(tmp_path, fixed, "--rerun-failed")
    assert proc.returncode == 0 and "nothing to rerun" in proc.stdout
    assert (tmp_path / "out" / "report.json").read_text() == before


def test_rerun_failed_names_and_skips_cases_gone_from_the_manifest(tmp_path: Path) -> None:
    manifest = 'matrix: {profile: [t4, a100]}\ncases:\n  - name: gone\n    command: ["false"]\n' \
               '  - name: stays\n    command: ["false"]\n'
    proc, _ = _validate(tmp_path, manifest)
    assert proc.returncode == 1
    edited = manifest.replace("  - name: gone\n    command: [\"false\"]\n", "").replace('["false"]', '["true"]')
    proc, report = _validate(tmp_path, edited, "--rerun-failed", "-k", "t4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == (
        "--rerun-failed: 1 of the 4 cases that did not pass in the last run; not in the manifest any more, "
        "skipped: 'gone[profile=t4]', 'gone[profile=a100]'")
    assert [c["id"] for c in report["cases"]] == ["stays[profile=t4]"]
    assert report["rerun"]["not_in_manifest"] == ["gone[profile=t4]", "gone[profile=a100]"]


def test_rerun_failed_without_a_last_report_is_a_usage_error(tmp_path: Path) -> None:
    good = 'matrix: {profile: [t4]}\ncases:\n  - name: a\n    command: ["true"]\n'
    proc, report = _validate(tmp_path, good, "--rerun-failed")
    assert proc.returncode == 2 and report is None
    [line] = proc.stderr.splitlines()
    assert line == ("fakegpu validate: error: --rerun-failed: no report of a last run in out (report.json); run the "
                    "manifest once first, with the same --out")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "report.json").write_text('{"schema": "fakegpu.preflight/v1"}')
    proc, _ = _validate(tmp_path, good, "--rerun-failed")
    assert proc.returncode == 2 and "is no fakegpu validate report" in proc.stderr and "Traceback" not in proc.stderr


def _readme_blocks() -> list[str]:
    """The code blocks of the README's validate section that sit inside its bullets (six spaces in)."""
    import textwrap

    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## A test matrix for CI: `fakegpu validate`"):readme.index("## Command reference")]
    blocks, current, previous = [], [], ""
    for line in section.splitlines():
        starts = line.startswith("      ") and not line.startswith("       ") and not previous.strip()
        if starts or (current and (line.startswith("      ") or not line.strip())):
            current.append(line)
        elif current:
            blocks.append(textwrap.dedent("\n".join(current)).strip() + "\n")
            current = []
        previous = line
    return blocks


def test_the_readmes_manifest_snippets_are_valid(tmp_path: Path) -> None:
    from fakegpu.validate.manifest import load
    from fakegpu.validate.matrix import expand

    checked = 0
    for block in _readme_blocks():
        if block.startswith("- name:"):  # a case, shown alone
            text = "matrix: {profile: [t4]}\ncases:\n" + "".join(f"  {line}\n" for line in block.splitlines())
        elif block.startswith(("defaults:", "matrix:")):
            text = block
        else:  # shell lines, a CI step
            continue
        path = tmp_path / f"snippet{checked}.yaml"
        path.write_text(text)
        assert expand(load(path), tmp_path / "out"), text
        checked += 1
    assert checked == 3  # memory, requires, container
