"""Held-out animated sequences for `vision denoise --temporal`: built apart from ``blender_seq_scenes.py`` (whose
``orbit``, ``hall`` and ``street`` the temporal denoiser was developed and tuned on), so that figures measured on
these are not fitted to them. Rendered by ``blender_seq.py`` in the same format (``--sequences kitchen,courtyard``).

Each entry of :data:`HELDOUT`: name -> (build(scene, frames) -> camera, description), as in
``blender_seq_scenes.SEQUENCES``. Different content, materials, lighting and motion from the tuning sequences: a
closed interior lit by area and point lamps and an emissive shade (no sun, no sky), and a courtyard at night lit by
lanterns (a dim flat sky, no sun), with a fast pan, a swinging lantern and a spinning fan. Nothing in
``blender_train.py`` or ``vision render-scenes`` builds these layouts: **keep them out of training and tuning**.
"""
import math

from blender_kit import box, cylinder, light, material, plane, sky, sphere, torus
from blender_seq_scenes import camera, key_camera, key_location, linear


def step(data, path, keys):
    """Keyframe ``data.path`` with constant (stepped) interpolation at ``keys`` = ((frame, value), ...)."""
    for f, v in keys:
        setattr(data, path, v)
        data.keyframe_insert(path, frame=f)
    for fc in data.animation_data.action.fcurves:
        for k in fc.keyframe_points:
            k.interpolation = "CONSTANT"


def kitchen(scene, frames):
    """(d) A closed kitchen, no window and no sky: lit by a rectangular ceiling panel (area light), a warm strip
    under the wall cupboards (a long thin area light), a small point lamp, and an emissive pendant shade over the
    table (an emissive mesh light, hung on a 6 mm cord). Materials: a black-and-cream checker tile floor and a noise
    (wood-grain-like) cabinet front (albedo with detail), a polished dark worktop and a glossy ceramic backsplash
    (glossy), matt painted walls (diffuse), a brushed-metal kettle and a glazed bowl. Thin geometry: 2 cm table
    legs and the pendant cord. Motion: the camera trucks 0.9 m sideways while turning 15 degrees; a tall trolley
    crosses the whole frame 1.0-1.4 m in front of the camera (about 14 px per frame: large disocclusions of the
    table, floor and cupboards behind it). The ceiling panel dims from 160 W to 45 W from frame n/2 + 1 on (a
    light that changes strength mid-sequence, and stays on)."""
    sky(scene, strength=0.0, color=(0.0, 0.0, 0.0))  # closed room: nothing comes from outside
    paint = material("Paint", (0.45, 0.5, 0.4), rough=0.95, specular=0.3)  # sage, not white: shorter paths
    tiles = material("Tiles", (0.05, 0.05, 0.05), rough=0.35, tex=("checker", 3.5, (0.82, 0.78, 0.66)))
    box((-2.2, -2.4, -0.1), (2.2, 2.0, 0), tiles, "TileFloor")
    box((-2.2, 1.9, 0), (2.2, 2.0, 2.6), paint, "BackWall")
    box((-2.3, -2.4, 0), (-2.2, 2.0, 2.6), paint, "LeftWall")
    box((2.2, -2.4, 0), (2.3, 2.0, 2.6), paint, "RightWall")
    box((-2.2, -2.4, 2.6), (2.2, 2.0, 2.7), material("CeilingPaint", (0.65, 0.65, 0.62), rough=1.0), "Ceiling")
    # the worktop run along the back wall: cabinets, a polished top, a tiled backsplash, wall cupboards
    wood = material("Cabinet", (0.42, 0.27, 0.14), rough=0.55, tex=("noise", 9.0, (0.7, 0.5, 0.3), 4.0))
    box((-2.2, 1.3, 0), (1.4, 1.9, 0.86), wood, "Cabinets")
    box((-2.2, 1.27, 0.86), (1.45, 1.9, 0.9), material("Worktop", (0.03, 0.03, 0.035), rough=0.08,
                                                       specular=0.7), "Worktop")
    box((-2.2, 1.88, 0.9), (1.45, 1.9, 1.45), material("Backsplash", (0.25, 0.45, 0.6), rough=0.12,
                                                       tex=("brick", 7.0, (0.85, 0.88, 0.9))), "Backsplash")
    box((-2.2, 1.55, 1.45), (1.4, 1.9, 2.2), wood, "Cupboards")
    # things on the worktop: a brushed-metal kettle and a glazed bowl
    cylinder((0.7, 1.6, 1.03), 0.11, 0.26, material("Kettle", (0.8, 0.8, 0.82), rough=0.25, metal=1.0),
             name="Kettle")
    torus((-0.6, 1.6, 0.95), 0.12, 0.05, material("Bowl", (0.7, 0.15, 0.1), rough=0.1), name="Bowl")
    sphere((-1.2, 1.6, 0.98), 0.08, material("Lemon", (0.85, 0.7, 0.05), rough=0.6), "Lemon")
    # a table with thin legs, a cloth-less top, a jug on it
    box((-0.9, -0.1, 0.72), (0.5, 0.7, 0.76), material("TableTop", (0.75, 0.72, 0.66), rough=0.4), "TableTop")
    steel = material("Legs", (0.1, 0.1, 0.1), rough=0.4, metal=0.6)
    for x in (-0.86, 0.44):
        for y in (-0.06, 0.64):
            box((x, y, 0), (x + 0.02, y + 0.02, 0.72), steel, "TableLeg")
    cylinder((-0.2, 0.3, 0.88), 0.07, 0.24, material("Jug", (0.9, 0.9, 0.85), rough=0.15), name="Jug")
    # the pendant: an emissive shade on a thin cord
    cylinder((-0.2, 0.3, 2.05), 0.003, 1.1, steel, name="Cord", vertices=12)
    sphere((-0.2, 0.3, 1.42), 0.12, material("Shade", (0.9, 0.85, 0.7), rough=0.5, emit=6.0,
                                             emit_color=(1.0, 0.8, 0.55)), "Shade")
    # lights: ceiling panel (dims), under-cupboard strip, a small point lamp near the door side
    panel = light("AREA", (0.6, -0.6, 2.58), 160.0, (0, 0, -1), size=0.9, color=(0.95, 0.97, 1.0), name="Panel")
    strip = light("AREA", (-0.4, 1.7, 1.42), 35.0, (0, -0.3, -1), size=1.0, color=(1.0, 0.8, 0.55), name="Strip")
    strip.data.shape = "RECTANGLE"
    strip.data.size, strip.data.size_y = 2.8, 0.06
    light("POINT", (1.9, -1.8, 2.1), 40.0, size=0.08, color=(1.0, 0.9, 0.8), name="Bulb")
    # the trolley that crosses in front of the camera
    trolley = box((-0.22, -0.22, 0), (0.22, 0.22, 1.0), material("Trolley", (0.15, 0.3, 0.55), rough=0.45,
                                                                 tex=("checker", 12.0, (0.8, 0.82, 0.85))),
                  "Trolley")
    cam = camera(scene, lens=26.0)
    n = frames
    for f in (1, n):
        t = (f - 1) / (n - 1)
        a = math.radians(-8 + 15 * t)  # turns 15 degrees while trucking 0.9 m
        origin = (-0.9 + 0.9 * t, -2.1, 1.35)
        key_camera(cam, f, origin, (origin[0] + 3.0 * math.sin(a), origin[1] + 3.0 * math.cos(a), 0.85))
        key_location(trolley, f, (-2.0 + 3.0 * t, -0.85 + 0.2 * t, 0.0))
    linear(cam, trolley)
    step(panel.data, "energy", ((1, 160.0), (n // 2, 160.0), (n // 2 + 1, 45.0), (n, 45.0)))
    return cam


def courtyard(scene, frames):
    """(e) A walled courtyard at night: a dim dark-blue flat sky and a weak cold moon (SUN), two warm lanterns
    (point lights inside emissive glass globes) and a spot over a door carry the light. Materials: stone-brick
    walls and voronoi cobbles (textured albedo), a wet glossy flagstone, a glazed planter, a wooden bench.
    Thin geometry: a gate of 1.5 cm iron bars, a pergola of 3 cm beams and a wire between the lanterns. Motion:
    a fast pan, the camera turning 100 degrees in 15 frames (about 6.7 degrees, 11 px, per frame) while it
    rises 0.3 m; one lantern swings on its bracket (its light moves with it, so shadows move); a four-bladed fan
    of thin boards spins 24 degrees per frame."""
    sky(scene, strength=0.05, color=(0.12, 0.16, 0.35))
    light("SUN", (0, 0, 10), 0.04, (0.3, -0.5, -0.8), angle=0.5, color=(0.7, 0.8, 1.0), name="Moon")
    stone = material("Stone", (0.42, 0.38, 0.33), rough=0.85, tex=("brick", 2.5, (0.3, 0.27, 0.24)))
    plane((0, 0, 0), 12, material("Cobbles", (0.3, 0.28, 0.25), rough=0.7,
                                  tex=("voronoi", 6.0, (0.5, 0.47, 0.42))), "Cobbles")
    box((-4, 3.5, 0), (4, 3.8, 3.2), stone, "NorthWall")
    box((-4.3, -4, 0), (-4, 3.8, 3.2), stone, "WestWall")
    box((4, -4, 0), (4.3, 3.8, 3.2), stone, "EastWall")
    box((-1.2, -0.6, 0), (0.4, 0.4, 0.005), material("Puddle", (0.02, 0.02, 0.025), rough=0.03, specular=0.8),
        "Puddle")
    # a door in the north wall with a spot above it, a gate of thin bars in the west wall
    box((1.2, 3.45, 0), (2.2, 3.5, 2.1), material("Door", (0.25, 0.08, 0.06), rough=0.5), "Door")
    light("SPOT", (1.7, 3.2, 2.6), 60.0, (0, -0.25, -1), size=0.05, spread=70, color=(1.0, 0.75, 0.45), name="Spot")
    iron = material("Iron", (0.06, 0.06, 0.06), rough=0.45, metal=0.7)
    for i in range(12):
        y = -1.5 + 0.11 * i
        box((-3.99, y, 0), (-3.975, y + 0.015, 1.9), iron, f"GateBar{i}")
    box((-3.99, -1.5, 1.85), (-3.975, -0.2, 1.9), iron, "GateRail")
    # a pergola of thin beams over the bench, a bench and a planter
    beam = material("Beam", (0.35, 0.22, 0.12), rough=0.6)
    for x in (0.6, 3.0):
        for y in (0.8, 2.8):
            box((x, y, 0), (x + 0.06, y + 0.06, 2.4), beam, "Post")
    for i in range(9):
        y = 0.8 + 0.25 * i
        box((0.5, y, 2.4), (3.2, y + 0.03, 2.46), beam, f"Rafter{i}")
    box((1.0, 2.6, 0.42), (2.6, 3.0, 0.48), material("Bench", (0.45, 0.3, 0.18), rough=0.6,
                                                    tex=("wave", 6.0, (0.6, 0.42, 0.25), 6.0)), "Bench")
    cylinder((-2.4, 2.4, 0.35), 0.35, 0.7, material("Planter", (0.1, 0.3, 0.45), rough=0.1), name="Planter")
    sphere((-2.4, 2.4, 0.95), 0.4, material("Shrub", (0.08, 0.2, 0.06), rough=0.9,
                                             tex=("noise", 30.0, (0.18, 0.35, 0.1), 6.0)), "Shrub")
    # lanterns: emissive globes with a point light inside, joined by a thin wire; the east one swings
    globe = material("Globe", (0.9, 0.8, 0.6), rough=0.4, emit=3.0, emit_color=(1.0, 0.7, 0.4))
    sphere((-3.7, 0.0, 2.2), 0.12, globe, "LanternWest")
    light("POINT", (-3.7, 0.0, 2.2), 45.0, size=0.1, color=(1.0, 0.72, 0.42), name="LampWest")
    cylinder((0.0, 0.0, 2.55), 0.004, 7.4, iron, rotation=(0, math.radians(90), 0), name="Wire", vertices=12)
    swing = sphere((3.7, 0.0, 2.2), 0.12, globe, "LanternEast")
    lamp = light("POINT", (3.7, 0.0, 2.2), 45.0, size=0.1, color=(1.0, 0.72, 0.42), name="LampEast")
    for obj in (scene.objects["LanternWest"], swing):
        obj.visible_shadow = False  # the lamp inside shines through its own globe
    # a fan of four thin boards on a post, spinning about its axis
    cylinder((-1.8, 1.4, 0.6), 0.03, 1.2, iron, name="FanPost")
    fan = box((-0.5, -0.01, -0.05), (0.5, 0.01, 0.05), material("Blades", (0.8, 0.75, 0.2), rough=0.5), "Fan")
    fan.location = (-1.8, 1.4, 1.25)
    blade2 = box((-0.05, -0.01, -0.5), (0.05, 0.01, 0.5), fan.data.materials[0], "Fan2")
    blade2.location = (-1.8, 1.4, 1.25)
    cam = camera(scene, lens=24.0)
    n = frames
    for obj in (fan, blade2):
        obj.rotation_mode = "XYZ"
    for f in range(1, n + 1):
        t = (f - 1) / (n - 1)
        yaw = math.radians(160 - 100 * t)  # from the west gate round to the east lantern
        origin = (0.2, -2.6, 1.5 + 0.3 * t)
        key_camera(cam, f, origin, (origin[0] + 4.0 * math.cos(yaw), origin[1] + 4.0 * math.sin(yaw), 1.3))
        a = math.radians(25) * math.sin(2 * math.pi * 1.5 * t)  # swings 25 degrees either way, 1.5 swings
        pos = (3.7, 0.45 * math.sin(a), 2.65 - 0.45 * math.cos(a))  # on a 0.45 m arm from (3.7, 0, 2.65)
        key_location(swing, f, pos)
        key_location(lamp, f, pos)
        for obj in (fan, blade2):
            obj.rotation_euler = (0, math.radians(24 * (f - 1)), 0)
            obj.keyframe_insert("rotation_euler", frame=f)
    linear(cam, swing, lamp, fan, blade2)
    return cam


HELDOUT = {
    "kitchen": (kitchen, "closed kitchen, area/point lamps and an emissive shade, camera truck and turn, trolley "
                         "crosses in front, ceiling panel dims mid-sequence, thin table legs and cord"),
    "courtyard": (courtyard, "courtyard at night, lanterns and a door spot, fast 100-degree pan, swinging lantern "
                             "light, spinning thin fan, thin gate bars and pergola"),
}
