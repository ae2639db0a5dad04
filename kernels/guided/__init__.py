"""Guided filter (gray and colour guide) and fast guided filter."""
from .op import GuidedFilter, guided_filter

__all__ = ["guided_filter", "GuidedFilter"]
