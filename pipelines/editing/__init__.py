"""StructurePreservingEditPipeline (also loadable with ``custom_pipeline=`` this folder's path)."""
from .pipeline import StructurePreservingEditPipeline

__all__ = ["StructurePreservingEditPipeline"]
