# `cmake --install` puts the module where Python finds it: install the python component into a
# staging root and import it from there, with the build tree off the path.
import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_cmake_install_puts_an_importable_module(tmp_path):
    build = os.environ.get("TRAINPLAN_BUILD_DIR")
    if not build:
        pytest.fail("TRAINPLAN_BUILD_DIR is not set (run through ctest)")
    stage = tmp_path / "stage"
    env = dict(os.environ, DESTDIR=str(stage))
    subprocess.run(["cmake", "--install", build, "--component", "python"], env=env, check=True, capture_output=True)
    modules = list(stage.rglob("trainplan*.so"))
    assert len(modules) == 1, modules
    site = modules[0].parent
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    r = subprocess.run([sys.executable, "-c", "import trainplan; print(trainplan.__file__, trainplan.Model('gpt2-124m').params)"],
                       env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    path, params = r.stdout.split()
    assert Path(path).parent == site
    assert params == "124439808.0"
