"""`make test` installs the Debian packages the tests need (.ci/system-deps), or stops with one line.

The decision logic runs here against fake ``dpkg-query``, ``id``, ``sudo`` and ``apt-get`` on a
PATH of their own; the real install is exercised by CI itself (root, `.ci/run`). The CI guard
(tests/conftest.py) is run in a child pytest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "system-deps"


def _fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(0o755)


def _machine(tmp_path: Path, *, installed=(), uid=1000, sudo=None, apt=True) -> tuple[dict, Path]:
    """A PATH holding only fakes (and grep): ``installed`` packages, ``uid``, ``sudo`` None (absent),
    "password" or "ok", apt-get present or not. apt-get logs its arguments and 'installs'."""
    bin_dir, log = tmp_path / "bin", tmp_path / "apt.log"
    bin_dir.mkdir()
    (tmp_path / "installed").write_text("".join(f"{p}\n" for p in installed))
    os.symlink(shutil.which("grep"), bin_dir / "grep")
    _fake(bin_dir, "dpkg-query", f'pkg="${{@: -1}}"; /bin/grep -qx "$pkg" {tmp_path}/installed || exit 1\n'
          'case "$*" in *Status*) echo "install ok installed";; *) echo 1.0;; esac')
    _fake(bin_dir, "id", f"echo {uid}")
    if sudo == "ok":
        _fake(bin_dir, "sudo", '[ "$1" = -n ] && shift; [ "$1" = true ] && exit 0; exec "$@"')
    elif sudo == "password":
        _fake(bin_dir, "sudo", "echo 'sudo: a password is required' >&2; exit 1")
    if apt:
        _fake(bin_dir, "apt-get", f'echo "$*" >> {log}\n'
              f'[ "$1" = install ] && for a in "$@"; do case "$a" in -*|install) ;; *) echo "$a" >> {tmp_path}/installed;; esac; done; exit 0')
    return {"PATH": str(bin_dir), "HOME": str(tmp_path)}, log


def _run(env, *packages):
    return subprocess.run(["/bin/bash", str(SCRIPT), *packages], env=env, capture_output=True, text=True, timeout=30)


def test_all_present_installs_nothing_and_says_nothing(tmp_path):
    env, log = _machine(tmp_path, installed=["chromium", "prometheus"])
    r = _run(env, "chromium", "prometheus")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    assert not log.exists()


def test_root_installs_what_is_missing_and_says_so(tmp_path):
    env, log = _machine(tmp_path, installed=["prometheus"], uid=0)
    r = _run(env, "chromium", "prometheus")
    assert r.returncode == 0, r.stderr
    assert "installing Debian package(s) the tests need: chromium" in r.stdout and "installed chromium 1.0" in r.stdout
    assert log.read_text().splitlines() == ["update -qq", "install -y -qq chromium"]


def test_passwordless_sudo_installs(tmp_path):
    env, log = _machine(tmp_path, sudo="ok")
    r = _run(env, "chromium", "prometheus")
    assert r.returncode == 0, r.stderr
    assert log.read_text().splitlines()[-1] == "install -y -qq chromium prometheus"


@pytest.mark.parametrize("sudo, apt, why", [(None, True, "not root and no passwordless sudo"),
                                            ("password", True, "not root and no passwordless sudo"),
                                            ("ok", False, "no apt-get on this machine")])
def test_cannot_install_stops_with_one_line_naming_what_to_do(tmp_path, sudo, apt, why):
    env, log = _machine(tmp_path, installed=["prometheus"], sudo=sudo, apt=apt)
    r = _run(env, "chromium", "prometheus")
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and why in lines[0]
    assert "sudo apt-get install chromium'" in lines[0] and "make test-fast" in lines[0]
    assert not log.exists()


def test_make_test_runs_the_install_step_and_test_fast_does_not():
    make = (ROOT / "Makefile").read_text()
    test_recipe = make.split("\ntest: ")[1].split("\n\n")[0]
    fast_recipe = make.split("\ntest-fast: ")[1].split("\n\n")[0]
    assert ".ci/system-deps $(TEST_PACKAGES)" in test_recipe and "system-deps" not in fast_recipe
    assert "TEST_PACKAGES := chromium prometheus" in make
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("make test")


@pytest.mark.slow  # a real pytest session that collects tests/browser (imports the whole pipeline): ~10 s each
@pytest.mark.parametrize("ci, code", [("true", 1), (None, 5)])
def test_ci_fails_a_run_whose_browser_tests_did_not_run(ci, code):
    """With CI set, collected browser tests that were deselected (or skipped) fail the session;
    without it, the same run is pytest's plain 'no tests ran' (5)."""
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci} if ci else {})
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-m", "not browser", "tests/browser"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == code, r.stdout + r.stderr
    assert ("browser test(s) did not run" in r.stdout) == bool(ci)
