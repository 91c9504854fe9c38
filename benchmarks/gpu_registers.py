"""Registers, spills, shared memory and occupancy of the prebuilt layers' CUDA kernels, read from ptxas.

Compiles the layers' CUDA variants (codegen/cuda.py's output, as setup.py builds them) with
`nvcc -Xptxas -v` for each architecture and prints one row per kernel. Needs nvcc, not a GPU.

    python benchmarks/gpu_registers.py                       # float32 and bfloat16, sm_80/86/90
    python benchmarks/gpu_registers.py --dtypes float32 --every-variant --out /tmp/regs.json

Model (stated with the table): 256 threads a block (codegen/cuda.py: THREADS); registers allocated
per warp in units of 256; per SM 65,536 registers, at most 64 warps and 32 blocks (sm_80, sm_90) or
48 warps and 16 blocks (sm_86), and 164 / 228 / 100 KB of shared memory (sm_80 / sm_90 / sm_86) with
1 KB reserved per block. A kernel's dynamic shared memory (its rows' scratch) depends on the feature
sizes: it is given at --sizes (default GAT's hidden layer, 8 heads x 8 channels).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seastar_layers.codegen.cuda import THREADS, group_width  # noqa: E402
from seastar_layers.codegen.torch_entry import dim_names  # noqa: E402
from seastar_layers.nn.programs import prebuilt_variants  # noqa: E402
from seastar_layers.runtime import toolchain  # noqa: E402

LIMITS = {  # per SM: warps, blocks, shared memory (KB)
    "80": (64, 32, 164), "86": (48, 16, 100), "90": (64, 32, 228)}
REGISTERS_PER_SM = 65536
PTXAS = re.compile(r"Compiling entry function '(\w+)' for 'sm_(\d+)'.*?(\d+) bytes spill stores, (\d+) bytes spill "
                   r"loads.*?Used (\d+) registers([^\n]*)", re.S)


def occupancy(arch: str, registers: int, shared_bytes: int) -> float:
    """Resident warps per SM over the most the SM holds, for 256-thread blocks."""
    max_warps, max_blocks, shared_kb = LIMITS[arch]
    warps_per_block = THREADS // 32
    per_warp = -(-registers * 32 // 256) * 256
    blocks = min(max_blocks, REGISTERS_PER_SM // per_warp // warps_per_block, max_warps // warps_per_block)
    if shared_bytes:
        blocks = min(blocks, shared_kb * 1024 // (shared_bytes + 1024))
    return blocks * warps_per_block / max_warps


def evaluate(expr: str, sizes: dict[str, int]) -> int:
    """A generated C size expression (symbols, +, *, std::max) at the given symbol sizes."""
    expr = re.sub(r"std::max<int64_t>", "max", expr)
    return int(eval(re.sub(r"\bs\d+\b", lambda m: str(sizes[m.group(0)]), expr), {"max": max}))  # noqa: S307


def launches(source: str, sizes: dict[str, int]) -> dict[str, tuple[int, int]]:
    """(threads a row, dynamic shared bytes a block) per kernel name, read from the entries' launch code
    at these sizes (a fast path's kernels at their pinned sizes)."""
    out = {}
    acc_bytes = 8 if "typedef double acc_t" in source else 4
    for block in re.finditer(r"const int64_t widest = (.*?);.*?p\.scratch_per_row = (.*?);.*?SEASTAR_LAUNCH\((\w+),",
                             source, re.S):
        widest, scratch, name = block.groups()
        fast = re.search(r"_fast\d+$", name)
        at = sizes
        if fast:  # the fast path's sizes, from the condition that selects it
            condition = source[:block.start()].rsplit("// fast path", 1)[0].rsplit("if (", 1)[1]
            at = {**sizes, **{s: int(v) for s, v in re.findall(r"(s\d+) == (\d+)", condition)}}
        lanes = group_width(evaluate(widest, at))
        out[name] = (lanes, (THREADS // lanes) * evaluate(scratch, at) * acc_bytes)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archs", nargs="+", default=["80", "86", "90"], choices=sorted(LIMITS))
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"],
                        choices=["float32", "float64", "float16", "bfloat16"])
    parser.add_argument("--every-variant", action="store_true",
                        help="every option subset (default: each family with no options and with all of them)")
    parser.add_argument("--sizes", default="heads=8,channels=8",
                        help="feature sizes for dynamic shared memory and group widths, name=value,...")
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args()
    nvcc = shutil.which(toolchain.config.nvcc())
    if nvcc is None:
        sys.exit("gpu_registers: nvcc not found; set NVCC or CUDA_HOME, or put nvcc on the PATH")
    named_sizes = {k: int(v) for k, v in (item.split("=") for item in args.sizes.split(","))}

    chosen = []
    for family, options, dtype, program, features in prebuilt_variants("cuda"):
        if str(dtype).removeprefix("torch.") not in args.dtypes:
            continue
        if args.every_variant or len(options) in (0, len(family.options)):
            chosen.append((family.name, options, str(dtype).removeprefix("torch."), program, features))

    def compile_one(item):
        name, options, dtype, program, features = item
        source = program.source("cuda", **features)
        symbols = {f"s{k}": named_sizes.get(n, 8) for k, n in enumerate(dim_names(program, features))}
        with tempfile.TemporaryDirectory() as tmp:
            unit = Path(tmp) / "unit.cu"
            unit.write_text(source)
            cmd = [nvcc, "-c", "-std=c++17", "--fmad=false", "-Xptxas", "-v", f"-I{toolchain.INCLUDE_DIR}", str(unit),
                   "-o", str(unit.with_suffix(".o"))]
            for arch in args.archs:
                cmd[2:2] = ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
            result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"gpu_registers: nvcc failed on {name} {options} {dtype}:\n{result.stderr[-3000:]}")
        widths = launches(source, symbols)
        rows = []
        for mangled, arch, spill_st, spill_ld, registers, rest in PTXAS.findall(result.stderr):
            smem = re.search(r"(\d+) bytes smem", rest)
            smem = smem.group(1) if smem else 0
            kernel = re.search(r"_(forward|backward)_(kernel\d+(?:_fast\d+)?)", mangled)
            full = re.search(r"\d(p[0-9a-f]+_(?:forward|backward)_kernel\d+(?:_fast\d+)?)E", mangled).group(1)
            lanes, dynamic = widths[full]
            rows.append({"family": name, "options": "+".join(options) or "-", "dtype": dtype,
                         "kernel": f"{kernel.group(1)}_{kernel.group(2)}", "arch": arch, "registers": int(registers),
                         "spill_stores": int(spill_st), "spill_loads": int(spill_ld), "static_smem": int(smem or 0),
                         "lanes": lanes, "dynamic_smem": dynamic,
                         "occupancy": occupancy(arch, int(registers), int(smem or 0) + dynamic)})
        return rows

    workers = os.cpu_count() or 1
    print(f"gpu_registers: {len(chosen)} variants x sm_{', sm_'.join(args.archs)} with {workers} nvcc processes, "
          f"shared memory and widths at {args.sizes}", file=sys.stderr, flush=True)
    rows = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for done, part in enumerate(pool.map(compile_one, chosen), 1):
            rows += part
            print(f"\r  {done}/{len(chosen)} compiled", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    rows.sort(key=lambda r: (r["family"], r["options"], r["dtype"], r["kernel"], r["arch"]))
    header = (f"{'family':14} {'options':34} {'dtype':9} {'kernel':24} {'sm':>3} {'regs':>4} {'spill st/ld':>11} "
              f"{'lanes':>5} {'smem B':>7} {'occupancy':>9}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['family']:14} {r['options'][:34]:34} {r['dtype']:9} {r['kernel']:24} {r['arch']:>3} "
              f"{r['registers']:>4} {r['spill_stores']:>5}/{r['spill_loads']:<5} {r['lanes']:>5} "
              f"{r['static_smem'] + r['dynamic_smem']:>7} {r['occupancy']:>8.0%}")
    over = [r for r in rows if r["registers"] > 64]
    spilled = [r for r in rows if r["spill_stores"] or r["spill_loads"]]
    print(f"\n{len(rows)} kernels: {min(r['registers'] for r in rows)}-{max(r['registers'] for r in rows)} registers, "
          f"{len(over)} above 64, {len(spilled)} with spills")
    if args.out:
        Path(args.out).write_text(json.dumps({"sizes": named_sizes, "rows": rows}, indent=1))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
