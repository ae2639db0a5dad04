"""Typed use of the public API, checked by mypy in tests/test_typing.py (never run by pytest: not a test_ file).

Every call is correct, and ``assert_type`` fails under mypy if a name resolves to ``Any`` (a lazy export that
the type checker cannot see through).
"""
from __future__ import annotations

from typing import Any

import torch
from typing_extensions import assert_type

import vision
from vision.kernels import (BoxFilter, GuidedFilter, LocalLinearApply, LocalLinearFit, box_filter, gla,
                            gla_bidirectional, guided_filter, local_linear_apply, local_linear_fit, structure_loss)
from vision.pipelines import disable_structure_preservation, enable_structure_preservation


def kernels(x: torch.Tensor, gray: torch.Tensor, f: torch.Tensor, q: torch.Tensor, g: torch.Tensor) -> None:
    assert_type(box_filter(x, 2, border="reflect"), torch.Tensor)
    assert_type(guided_filter(gray, x, 4, 1e-2), torch.Tensor)
    assert_type(guided_filter(x, x, 4, torch.full((1,), 1e-2), border="symmetric", scale=2), torch.Tensor)
    assert_type(structure_loss(x, x.flip(-1), radius=3, eps=1e-4, reduction="none"), torch.Tensor)
    coeffs = local_linear_fit(f, x, 4, 1e-3, scale=2)
    assert_type(coeffs, torch.Tensor)
    assert_type(local_linear_apply(f, coeffs), torch.Tensor)
    assert_type(gla(q, q, q, g, reverse=True), torch.Tensor)
    gla_bidirectional(q, q, q, g, merge="mean")

    gf = GuidedFilter(radius=4, eps=1e-2)
    assert_type(gf, GuidedFilter)
    assert_type(gf.radius, int)
    assert_type(GuidedFilter(4, torch.tensor([1e-2])).eps, float | torch.Tensor)
    assert_type(BoxFilter(2), BoxFilter)
    assert_type(LocalLinearFit(4, 1e-3, scale=2), LocalLinearFit)
    assert_type(LocalLinearApply(scale=2), LocalLinearApply)
    module: torch.nn.Module = gf.to(torch.float64)


def library(source: torch.Tensor, edited: torch.Tensor) -> None:
    loss = vision.StructurePreservationLoss(radius=5, eps=1e-4)
    assert_type(loss, vision.StructurePreservationLoss)
    assert_type(vision.SPL_DEFAULTS, vision.SPLDefaults)
    assert_type(vision.SPL_DEFAULTS.radius, int)
    vision.ColorPreservationLoss()


def pipelines(pipe: Any) -> None:
    enable_structure_preservation(pipe, start=0.7, steps_per_guidance=50, radius=5)
    disable_structure_preservation(pipe)
