"""The training loop and report shared by train_pyg.py and train_dgl.py."""
from __future__ import annotations

import argparse
import copy
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from data import DataUnavailable, add_data_arguments, load_dataset
from tqdm import tqdm

from seastar_layers.profiling import peak_allocated_bytes

# Hyperparameters of the PyG/DGL reference examples for each model (Planetoid splits).
HPARAMS = {
    "gat": dict(lr=0.005, weight_decay=5e-4, epochs=200),
    "gcn": dict(lr=0.01, weight_decay=5e-4, epochs=200),
    "appnp": dict(lr=0.01, weight_decay=5e-4, epochs=200),
}


def parse_args(description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", choices=sorted(HPARAMS), default="gat")
    add_data_arguments(p, default="Cora")
    p.add_argument("--backend", choices=["seastar", "native", "both"], default="both",
                   help="seastar layers, the stock layers of the library, or both side by side")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--plot", metavar="FILE.png", default=None,
                   help="draw the loss and accuracy curves of each backend into FILE.png (needs matplotlib)")
    args = p.parse_args()
    if args.plot:
        require_matplotlib()  # before training, not after it
    return args


def load(args, library: str, say=print):
    """The dataset the arguments name, read by `library`'s loader ("pyg" or "dgl"); exits with the
    loader's explanation when the data cannot be had. `say` prints (or not, on all but one rank)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    t = time.perf_counter()
    try:
        data = load_dataset(args.dataset, args.root, library, scale=args.scale, seed=args.seed)
    except DataUnavailable as e:
        say(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    say(f"{data.name}: {data.num_nodes} vertices, {data.edge_index.shape[1]} edges, {data.x.shape[1]} features, "
        f"{data.num_classes} classes (loaded in {time.perf_counter() - t:.1f} s)")
    if data.note:
        say(f"note: {data.name}: {data.note}")
    return data


@dataclass
class Result:
    backend: str
    test_acc: float
    best_val_acc: float
    epoch_ms: float
    peak_mb: float
    history: dict[str, list[float]] = field(default_factory=dict)  # per epoch: "loss", "val acc", "test acc"


def train(model, forward, data, hp: dict, epochs: int, label: str) -> Result:
    """Full-batch training with the test accuracy taken at the best validation accuracy."""
    optimizer = torch.optim.Adam(model.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])

    def step():
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(forward()[data.train_mask], data.y[data.train_mask])
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    @torch.no_grad()
    def evaluate():
        model.eval()
        pred = forward().argmax(-1)
        return [float((pred[m] == data.y[m]).float().mean()) for m in (data.val_mask, data.test_mask)]

    best_val = test_at_best = 0.0
    times = []
    history = {"loss": [], "val acc": [], "test acc": []}
    bar = tqdm(range(epochs), desc=label, leave=False, dynamic_ncols=True, mininterval=0.3, disable=None)
    for _ in bar:
        t = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t)
        val, test = evaluate()
        for key, value in zip(history, (loss, val, test)):
            history[key].append(value)
        if val > best_val:
            best_val, test_at_best = val, test
        bar.set_postfix(loss=f"{loss:.3f}", val=f"{val:.3f}", test=f"{test_at_best:.3f}")
    bar.close()
    steady = times[min(5, len(times) - 1):]  # the first epochs include one-time compilation
    return Result(label, test_at_best, best_val, 1e3 * sum(steady) / len(steady), peak_allocated_bytes(step) / 2**20,
                  history)


def report(results: list[Result], title: str) -> None:
    print(title)
    print(f"{'backend':<10} {'test acc':>9} {'val acc':>8} {'epoch ms':>9} {'peak MB':>9}")
    for r in results:
        print(f"{r.backend:<10} {r.test_acc:>9.4f} {r.best_val_acc:>8.4f} {r.epoch_ms:>9.2f} {r.peak_mb:>9.1f}")
    if len(results) == 2:
        native, ours = (r for r in sorted(results, key=lambda r: r.backend != "native"))
        print(f"native / seastar: epoch time {native.epoch_ms / ours.epoch_ms:.2f}x, "
              f"peak memory {native.peak_mb / max(ours.peak_mb, 1e-9):.2f}x; "
              f"test accuracy difference {ours.test_acc - native.test_acc:+.4f}")


def compare(args, build_model, layers: dict, run, title: str) -> list[Result]:
    """Train the same initial weights with each requested backend and report them side by side.

    build_model(layers_module) -> model; run(model, backend) -> Result."""
    backends = ["native", "seastar"] if args.backend == "both" else [args.backend]
    torch.manual_seed(args.seed)
    initial = build_model(layers["native"]).state_dict()
    results = []
    for backend in backends:
        model = build_model(layers[backend])
        model.load_state_dict(copy.deepcopy(initial), strict=True)
        torch.manual_seed(args.seed)
        results.append(run(model, backend))
    report(results, title)
    return results


def compare_full_batch(args, data, build_model, layers: dict, make_forward, library: str) -> None:
    """compare() with full-batch training; make_forward(model) -> a function computing the logits."""
    hp = HPARAMS[args.model]
    epochs = args.epochs or hp["epochs"]
    generated = " (GENERATED data)" if data.note else ""
    title = (f"{library} {args.model.upper()} on {data.name}{generated} ({epochs} epochs, "
             f"{torch.get_num_threads()} threads)")
    results = compare(args, build_model, layers,
                      lambda model, backend: train(model, make_forward(model), data, hp, epochs, backend), title)
    if args.plot:
        plot(results, args.plot, title)
        print(f"curves written to {args.plot}")


def require_matplotlib():
    try:
        import matplotlib
    except ImportError:
        sys.exit("error: --plot needs matplotlib, which is not installed: pip install matplotlib")
    matplotlib.use("Agg")  # files only; no display needed


def plot(results: list[Result], path: str, title: str) -> None:
    """Training loss, and validation and test accuracy, per epoch for each backend, side by side."""
    require_matplotlib()
    import matplotlib.pyplot as plt

    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    # the first backend wide and pale, the next narrow on top: curves that coincide stay both visible
    for r, colour, width in zip(results, ("tab:blue", "tab:orange"), (4, 1.3)):
        epochs = range(1, len(r.history["loss"]) + 1)
        style = dict(color=colour, linewidth=width, alpha=0.45 if width > 2 else 1.0)
        loss_ax.plot(epochs, r.history["loss"], label=r.backend, **style)
        acc_ax.plot(epochs, r.history["val acc"], label=f"{r.backend} validation", **style)
        acc_ax.plot(epochs, r.history["test acc"], linestyle="--", label=f"{r.backend} test", **style)
    loss_ax.set(xlabel="epoch", ylabel="training loss (cross-entropy)", title="loss")
    acc_ax.set(xlabel="epoch", ylabel="accuracy", title="accuracy", ylim=(0, 1))
    for ax in (loss_ax, acc_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
