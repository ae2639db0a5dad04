"""Dense prediction tasks: depth, surface normals, alpha matting, binary and semantic segmentation, albedo;
their losses, decodings and standard metrics, all over optional valid-pixel masks.

``TASKS`` maps task names to task instances with default settings; calling one returns a copy with
fields changed (``TASKS["semantic"](out_channels=21)``).
"""
from .losses import (alpha_loss, binary_loss, gradient_matching_loss, l1_loss, normal_loss, scale_shift_invariant_loss,
                     semantic_loss, silog_loss)
from .metrics import (albedo_metrics, alpha_metrics, binary_metrics, depth_metrics, median_scale, normal_metrics,
                      semantic_metrics)
from .tasks import (TASKS, AlbedoTask, AlphaTask, BinaryTask, DepthTask, NormalsTask, RelativeDepthTask,
                    SemanticTask, Task, get_task, predict_with_flip)

__all__ = ["TASKS", "Task", "DepthTask", "RelativeDepthTask", "NormalsTask", "AlphaTask", "BinaryTask",
           "SemanticTask", "AlbedoTask", "get_task", "predict_with_flip", "silog_loss",
           "scale_shift_invariant_loss", "normal_loss", "alpha_loss", "binary_loss", "semantic_loss", "l1_loss",
           "gradient_matching_loss", "depth_metrics", "normal_metrics", "alpha_metrics", "binary_metrics",
           "semantic_metrics", "albedo_metrics", "median_scale"]
