# The README's notebook-style example ("## From Python") runs as written, and the module links
# no CUDA library.
import os
import re
import subprocess

import trainplan

from conftest import SOURCE_DIR


def readme_example():
    text = (SOURCE_DIR / "README.md").read_text()
    section = text[text.index("## From Python"):]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README.md: no ```python block under ## From Python"
    return match.group(1)


def test_the_readme_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(readme_example(), "README.md (From Python)", "exec"), namespace)
    # What it says it does: the numbers its comments show, the files it writes, the error it catches.
    assert namespace["trainplan"].Model("llama2-7b").params == 6738415616.0
    assert (tmp_path / "gpt2-report.md").stat().st_size > 0
    assert (tmp_path / "gpt2-report.html").stat().st_size > 0
    best = namespace["best"]
    assert best["model"] == "gpt2-355m" and best["predicted"]["time_to_train_s"] > 0
    assert namespace["step"]["step_time_s"] > 0
    assert namespace["job"]["monte_carlo"]["cost_usd"]["p90"] > 0
    assert " -> " in capsys.readouterr().out  # the except branch printed message -> hint


def test_the_module_links_no_cuda_library():
    out = subprocess.run(["ldd", trainplan.__file__], capture_output=True, text=True, check=True).stdout
    libraries = [line.split()[0] for line in out.splitlines() if line.strip()]
    cuda = [lib for lib in libraries if re.match(r"lib(cuda|cudart|cublas|cublasLt|cudnn|nccl|nvrtc)\b", os.path.basename(lib))]
    assert cuda == [], f"{trainplan.__file__} links {cuda}"
    assert any("libpython" in lib or "libc.so" in lib for lib in libraries)
