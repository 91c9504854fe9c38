"""examples/train_distributed.py under torchrun: 2 processes, gloo, a small graph, a few steps; the
ranks' parameters stay identical and the loss falls. The PyG path needs pyg-lib or torch-sparse and
says so where neither is installed."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from dataset_files import write_planetoid

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_distributed.py"


def pyg_sampler_installed() -> bool:
    import torch_geometric.typing as pyg_typing

    return pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE


@pytest.fixture(scope="module")
def small_graph(tmp_path_factory):
    """Cora's file format, 800 vertices of 3 learnable classes, 200 of them for training."""
    root = tmp_path_factory.mktemp("planetoid")
    write_planetoid(root / "Cora" / "raw", "Cora", nodes=800, train=200)
    return root


def torchrun(processes: int, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
           str(EXAMPLE), *args]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def check_two_ranks(result, save_dir: Path) -> None:
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "parameters identical on all ranks: yes (largest difference 0)" in result.stdout
    first, second = (torch.load(save_dir / f"rank{r}.pt") for r in (0, 1))
    assert first["state_dict"].keys() == second["state_dict"].keys()
    for name, value in first["state_dict"].items():
        assert torch.equal(value, second["state_dict"][name]), name
    losses = first["losses"]
    assert losses == second["losses"] and len(losses) == 20
    assert sum(losses[-5:]) / 5 < 0.9 * sum(losses[:5]) / 5, losses  # falls by more than noise


@pytest.mark.parametrize("model,layers", [("gat", "seastar"), ("gcn", "native")])
def test_two_processes_with_dgl_sampling_stay_in_step_and_learn(small_graph, tmp_path, model, layers):
    result = torchrun(2, "--library", "dgl", "--layers", layers, "--model", model, "--dataset", "Cora", "--root",
                      str(small_graph), "--batch-size", "25", "--fanouts", "5", "5", "--epochs", "5", "--lr", "0.02",
                      "--save-dir", str(tmp_path))
    check_two_ranks(result, tmp_path)
    assert "2 ranks, dgl sampling" in result.stdout


@pytest.mark.skipif(not pyg_sampler_installed(), reason="PyG's NeighborLoader needs pyg-lib or torch-sparse")
def test_two_processes_with_pyg_sampling_stay_in_step_and_learn(small_graph, tmp_path):
    result = torchrun(2, "--library", "pyg", "--layers", "seastar", "--model", "gat", "--dataset", "Cora", "--root",
                      str(small_graph), "--batch-size", "25", "--fanouts", "5", "5", "--epochs", "5", "--lr", "0.02",
                      "--save-dir", str(tmp_path))
    check_two_ranks(result, tmp_path)


@pytest.mark.skipif(pyg_sampler_installed(), reason="pyg-lib or torch-sparse is installed here")
def test_pyg_path_without_a_sampler_library_says_how_to_install_one(small_graph):
    cmd = [sys.executable, str(EXAMPLE), "--library", "pyg", "--dataset", "Cora", "--root", str(small_graph)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert result.returncode == 2
    assert "PyG's NeighborLoader needs pyg-lib or torch-sparse, and neither is installed" in result.stderr
    assert "pip install pyg-lib -f https://data.pyg.org/whl/torch-" in result.stderr
    assert "torch-sparse" in result.stderr and "--library dgl" in result.stderr and "Traceback" not in result.stderr


RANK_LOADS = """
import sys, time, types
import torch.distributed as dist
sys.path.insert(0, sys.argv[1])
import train_distributed
rank, store, log = int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
def load(args, library, say):  # local rank 0 is slow to load; another rank must still come after it
    time.sleep(1.0 if rank == 0 else 0.0)
    with open(log, "a") as f:
        f.write(f"{rank}\\n")
    return rank
train_distributed.load = load
args = types.SimpleNamespace(library="dgl")
assert train_distributed.load_first_on_local_rank_zero(args, rank, print) == rank
dist.destroy_process_group()
"""


def test_local_rank_zero_loads_the_dataset_before_the_other_ranks(tmp_path):
    """The loaders write their processed files on first use: two ranks loading at once had one
    read the file the other was still writing (a torn torch.save, CI's failure)."""
    log = tmp_path / "loads"
    processes = [subprocess.Popen([sys.executable, "-c", RANK_LOADS, str(EXAMPLE.parent), str(rank),
                                   str(tmp_path / "store"), str(log)]) for rank in (0, 1)]
    try:
        assert [process.wait(timeout=120) for process in processes] == [0, 0]
    finally:  # a rank left waiting at the barrier for one that died would wait out gloo's timeout
        for process in processes:
            process.kill()
    assert log.read_text().split() == ["0", "1"]


def test_one_process_without_torchrun(small_graph, tmp_path):
    cmd = [sys.executable, str(EXAMPLE), "--dataset", "Cora", "--root", str(small_graph), "--batch-size", "50",
           "--max-steps", "3", "--fanouts", "5", "5"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "not launched by torchrun; training as a single process" in result.stdout
    assert "trained 3 steps on 1 ranks" in result.stdout
