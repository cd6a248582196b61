# Fixtures for the trainplan Python module tests. CTest sets PYTHONPATH to build/python and
# TRAINPLAN_CLI to the trainplan binary (tests/CMakeLists.txt); the CLI is the oracle: the
# module must return the numbers the CLI prints for the same input.
import json
import os
import subprocess
from pathlib import Path

import pytest

SOURCE_DIR = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def source_dir():
    return SOURCE_DIR


@pytest.fixture(scope="session")
def cli_path():
    path = os.environ.get("TRAINPLAN_CLI")
    if not path:
        pytest.fail("TRAINPLAN_CLI is not set (run through ctest, or set it to build/trainplan)")
    return path


class Cli:
    """Runs the trainplan binary; json() parses what it printed or wrote."""

    def __init__(self, path, cwd):
        self.path = path
        self.cwd = cwd

    def run(self, *args, check=True):
        env = dict(os.environ, TRAINPLAN_NO_PROGRESS="1")
        r = subprocess.run([self.path, *map(str, args)], cwd=self.cwd, env=env, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise AssertionError(f"trainplan {' '.join(map(str, args))} failed ({r.returncode}): {r.stderr}")
        return r

    def json(self, *args):
        return json.loads(self.run(*args).stdout)

    def assert_same_error(self, error, *args):
        """The CLI fails on `args` with exit 1 and prints `error` (a trainplan.Error) as its one line."""
        r = self.run(*args, check=False)
        assert r.returncode == 1, r.stderr
        assert r.stderr == "error: " + str(error) + "\n"


@pytest.fixture
def cli(cli_path, tmp_path):
    return Cli(cli_path, tmp_path)
