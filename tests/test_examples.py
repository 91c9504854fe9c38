"""The training examples run end to end for a few epochs on Cora from the local Planetoid files."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script", ["train_pyg.py", "train_dgl.py"])
@pytest.mark.parametrize("model", ["gat", "gcn", "appnp"])
def test_example_runs(script, model, tmp_path):
    cmd = [sys.executable, str(ROOT / "examples" / script), "--model", model, "--dataset", "Cora", "--epochs", "3",
           "--root", str(tmp_path), "--backend", "both"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert any(line.startswith("native ") for line in lines) and any(line.startswith("seastar ") for line in lines)
    assert "native / seastar: epoch time" in result.stdout


def test_offline_without_data_says_how_to_provide_it(tmp_path):
    env = dict(os.environ, SEASTAR_PLANETOID_RAW=str(tmp_path / "nowhere"))
    code = ("import sys; sys.path.insert(0, %r); import seastar_layers.datasets as d; d.DEFAULT_RAW_DIRS = (); "
            "sys.argv = ['x', '--dataset', 'CiteSeer', '--root', %r, '--epochs', '1']; "
            "import runpy; runpy.run_path(%r, run_name='__main__')") % (
        str(ROOT / "examples"), str(tmp_path), str(ROOT / "examples" / "train_pyg.py"))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode != 0
    assert "CiteSeer is not available offline" in result.stderr
    assert "SEASTAR_PLANETOID_RAW" in result.stderr


def test_sampled_example_on_a_small_generated_graph():
    cmd = [sys.executable, str(ROOT / "examples" / "train_sampled.py"), "--dataset", "Reddit-generated",
           "--scale", "0.002", "--batches", "2", "--batch-size", "64", "--model", "gat"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "GENERATED stand-in for Reddit" in result.stdout
    assert any(line.startswith("seastar ") for line in result.stdout.splitlines())
