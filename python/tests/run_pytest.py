# Runs pytest with the given arguments; exits 77 (CTest: skipped) when pytest is not installed.
import sys

try:
    import pytest
except ImportError:
    print("pytest is not installed (Debian: python3-pytest); skipping the Python tests")
    sys.exit(77)

sys.exit(pytest.main(sys.argv[1:]))
