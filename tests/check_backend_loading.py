#!/usr/bin/env python3
"""The trainplan command links no CUDA library, loads none for planning, and --version says
where the CUDA backend module is and why it is (un)available.

  check_backend_loading.py BUILD/trainplan
Exit 0 when every check holds; prints each failure otherwise.
"""
import ctypes
import os
import re
import subprocess
import sys

CUDA_LIBS = re.compile(r"lib(cuda|cudart|cublas|cublasLt|nccl)\.so")


def run(binary, args, **env_extra):
    env = dict(os.environ, TRAINPLAN_NO_PROGRESS="1", **env_extra)
    return subprocess.run([binary] + args, capture_output=True, text=True, env=env, timeout=120)


def loaded_libraries(binary, args, **env_extra):
    """The shared objects the dynamic loader mapped while running the command (LD_DEBUG;
    a library it looked for but did not find has no link map)."""
    proc = run(binary, args, LD_DEBUG="files", **env_extra)
    return proc, set(re.findall(r"file=(\S+)\s+\[\d+\];\s+generating link map", proc.stderr))


class BackendError(ctypes.Structure):
    _fields_ = [("message", ctypes.c_char * 1024), ("hint", ctypes.c_char * 512)]


PROBE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(BackendError))


class BackendModule(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_int), ("trainplan_version", ctypes.c_char_p), ("name", ctypes.c_char_p),
                ("build", ctypes.c_char_p), ("probe", PROBE), ("create", ctypes.c_void_p),
                ("collective_benchmark", ctypes.c_void_p), ("free_text", ctypes.c_void_p),
                ("device_count", ctypes.c_void_p), ("create_on_device", ctypes.c_void_p),
                ("create_communicator", ctypes.c_void_p)]


def header_abi():
    """kTrainplanBackendAbi as backend_module.hpp states it (the module must carry the same)."""
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "executor", "include", "trainplan",
                          "executor", "backend_module.hpp")
    with open(header) as f:
        found = re.search(r"kTrainplanBackendAbi\s*=\s*(\d+);", f.read())
    return int(found.group(1)) if found else -1


def check_module(module, version):
    """Loads the module (as the registry would once the driver is there) and calls its entry point."""
    failures = []
    try:
        lib = ctypes.CDLL(module, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as e:
        return [f"the module does not load: {e}"]
    entry = lib.trainplan_backend_register_cuda
    entry.restype = ctypes.POINTER(BackendModule)
    m = entry().contents
    if m.name != b"cuda" or m.trainplan_version.decode() != version or not m.build.startswith(b"CUDA "):
        failures.append(f"module table: name {m.name!r}, version {m.trainplan_version!r} (trainplan {version}), "
                        f"build {m.build!r}")
    if m.abi_version != header_abi():
        failures.append(f"module ABI {m.abi_version}, backend_module.hpp says {header_abi()}")
    if not m.create_on_device:
        failures.append("the module table has no create_on_device")
    # The runtime's NCCL path exists exactly when the module was built with NCCL.
    if bool(m.create_communicator) != (b"NCCL" in m.build):
        failures.append(f"create_communicator is {'set' if m.create_communicator else 'null'} for build {m.build!r}")
    err = BackendError()
    usable = m.probe(ctypes.byref(err)) == 0
    has_driver = os.path.exists("/proc/driver/nvidia")
    if not usable and not err.message.startswith(b"no CUDA device"):
        failures.append(f"probe says {err.message!r}")
    if usable and not has_driver:
        failures.append("probe reports a usable GPU on a machine without the NVIDIA driver")
    return failures


def main():
    binary = os.path.abspath(sys.argv[1])
    bindir = os.path.dirname(binary)
    failures = []

    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    linked = [line.strip() for line in ldd.splitlines() if CUDA_LIBS.search(line)]
    if linked:
        failures.append(f"{binary} links CUDA libraries: {linked}")

    for args in (["catalog"], ["model", "gpt3-13b"], ["check", "--help"]):
        proc, libs = loaded_libraries(binary, args)
        if proc.returncode != 0:
            failures.append(f"trainplan {' '.join(args)} failed: {proc.stderr[-500:]}")
        cuda = sorted(l for l in libs if CUDA_LIBS.search(l))
        if cuda:
            failures.append(f"trainplan {' '.join(args)} loaded {cuda}")

    # Module not on the search path: --version names the folders searched.
    proc = run(binary, ["--version"], TRAINPLAN_BACKEND_PATH="/nonexistent/a:/nonexistent/b")
    want = "  cuda: unavailable: module libtrainplan_backend_cuda.so not found (looked in: /nonexistent/a, /nonexistent/b)"
    if want not in proc.stdout.splitlines():
        failures.append(f"--version with TRAINPLAN_BACKEND_PATH lacks {want!r}:\n{proc.stdout}")

    # The default search path: beside the binary first.
    proc, libs = loaded_libraries(binary, ["--version"])
    lines = proc.stdout.splitlines()
    if not any(l.startswith("  cpu: available, built in: ") for l in lines):
        failures.append(f"--version does not list the cpu backend as available:\n{proc.stdout}")
    cuda_line = next((l for l in lines if l.startswith("  cuda: ")), "")
    module = os.path.join(bindir, "libtrainplan_backend_cuda.so")
    try:
        ctypes.CDLL("libcuda.so.1")
        driver = True
    except OSError:
        driver = False
    if not os.path.exists(module):
        if not cuda_line.startswith(f"  cuda: unavailable: module libtrainplan_backend_cuda.so not found (looked in: {bindir}, "):
            failures.append(f"no module beside the binary, but --version says: {cuda_line!r}")
    elif not driver:
        want = ("  cuda: unavailable: no CUDA driver: libcuda.so.1: cannot open shared object file: "
                f"No such file or directory (module {module})")
        if cuda_line != want:
            failures.append(f"--version says {cuda_line!r}, expected {want!r}")
        cuda = sorted(l for l in libs if CUDA_LIBS.search(l))
        if cuda:
            failures.append(f"--version loaded {cuda} on a machine without the CUDA driver")
    else:
        if module not in cuda_line and "no CUDA device" not in cuda_line:
            failures.append(f"with the driver and the module, --version says: {cuda_line!r}")

    # The module itself: it loads, and its C entry point (backend_module.hpp) answers.
    if os.path.exists(module):
        failures += check_module(module, lines[0].split()[-1] if lines else "")

    for f in failures:
        print("FAIL " + f)
    if not failures:
        print("ok: trainplan links and loads no CUDA library; --version reports the cuda module")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
