"""The "Set up for denoising" operator's work: the render settings ``vision denoise`` needs, changed on a scene,
each change said.

What the denoiser reads from each frame: Cycles' Denoising Data passes (albedo, normal, depth), the Vector pass
(motion vectors for animations), the Emission pass (keeps lamps in view exact), all in one OpenEXR MultiLayer file
per frame in float. An animated seed gives each frame its own noise (the history averages it away); motion blur
smears the motion vectors, so it goes off (Vector Blur in the Compositor can add it to the denoised frames).
"""
from __future__ import annotations


def _set(changes: list[str], owner, attr: str, value, what: str) -> None:
    old = getattr(owner, attr)
    if old != value:
        setattr(owner, attr, value)
        changes.append(f"{what}: {old} -> {value}")


def setup_scene(scene) -> list[str]:
    """Change ``scene`` (a ``bpy.types.Scene``) for ``vision denoise``; returns one line per setting changed
    (empty when all were already right).

    Example (in Blender)::

        for line in setup_scene(bpy.context.scene):
            print(line)    # "Render engine: BLENDER_EEVEE -> CYCLES", "ViewLayer: Denoising Data: False -> True", ...
    """
    changes: list[str] = []
    render = scene.render
    _set(changes, render, "engine", "CYCLES", "Render engine (Denoising Data is a Cycles pass)")
    for layer in scene.view_layers:
        _set(changes, layer.cycles, "denoising_store_passes", True,
             f"{layer.name}: Passes > Data > Denoising Data")
        _set(changes, layer, "use_pass_vector", True, f"{layer.name}: Passes > Data > Vector")
        _set(changes, layer, "use_pass_emit", True, f"{layer.name}: Passes > Light > Emission")
    image = render.image_settings
    depth = image.color_depth  # before the format: a new format may change the depth by itself
    _set(changes, image, "file_format", "OPEN_EXR_MULTILAYER", "Output > File Format")
    image.color_depth = "32"
    if depth != "32":
        changes.append(f"Output > Color Depth: {depth} -> 32 (Full Float)")
    if image.exr_codec in ("DWAA", "DWAB", "B44", "B44A", "PXR24"):  # lossy: the noise statistics change
        _set(changes, image, "exr_codec", "ZIP", "Output > Codec (lossless)")
    _set(changes, scene.cycles, "use_animated_seed", True, "Sampling > Advanced > Seed: animated")
    if render.use_motion_blur:
        render.use_motion_blur = False
        changes.append("Motion Blur: on -> off (it smears the motion vectors; add Vector Blur in the Compositor "
                       "to the denoised frames afterwards)")
    _set(changes, scene.cycles, "use_denoising", False, "Render > Denoise (Cycles' own; vision denoises instead)")
    return changes


def check_scene(scene) -> list[str]:
    """What ``scene`` lacks for ``vision denoise`` (one line each), without changing it."""
    missing = []
    if scene.render.engine != "CYCLES":
        missing.append("the render engine is not Cycles")
    for layer in scene.view_layers:
        if not layer.cycles.denoising_store_passes:
            missing.append(f"{layer.name}: no Denoising Data pass")
        if not layer.use_pass_vector:
            missing.append(f"{layer.name}: no Vector pass")
    if scene.render.image_settings.file_format != "OPEN_EXR_MULTILAYER":
        missing.append("the output is not OpenEXR MultiLayer")
    return missing
