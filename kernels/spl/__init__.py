"""Structure Preservation Loss (Gong, Ryu, Ok, Cho, WACV 2026): local linear fit residuals of an edit against its source."""
from .op import structure_loss

__all__ = ["structure_loss"]
