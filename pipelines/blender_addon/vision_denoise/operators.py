"""The add-on's operators: set up a scene, denoise the rendered frames (the animation with ``--temporal``, or the
current frame) in a background ``vision denoise``, cancel it, test the ``vision`` command. Under ``blender -b``
the denoise operators block until the command ends and return."""
from __future__ import annotations

import os

import bpy

from . import runner
from .scene_setup import setup_scene

JOBS: dict = {}  # the running job of this Blender session: {"job": runner.Job, "operator": ...}


def prefs(context):
    return context.preferences.addons[__package__].preferences


def frame_files(scene, frames) -> list[str]:
    """The rendered files of ``frames`` (the scene's output path, as Render Animation writes them)."""
    return [bpy.path.abspath(scene.render.frame_path(frame=f)) for f in frames]


def out_folder(scene, first: str) -> str:
    folder = scene.vision_denoise.out_dir.strip()
    if not folder:
        return os.path.join(os.path.dirname(first), "denoised")
    return bpy.path.abspath(folder)


def load_sequence(outputs: list[str]):
    """The denoised frames as one image sequence in bpy.data.images (named after the first file)."""
    first = sorted(outputs)[0]
    image = bpy.data.images.load(first, check_existing=True)
    image.source = "SEQUENCE" if len(outputs) > 1 else "FILE"
    image.reload()
    return image


def set_status(context, text: str, fraction: float = 0.0) -> None:
    wm = context.window_manager
    wm.vision_denoise_status = text
    wm.vision_denoise_progress = fraction
    for window in getattr(wm, "windows", []):
        for area in window.screen.areas:
            area.tag_redraw()


class VISION_OT_setup(bpy.types.Operator):
    """Turn on what vision denoise needs: Denoising Data, Vector and Emission passes, OpenEXR MultiLayer float output,
    an animated seed, motion blur off"""

    bl_idname = "vision_denoise.setup"
    bl_label = "Set up for denoising"
    bl_options = {"REGISTER", "UNDO"}

    def execute(self, context):
        changes = setup_scene(context.scene)
        for line in changes:
            self.report({"INFO"}, line)
        if not changes:
            self.report({"INFO"}, "The scene was already set up for denoising")
        return {"FINISHED"}


class _Denoise:
    temporal = False

    def frames(self, scene) -> list[int]:
        raise NotImplementedError

    def execute(self, context):
        return self.invoke(context, None)

    def invoke(self, context, event):
        if JOBS.get("job") is not None and JOBS["job"].running():
            self.report({"ERROR"}, "A denoise is already running; cancel it first")
            return {"CANCELLED"}
        p = prefs(context)
        exe = runner.find_vision(p.vision_path)
        if exe is None:
            where = p.vision_path.strip() or "vision on PATH"
            self.report({"ERROR"}, f"{where}: not found; set the vision command in the add-on's preferences")
            return {"CANCELLED"}
        scene = context.scene
        files = frame_files(scene, self.frames(scene))
        missing = [f for f in files if not os.path.isfile(f)]
        if missing:
            self.report({"ERROR"}, f"{missing[0]}: not rendered yet ({len(missing)} of {len(files)} frame(s) "
                                   "missing); render the animation first (Render > Render Animation)")
            return {"CANCELLED"}
        out = out_folder(scene, files[0])
        extra = scene.vision_denoise.extra_args.split()
        job = runner.Job(runner.denoise_command(exe, files, out, self.temporal, extra))
        JOBS.update(job=job, cancel=False)
        set_status(context, f"Denoising {len(files)} frame(s)...", 0.0)
        if bpy.app.background or event is None:  # blender -b (or a script): block and return
            job.wait()
            return self.finish(context, job)
        self.timer = context.window_manager.event_timer_add(0.2, window=context.window)
        context.window_manager.modal_handler_add(self)
        return {"RUNNING_MODAL"}

    def modal(self, context, event):
        job = JOBS.get("job")
        if JOBS.get("cancel"):  # the Cancel button (not Esc: Blender users press it for everything else)
            job.cancel(wait=0)  # the signal only: the UI keeps running while the command ends
        if event.type != "TIMER":
            return {"PASS_THROUGH"}
        job.poll()
        set_status(context, f"Denoising: {job.done} of {job.total} frame(s)", job.fraction)
        if job.running():
            return {"PASS_THROUGH"}
        context.window_manager.event_timer_remove(self.timer)
        return self.finish(context, job)

    def finish(self, context, job):
        job.poll()
        for line in job.warnings:
            self.report({"WARNING"}, line)
        if job.cancelled:
            set_status(context, f"Cancelled: {job.done} frame(s) denoised and kept", job.fraction)
            self.report({"WARNING"}, f"Denoise cancelled: {job.done} of {job.total} frame(s) written are kept")
            outcome = {"CANCELLED"}
        elif job.returncode != 0:
            set_status(context, "Failed: " + job.error)
            self.report({"ERROR"}, job.error or f"vision denoise failed (exit {job.returncode})")
            outcome = {"CANCELLED"}
        else:
            set_status(context, job.summary or "Done", 1.0)
            self.report({"INFO"}, job.summary or "Denoised")
            outcome = {"FINISHED"}
        if job.outputs:
            image = load_sequence(job.outputs)
            self.report({"INFO"}, f"Loaded the denoised frames as image {image.name}")
            for window in getattr(context.window_manager, "windows", []):
                for area in window.screen.areas:
                    if area.type == "IMAGE_EDITOR":
                        area.spaces.active.image = image
        JOBS.pop("job", None)
        return outcome


class VISION_OT_denoise_animation(_Denoise, bpy.types.Operator):
    """Denoise the rendered animation (frame range of the scene) with vision denoise --temporal"""

    bl_idname = "vision_denoise.denoise_animation"
    bl_label = "Denoise animation"
    temporal = True

    def frames(self, scene):
        return list(range(scene.frame_start, scene.frame_end + 1, scene.frame_step))


class VISION_OT_denoise_frame(_Denoise, bpy.types.Operator):
    """Denoise the current frame's rendered file with vision denoise"""

    bl_idname = "vision_denoise.denoise_frame"
    bl_label = "Denoise frame"

    def frames(self, scene):
        return [scene.frame_current]


class VISION_OT_cancel(bpy.types.Operator):
    """Stop the running denoise: the frames already written are kept, no partial file is left"""

    bl_idname = "vision_denoise.cancel"
    bl_label = "Cancel"

    def execute(self, context):
        JOBS["cancel"] = True
        job = JOBS.get("job")
        if job is not None and bpy.app.background:
            job.cancel()
        return {"FINISHED"}


class VISION_OT_test(bpy.types.Operator):
    """Run the vision command once (vision --version) and say whether it works"""

    bl_idname = "vision_denoise.test"
    bl_label = "Test"

    def execute(self, context):
        p = prefs(context)
        ok, line = runner.check_vision(p.vision_path)
        p.status = line
        self.report({"INFO"} if ok else {"ERROR"}, line)
        return {"FINISHED"} if ok else {"CANCELLED"}


def _auto_start():
    bpy.ops.vision_denoise.denoise_animation("INVOKE_DEFAULT")
    return None  # once


_WRITTEN = {"frames": 0}


def on_render_init(scene, *args):
    _WRITTEN["frames"] = 0


def on_render_write(scene, *args):
    _WRITTEN["frames"] += 1


def on_render_complete(scene, *args):
    """Auto-denoise (off by default): after an animation render (frames were written) start Denoise animation."""
    if not scene.vision_denoise.auto_denoise or _WRITTEN["frames"] < 1:
        return
    if bpy.app.background:
        bpy.ops.vision_denoise.denoise_animation()
    else:  # not from inside the handler: on the next tick of the UI
        bpy.app.timers.register(_auto_start, first_interval=0.5)


HANDLERS = (("render_init", on_render_init), ("render_write", on_render_write),
            ("render_complete", on_render_complete))
CLASSES = (VISION_OT_setup, VISION_OT_denoise_animation, VISION_OT_denoise_frame, VISION_OT_cancel, VISION_OT_test)
