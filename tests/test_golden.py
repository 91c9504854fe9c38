"""Golden renders: the generated source of a few programs, per target, compared as text.

A renderer or dialect change shows up here as a diff to review, before anything runs it. After an
intended change, regenerate with `SEASTAR_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py`
and review `git diff tests/golden`.
"""
import os
from pathlib import Path

import pytest
import torch
from test_language import edge_features, gat_zip, max_min, methods, weighted_sum

from seastar_layers.codegen import TARGETS
from seastar_layers.compiler import run_pipeline
from seastar_layers.frontend.lower import FeatureSpec, lower

GOLDEN = Path(__file__).parent / "golden"
F32 = torch.float32
PROGRAMS = {
    "gat": (gat_zip, {"el": (4, 1), "er": (4, 1), "h": (4, 8)}),
    "weighted_sum": (weighted_sum, {"h": ("s0",), "norm": (1,)}),
    "max_min": (max_min, {"x": (3,), "y": (3,)}),
    "methods": (methods, {"h": (2, 5), "g": (2, 5)}),
    "edge_features": (edge_features, {"x": (6,), "y": (6,), "w": (6,)}),
}
FOR_BACKWARD = {"gat_for_backward": "gat"}  # the variant a call that autograd records runs


def render(name: str, target: str) -> str:
    fn, shapes = PROGRAMS[FOR_BACKWARD.get(name, name)]
    specs = {feature: FeatureSpec(shape, F32) for feature, shape in shapes.items()}
    return run_pipeline(lower(fn, specs).program, target, "float32", for_backward=name in FOR_BACKWARD or None).source


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("name", sorted(PROGRAMS) + sorted(FOR_BACKWARD))
def test_rendered_source_matches_golden(name, target):
    path = GOLDEN / f"{name}.{target}{TARGETS[target].file_suffix}"
    source = render(name, target)
    if os.environ.get("SEASTAR_UPDATE_GOLDEN"):
        path.write_text(source)
    assert path.exists(), f"no golden file {path}; create it with SEASTAR_UPDATE_GOLDEN=1 and review it"
    assert source == path.read_text(), (f"the rendered {target} source of {name} changed; if intended, "
                                        "regenerate with SEASTAR_UPDATE_GOLDEN=1 and review git diff tests/golden")
