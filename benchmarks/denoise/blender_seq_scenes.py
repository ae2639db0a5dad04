"""Animated Blender sequences for evaluating `vision denoise --temporal` (see README.md beside this file).

Each entry of :data:`SEQUENCES`: name -> (build(scene) -> keyframes the scene and camera, description).
``build`` builds the scene, keyframes whatever moves (camera, objects, light strength) over frames 1..N and
returns the camera. World frame: z up, metres. None of these layouts is one of ``blender_eval_scenes.py``'s
or of the training generators' (``blender_train.py``, ``vision/data/scenes.py``).
"""
import math

import bpy
from mathutils import Vector

from blender_kit import box, cone, cylinder, light, material, plane, sky, sphere, sun_direction, torus


def camera(scene, lens=30.0):
    cam = bpy.data.objects.new("Camera", bpy.data.cameras.new("Camera"))
    scene.collection.objects.link(cam)
    scene.camera = cam
    cam.data.lens = lens
    cam.data.sensor_width = 36.0
    cam.rotation_mode = "QUATERNION"
    return cam


def key_camera(cam, frame, origin, target):
    cam.location = Vector(origin)
    cam.rotation_quaternion = (Vector(target) - Vector(origin)).to_track_quat("-Z", "Y")
    cam.keyframe_insert("location", frame=frame)
    cam.keyframe_insert("rotation_quaternion", frame=frame)


def key_location(obj, frame, location):
    obj.location = Vector(location)
    obj.keyframe_insert("location", frame=frame)


def linear(*objs):
    """Constant velocity between keys (Bezier easing would make the motion per frame uneven)."""
    for obj in objs:
        data = obj.animation_data.action if obj.animation_data else None
        for fc in (data.fcurves if data else ()):
            for k in fc.keyframe_points:
                k.interpolation = "LINEAR"


def orbit(scene, frames):
    """(a) Outdoor, sun and sky: the camera orbits a group of objects behind a fence of thin slats, a ball rolls
    across the yard in front of them (disocclusions behind the slats and the ball)."""
    elevation, azimuth = 38.0, 130.0
    sky(scene, elevation=elevation, azimuth=azimuth, strength=0.16)
    light("SUN", (0, 0, 10), 0.6, sun_direction(elevation, azimuth), angle=0.6, color=(1.0, 0.95, 0.86), name="Sun")
    plane((0, 0, 0), 40, material("Paving", (0.35, 0.33, 0.3), rough=0.8, tex=("voronoi", 3.0, (0.6, 0.57, 0.5))),
          "Ground")
    slat = material("Slat", (0.55, 0.4, 0.25), rough=0.6)
    for i in range(14):  # thin slats: 3 cm wide, 12 cm apart
        x = -0.8 + 0.12 * i
        box((x, -0.6, 0), (x + 0.03, -0.57, 0.9), slat, f"Slat{i}")
    box((-0.85, -0.6, 0.75), (0.85, -0.57, 0.79), slat, "Rail")
    sphere((0.0, 0.8, 0.5), 0.5, material("Chrome", (0.9, 0.9, 0.92), rough=0.05, metal=1.0), "Chrome")
    box((-1.4, 0.4, 0), (-0.7, 1.1, 0.7), material("Crate", (0.6, 0.35, 0.15), rough=0.7,
                                                    tex=("checker", 8.0, (0.85, 0.75, 0.55))), "Crate")
    torus((1.2, 0.5, 0.18), 0.32, 0.12, material("Tyre", (0.04, 0.04, 0.04), rough=0.5), name="Tyre")
    cone((1.0, 1.6, 0.7), 0.45, 0.0, 1.4, material("Tree", (0.1, 0.3, 0.08), rough=0.9,
                                                  tex=("noise", 20.0, (0.25, 0.45, 0.12), 4.0)), "Tree")
    ball = sphere((-1.6, -1.3, 0.22), 0.22, material("Ball", (0.8, 0.1, 0.08), rough=0.4,
                                                    tex=("checker", 14.0, (0.9, 0.9, 0.85))), "Ball")
    cam = camera(scene, lens=32.0)
    n = frames
    for f in (1, n):
        a = math.radians(-110 + 50 * (f - 1) / (n - 1))  # 50 degrees in n - 1 frames
        key_camera(cam, f, (4.2 * math.cos(a), 4.2 * math.sin(a), 1.5), (0, 0.2, 0.45))
        key_location(ball, f, (-1.6 + 3.0 * (f - 1) / (n - 1), -1.3, 0.22))
    linear(cam, ball)
    return cam


def hall(scene, frames):
    """(b) A room open to the sky on one side: the camera trucks past a foreground column and a chair with thin
    legs, a box slides along the floor, and a ceiling lamp that is off for the first half switches on."""
    sky(scene, elevation=25.0, azimuth=60.0, strength=0.6)
    light("SUN", (0, 0, 8), 2.5, sun_direction(25.0, 60.0), angle=0.6, color=(1.0, 0.92, 0.8), name="Sun")
    plaster = material("Plaster", (0.75, 0.73, 0.7), rough=0.9)
    floor = material("Floor", (0.3, 0.18, 0.1), rough=0.4, tex=("wave", 2.5, (0.5, 0.32, 0.16), 5.0))
    box((-3.2, -3, -0.2), (3.2, 3.2, 0), floor, "Floor")
    box((-3.2, 3.0, 0), (3.2, 3.2, 2.8), plaster, "Back")
    box((-3.2, -3, 0), (-3.0, 3.2, 2.8), plaster, "Left")
    box((-3.2, -3, 2.8), (3.2, 3.2, 3.0), material("Ceiling", (0.85, 0.85, 0.85), rough=0.95), "Ceiling")
    # the right side (x > 3) is open to the sky and sun
    plane((8, 0, -0.01), 12, material("Lawn", (0.1, 0.25, 0.05), rough=0.9, tex=("noise", 25.0, (0.2, 0.4, 0.1))),
          "Lawn")
    cylinder((-0.3, -1.2, 1.4), 0.16, 2.8, material("Column", (0.8, 0.78, 0.74), rough=0.5), name="Column")
    steel = material("Steel", (0.6, 0.6, 0.62), rough=0.3, metal=1.0)
    box((0.6, 1.2, 0.45), (1.1, 1.7, 0.49), material("Seat", (0.2, 0.35, 0.6), rough=0.6), "Seat")
    for dx in (0.62, 1.06):
        for dy in (1.22, 1.66):
            box((dx, dy, 0), (dx + 0.02, dy + 0.02, 0.45), steel, "Leg")
    sphere((-1.6, 2.2, 0.35), 0.35, material("Vase", (0.1, 0.4, 0.35), rough=0.15), "Vase")
    box((-2.9, 0.2, 0), (-2.5, 2.4, 1.8), material("Shelf", (0.45, 0.3, 0.2), rough=0.5,
                                                  tex=("brick", 4.0, (0.6, 0.45, 0.3))), "Shelf")
    crate = box((-2.0, -0.2, 0), (-1.5, 0.3, 0.5), material("Box", (0.7, 0.6, 0.2), rough=0.6,
                                                            tex=("checker", 10.0, (0.3, 0.25, 0.1))), "Box")
    lamp = light("AREA", (-0.5, 1.0, 2.75), 0.0, (0, 0, -1), size=0.6, color=(1.0, 0.85, 0.65), name="Lamp")
    cam = camera(scene, lens=26.0)
    n = frames
    for f in (1, n):
        t = (f - 1) / (n - 1)
        key_camera(cam, f, (-1.4 + 1.8 * t, -2.8, 1.5), (-0.4 + 1.4 * t, 1.5, 0.9))
        key_location(crate, f, (0.0 + 1.6 * t, 0.0, 0.0))
    linear(cam, crate)
    on = n // 2 + 1  # dark up to frame n/2, full from the next one on: a light that turns on
    for f, e in ((1, 0.0), (on - 1, 0.0), (on, 250.0), (n, 250.0)):
        lamp.data.energy = e
        lamp.data.keyframe_insert("energy", frame=f)
    for fc in lamp.data.animation_data.action.fcurves:
        for k in fc.keyframe_points:
            k.interpolation = "CONSTANT"
    return cam


def street(scene, frames):
    """(c) Low sun, long shadows: the camera dollies forward along a row of thin poles and boxes, a torus spins
    and a glossy disc bobs up and down; poles close to the camera cross the frame quickly."""
    elevation, azimuth = 18.0, -30.0
    sky(scene, elevation=elevation, azimuth=azimuth, strength=0.18)
    light("SUN", (0, 0, 10), 0.9, sun_direction(elevation, azimuth), angle=0.5, color=(1.0, 0.88, 0.72), name="Sun")
    plane((0, 6, 0), 40, material("Asphalt", (0.12, 0.12, 0.13), rough=0.7, tex=("noise", 40.0, (0.22, 0.22, 0.22))),
          "Road")
    box((1.2, -4, 0), (5, 20, 0.12), material("Kerb", (0.55, 0.55, 0.5), rough=0.8, tex=("brick", 3.0, (0.4, 0.4, 0.38))),
        "Pavement")
    pole = material("Pole", (0.15, 0.16, 0.18), rough=0.35, metal=0.8)
    for i in range(8):
        cylinder((1.5, 1.0 + 2.0 * i, 1.3), 0.025, 2.6, pole, name=f"Pole{i}", vertices=16)
    for i, (y, c) in enumerate(((3.5, (0.7, 0.2, 0.1)), (7.0, (0.2, 0.4, 0.7)), (10.5, (0.8, 0.7, 0.3)))):
        box((2.4, y, 0.12), (3.4, y + 1.2, 1.0 + 0.3 * i), material(f"Block{i}", c, rough=0.6,
                                                                    tex=("checker", 6.0, (0.85, 0.85, 0.8))), f"Block{i}")
    ring = torus((-0.6, 7.5, 0.9), 0.5, 0.1, material("Copper", (0.95, 0.6, 0.4), rough=0.25, metal=1.0),
                 rotation=(math.radians(90), 0, 0), name="Ring")
    disc = cylinder((0.4, 5.0, 0.5), 0.35, 0.08, material("Disc", (0.1, 0.5, 0.2), rough=0.2), name="Disc")
    cam = camera(scene, lens=28.0)
    n = frames
    ring.rotation_mode = "XYZ"
    for f in range(1, n + 1):
        t = (f - 1) / (n - 1)
        if f in (1, n):
            key_camera(cam, f, (0.3, -3.0 + 2.4 * t, 1.4), (0.8, 10.0 + 2.4 * t, 0.9))
            ring.rotation_euler = (math.radians(90), 0, math.radians(70 * t))
            ring.keyframe_insert("rotation_euler", frame=f)
        key_location(disc, f, (0.4, 5.0, 0.5 + 0.35 * math.sin(2 * math.pi * t)))
    linear(cam, ring)
    return cam


SEQUENCES = {
    "orbit": (orbit, "outdoor, camera orbit, rolling ball, thin fence slats"),
    "hall": (hall, "room open to the sky, camera truck past a column, sliding box, lamp switches on mid-sequence"),
    "street": (street, "low sun, camera dolly along thin poles, spinning ring, bobbing disc"),
}
