"""The training examples run end to end: on small Planetoid files the tests write, on the real Cora
where this machine keeps a local copy, through PyG's download on a fresh root (a stand-in for the
network serves the files), and offline with nothing local they say how to provide the data."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dataset_files import write_planetoid

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES))
import data  # noqa: E402  (examples/data.py)


@pytest.fixture(scope="module")
def small_cora(tmp_path_factory):
    """A --root whose Cora/raw holds small ind.cora.* files: the examples read them, nothing else."""
    root = tmp_path_factory.mktemp("planetoid")
    write_planetoid(root / "Cora" / "raw", "Cora")
    return root


def run_example(script: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(EXAMPLES / script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ))


def assert_side_by_side(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert any(line.startswith("native ") for line in lines) and any(line.startswith("seastar ") for line in lines)
    assert "native / seastar: epoch time" in result.stdout


@pytest.mark.parametrize("script", ["train_pyg.py", "train_dgl.py"])
@pytest.mark.parametrize("model", ["gat", "gcn", "appnp"])
def test_example_runs(script, model, small_cora):
    result = run_example(script, "--model", model, "--dataset", "Cora", "--epochs", "3", "--root", str(small_cora),
                         "--backend", "both")
    assert_side_by_side(result)
    assert "Cora: 600 vertices" in result.stdout


def test_main_job_on_the_real_cora_from_the_local_copy(tmp_path):
    copies = [p for p in data.local_planetoid_copies() if (p / "ind.cora.graph").exists()]
    if not copies:
        pytest.skip("no local copy of the Planetoid files (SEASTAR_PLANETOID_RAW or shared/data/planetoid)")
    result = run_example("train_pyg.py", "--epochs", "3", "--root", str(tmp_path))
    assert_side_by_side(result)
    assert "Cora: 2708 vertices, 10556 edges, 1433 features, 7 classes" in result.stdout


def run_patched(script: str, args: list[str], patch: str) -> subprocess.CompletedProcess:
    """Runs an example with no local Planetoid copies, after `patch` (code) has replaced a network fetch."""
    code = "\n".join([
        "import runpy, shutil, sys",
        "from pathlib import Path",
        f"sys.path.insert(0, {str(EXAMPLES)!r})",
        "import data",
        "data.local_planetoid_copies = lambda: []",
        textwrap.dedent(patch),
        f"sys.argv = [{script!r}, *{args!r}]",
        f"runpy.run_path({str(EXAMPLES / script)!r}, run_name='__main__')"])
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ))


def planetoid_fetch(serve_from) -> str:
    """Code replacing PyG Planetoid's fetch: it copies files from `serve_from`, or fails as it does
    offline when that is None."""
    return f"""
        import torch_geometric.io.fs as fs
        def fetch(url, folder, *args, **kwargs):
            server = {None if serve_from is None else str(serve_from)!r}
            if server is None:
                raise OSError("Cannot connect to host github.com:443 (the test's stand-in for no network)")
            print("fetched", url, file=sys.stderr)
            shutil.copy(Path(server) / url.rsplit("/", 1)[1], folder)
        fs.cp = fetch
    """


def test_main_job_on_a_fresh_root_downloads_through_pyg(tmp_path):
    write_planetoid(tmp_path / "server", "Cora")
    result = run_patched("train_pyg.py", ["--epochs", "2", "--root", str(tmp_path / "root"), "--model", "gcn"],
                         planetoid_fetch(tmp_path / "server"))
    assert_side_by_side(result)
    assert result.stderr.count("fetched https://github.com/kimiyoung/planetoid/raw/master/data/ind.cora.") == 8


def test_offline_without_data_says_how_to_provide_it(tmp_path):
    result = run_patched("train_pyg.py", ["--dataset", "CiteSeer", "--root", str(tmp_path), "--epochs", "1"],
                         planetoid_fetch(None))
    assert result.returncode != 0
    assert "CiteSeer is not available offline" in result.stderr
    assert "SEASTAR_PLANETOID_RAW" in result.stderr and str(tmp_path / "CiteSeer" / "raw") in result.stderr
    assert "Traceback" not in result.stderr


def test_plot_draws_the_curves_of_both_backends(tmp_path, small_cora):
    png = tmp_path / "curves.png"
    result = run_example("train_pyg.py", "--epochs", "4", "--root", str(small_cora), "--plot", str(png))
    assert_side_by_side(result)
    assert f"curves written to {png}" in result.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_plot_without_matplotlib_says_so_before_training(tmp_path, small_cora):
    result = run_patched("train_pyg.py", ["--root", str(small_cora), "--plot", str(tmp_path / "curves.png")],
                         'sys.modules["matplotlib"] = None  # as if it were not installed')
    assert result.returncode != 0
    assert "--plot needs matplotlib, which is not installed: pip install matplotlib" in result.stderr
    assert "native " not in result.stdout and not (tmp_path / "curves.png").exists()


def test_sampled_example_on_a_small_generated_graph():
    result = run_example("train_sampled.py", "--dataset", "Reddit-generated", "--scale", "0.002", "--batches", "2",
                         "--batch-size", "64", "--model", "gat")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "GENERATED stand-in for Reddit" in result.stdout and "(GENERATED data)" in result.stdout
    assert any(line.startswith("seastar ") for line in result.stdout.splitlines())


def test_sampled_example_says_how_to_get_reddit_offline(tmp_path):
    offline = """
        from seastar_layers.compat import import_dgl
        import_dgl()
        import dgl.data.dgl_dataset
        def fetch(url, path, *args, **kwargs):
            raise OSError("Failed to resolve data.dgl.ai (the test's stand-in for no network)")
        dgl.data.dgl_dataset.download = fetch
    """
    result = run_patched("train_sampled.py", ["--dataset", "Reddit", "--root", str(tmp_path), "--batches", "1"],
                         offline)
    assert result.returncode != 0
    assert "Reddit could not be loaded by DGL's RedditDataset" in result.stderr
    assert "--dataset Reddit-generated" in result.stderr and "Traceback" not in result.stderr
