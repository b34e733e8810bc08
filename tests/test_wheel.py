"""The wheel carries the hardware and intrinsic YAML: built from this checkout, installed in a fresh
virtual environment and run from another directory, it still finds x86-znver4 and its VNNI intrinsic."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "tensorsearch", "hardware", "intrinsics")


def _missing_tool() -> str | None:
    """Why a wheel cannot be built and installed here (None when it can)."""
    for module in ("venv", "pip", "setuptools"):
        if find_spec(module) is None:
            return f"the {module} module is not installed"
    # asked in a subprocess: importing setuptools here would clash with a distutils already loaded
    has_bdist_wheel = subprocess.run(
        [sys.executable, "-c", "import setuptools.command.bdist_wheel"], capture_output=True
    )
    if find_spec("wheel") is None and has_bdist_wheel.returncode != 0:
        return "neither the wheel package nor a setuptools with bdist_wheel is installed (pip install wheel)"
    return None


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _copy_sources(dest: Path) -> None:
    """What the build reads, copied so that it leaves no build/ or egg-info in the checkout."""
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dest / name)


def _clean_env() -> dict[str, str]:
    """The environment minus what would point tensorsearch back at this checkout."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("TENSORSEARCH_")}


@pytest.mark.slow
def test_wheel_installs_and_matches_gmm_on_znver4(tmp_path):
    why = _missing_tool()
    if why is not None:
        pytest.skip(f"cannot build and install a wheel: {why}")
    src, dist, venv, elsewhere = (tmp_path / d for d in ("src", "dist", "venv", "elsewhere"))
    for d in (src, elsewhere):
        d.mkdir()
    _copy_sources(src)
    _run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q", "-w", str(dist)],
        tmp_path,
    )
    (wheel,) = dist.glob("tensorsearch-*.whl")
    # dependencies come from this interpreter's site-packages; the wheel, installed into the venv,
    # shadows any editable install of tensorsearch there; the venv borrows that pip too
    _run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], tmp_path)
    py = venv / "bin" / "python"
    _run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], tmp_path, _clean_env())

    env = _clean_env()
    cmd = [str(venv / "bin" / "tensorsearch"), "match", "GMM", "--dtype", "int8", "--hardware", "x86-znver4"]
    out = _run(cmd, elsewhere, env)
    assert re.search(r"block Z vs intrinsic vnni_\w+: [1-9]\d* feasible mapping", out), out
    assert re.search(r"tensorize with vnni_\w+", out), out

    where = _run([str(py), "-c", "import tensorsearch; print(tensorsearch.__file__)"], elsewhere, env).strip()
    assert Path(where).resolve().is_relative_to(venv.resolve()), f"tensorsearch imported from {where}, not the venv"
