"""Inputs and conditions a careless or hostile user brings (issue 12): each case failed before.

Cases that used to crash the interpreter run in a subprocess, so a crash fails the test instead of
ending the run.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import torch

import seastar_layers as sl

TESTS = str(Path(__file__).parent)


def run_isolated(code: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter (with this directory importable); a crash shows as its return code."""
    script = f"import sys; sys.path.insert(0, {TESTS!r})\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], env=dict(os.environ, **(env or {})), capture_output=True,
                          text=True, timeout=timeout)


def assert_clean_exit(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, f"exit code {result.returncode}\n{result.stdout}\n{result.stderr[-3000:]}"


# ---- concurrent first calls -------------------------------------------------------------------

THREADS = 8


def first_calls_at_once(prog, scale: float, calls_per_thread: int = 6) -> list[BaseException]:
    """THREADS threads make their first call to prog (tanh(x) * scale summed over in-neighbours) at the same
    moment; the errors they hit."""
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    start = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def work():
        try:
            start.wait()
            for _ in range(calls_per_thread):
                x = torch.randn(4, 3, dtype=torch.float64)
                torch.testing.assert_close(prog(edge_index, x=x), torch.tanh(x[[3, 0, 1, 2]]) * scale)
        except BaseException as e:  # noqa: BLE001 - collected and reported by the test
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_first_calls_from_many_threads_all_succeed():
    for k in range(3):  # several new specialisations: the race is at the first call of each
        scale = 1.25 + k  # a closed-over number is compiled in, so each round is a new kernel

        def scaled_tanh_sum(v):
            return sum(torch.tanh(nb.x) * scale for nb in v.innbs)

        errors = first_calls_at_once(sl.compile(scaled_tanh_sum), scale)
        assert not errors, errors


def tanh_sum(v):
    return sum(torch.tanh(nb.x) * 1.25 for nb in v.innbs)


def test_first_calls_from_many_processes_and_threads_all_succeed(tmp_path):
    code = """
        import seastar_layers as sl
        from test_hostile import first_calls_at_once, tanh_sum

        errors = first_calls_at_once(sl.compile(tanh_sum), 1.25)
        assert not errors, errors
        print("ok")
    """
    env = dict(os.environ, SEASTAR_CACHE_DIR=str(tmp_path), PYTHONPATH=TESTS)
    script = textwrap.dedent(code)
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    assert len(list(tmp_path.glob("*.so"))) == 1
