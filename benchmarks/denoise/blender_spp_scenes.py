"""The sample-count set's Blender scenes (``blender_eval.py --set spp``; README.md beside this file): stills to judge
a denoiser at 1, 4, 16, 64 and 256 spp against a 4096-spp reference.

Each entry of :data:`SCENES`: name -> (build(scene), one view (origin, target, lens mm), description), as in
``blender_eval_scenes.SCENES``. World frame: z up, metres. ``tune_a`` and ``tune_b`` (last) are for tuning; the
six before them are for evaluation only. None of these layouts, object sets or textures is one of
``blender_eval_scenes.py``, ``blender_seq_scenes.py``, ``blender_seq_heldout.py`` or the training generators'
(``blender_train.py``, ``vision/data/scenes.py``).
"""
import math
import random

from mathutils import Vector

from blender_kit import box, cone, cylinder, light, material, plane, sky, sphere, sun_direction, torus


def rod(p0, p1, radius, mat, name="Rod", vertices=12):
    """A cylinder of ``radius`` from point ``p0`` to ``p1``."""
    p0, p1 = Vector(p0), Vector(p1)
    axis = p1 - p0
    rotation = axis.to_track_quat("Z", "Y").to_euler()
    return cylinder((p0 + p1) / 2, radius, axis.length, mat, rotation=tuple(rotation), name=name, vertices=vertices)


def _room(x0, x1, y0, y1, H, wall, floor, ceiling, open_side=None, t=0.15):
    """Walls (``t`` thick, outside the inner faces x0..x1, y0..y1), a floor below z = 0 and a ceiling at H;
    ``open_side`` ('front' = y0, 'right' = x1, ...) is left out."""
    box((x0 - t, y0 - t, -t), (x1 + t, y1 + t, 0), floor, "Floor")
    box((x0 - t, y0 - t, H), (x1 + t, y1 + t, H + t), ceiling, "Ceiling")
    sides = {"left": ((x0 - t, y0 - t, 0), (x0, y1 + t, H)), "right": ((x1, y0 - t, 0), (x1 + t, y1 + t, H)),
             "front": ((x0, y0 - t, 0), (x1, y0, H)), "back": ((x0, y1, 0), (x1, y1 + t, H))}
    for side, (lo, hi) in sides.items():
        if side != open_side:
            box(lo, hi, wall if not isinstance(wall, dict) else wall[side], f"Wall_{side}")


def porch(scene):
    """Front porch of a house under a low sun and a visible sky: board-siding facade (wave bands), decking,
    posts and a porch roof whose edges cast hard shadows on the wall and deck, a dark glossy window, a tree."""
    elevation, azimuth = 25.0, -70.0
    sky(scene, elevation=elevation, azimuth=azimuth, strength=0.25)
    light("SUN", (0, 0, 10), 2.5, sun_direction(elevation, azimuth), angle=0.15, color=(1.0, 0.93, 0.8),
          name="Sun")
    plane((0, 0, 0), 60, material("DryLawn", (0.18, 0.22, 0.08), rough=0.9,
                                  tex=("noise", 6.0, (0.36, 0.31, 0.15), 8.0)), "Ground")
    box((-0.7, -6.0, 0), (0.7, 0.1, 0.01), material("Gravel", (0.5, 0.48, 0.44), rough=0.9,
                                                   tex=("noise", 60.0, (0.72, 0.7, 0.66), 2.0)), "Path")
    box((-4.5, 3.0, 0), (4.5, 3.3, 4.2), material("Siding", (0.55, 0.62, 0.68), rough=0.7,
                                                  tex=("wave", 5.0, (0.32, 0.37, 0.42), 0.3)), "Facade")
    deck = material("Decking", (0.42, 0.28, 0.16), rough=0.6, tex=("wave", 7.0, (0.28, 0.18, 0.09), 1.5))
    box((-3.5, 0.9, 0), (3.5, 3.0, 0.4), deck, "Deck")
    step = material("Step", (0.6, 0.58, 0.55), rough=0.8, tex=("noise", 20.0, (0.45, 0.43, 0.4), 4.0))
    box((-0.7, 0.5, 0), (0.7, 0.9, 0.27), step, "Step1")
    box((-0.7, 0.1, 0), (0.7, 0.5, 0.13), step, "Step2")
    paint = material("WhitePaint", (0.85, 0.85, 0.82), rough=0.5)
    for x in (-3.3, -1.0, 1.0, 3.3):
        cylinder((x, 1.05, 1.55), 0.07, 2.3, paint, name="Post")
    box((-3.7, 0.8, 2.7), (3.7, 3.0, 2.85), material("Roof", (0.25, 0.22, 0.2), rough=0.8), "PorchRoof")
    box((0.3, 2.96, 0.4), (1.2, 3.0, 2.45), material("Door", (0.45, 0.06, 0.05), rough=0.25, specular=0.6), "Door")
    pane = material("Pane", (0.02, 0.025, 0.03), rough=0.02, specular=0.8)
    box((-2.4, 2.97, 1.0), (-0.8, 3.0, 2.2), pane, "Window")
    box((-2.5, 2.85, 0.95), (-0.7, 3.0, 1.0), paint, "Sill")
    box((-1.0, 2.97, 3.2), (0.2, 3.0, 3.9), pane, "UpperWindow")
    box((-3.2, 2.35, 0.82), (-1.6, 2.85, 0.87), deck, "BenchSeat")
    for x in (-3.1, -1.8):
        box((x, 2.4, 0.4), (x + 0.1, 2.8, 0.82), deck, "BenchLeg")
    cylinder((2.4, 2.3, 0.65), 0.25, 0.5, material("Terracotta", (0.55, 0.25, 0.12), rough=0.8), name="Planter")
    sphere((2.4, 2.3, 1.15), 0.35, material("Shrub", (0.06, 0.16, 0.04), rough=0.9,
                                            tex=("noise", 25.0, (0.16, 0.32, 0.08), 5.0)), "Shrub")
    cylinder((1.3, 0.0, 0.15), 0.14, 0.3, material("Galvanised", (0.7, 0.7, 0.72), rough=0.3, metal=1.0),
             name="Bucket")
    cylinder((-6.0, 1.0, 1.2), 0.15, 2.4, material("Bark", (0.2, 0.13, 0.08), rough=0.9), name="Trunk")
    sphere((-6.0, 1.0, 3.2), 1.4, material("Leaves", (0.05, 0.14, 0.04), rough=0.85,
                                           tex=("voronoi", 9.0, (0.14, 0.3, 0.07))), "Canopy")


def lounge(scene):
    """Living room at night, no sun and no sky (the wall behind the camera left out, black outside): a square
    ceiling lamp (area, just above the frame), a table lamp whose small bulb shows under its shade, a wall sconce
    whose bulb is hidden behind its plate (the wall around the plate glows)."""
    sky(scene, color=(0.0, 0.0, 0.0), strength=0.0)
    _room(-2.8, 2.8, -2.3, 2.3, 2.6, material("WarmWall", (0.72, 0.62, 0.5), rough=0.95),
          material("Parquet", (0.35, 0.2, 0.1), rough=0.45, tex=("brick", 5.0, (0.52, 0.33, 0.17))),
          material("Ceiling", (0.8, 0.78, 0.75), rough=0.95), open_side="front")
    fabric = material("Upholstery", (0.15, 0.25, 0.35), rough=1.0, tex=("voronoi", 30.0, (0.27, 0.4, 0.52)))
    box((-1.3, 0.9, 0), (1.3, 1.7, 0.45), fabric, "SofaSeat")
    box((-1.3, 1.5, 0.45), (1.3, 1.7, 0.9), fabric, "SofaBack")
    for x in (-1.5, 1.3):
        box((x, 0.9, 0), (x + 0.2, 1.7, 0.65), fabric, "SofaArm")
    cushion = material("Cushion", (0.6, 0.35, 0.1), rough=0.9, tex=("magic", 8.0, (0.9, 0.8, 0.5)))
    box((-1.1, 1.3, 0.45), (-0.5, 1.5, 0.85), cushion, "Cushion")
    box((0.5, 1.3, 0.45), (1.1, 1.5, 0.85), cushion, "Cushion")
    # the ceiling lamp lights most of what is seen directly (an uplighter hidden behind the sofa, tried first, lit
    # the room only through one small bright ceiling patch: fireflies everywhere at 64 spp, too slow to converge)
    light("AREA", (0.2, 0.4, 2.58), 100.0, (0, 0, -1), size=0.6, color=(1.0, 0.85, 0.65), name="CeilingLamp")
    box((-0.6, 2.26, 1.3), (0.6, 2.3, 2.0), material("Painting", (0.1, 0.2, 0.5), rough=0.8,
                                                     tex=("wave", 3.0, (0.9, 0.6, 0.2), 10.0)), "Painting")
    box((-1.6, -0.8, 0), (1.6, 0.9, 0.01), material("Rug", (0.5, 0.15, 0.1), rough=1.0,
                                                    tex=("magic", 2.0, (0.8, 0.6, 0.3))), "Rug")
    box((-0.7, -0.3, 0.38), (0.7, 0.4, 0.42), material("Lacquer", (0.02, 0.02, 0.02), rough=0.05, specular=0.7),
        "CoffeeTable")
    brass = material("Brass", (0.9, 0.7, 0.35), rough=0.25, metal=1.0)
    for x in (-0.65, 0.62):
        for y in (-0.25, 0.32):
            box((x, y, 0.01), (x + 0.03, y + 0.03, 0.38), brass, "TableLeg")
    sphere((0.3, 0.05, 0.52), 0.1, material("Ceramic", (0.7, 0.75, 0.7), rough=0.1, specular=0.6), "Bowl")
    # table lamp on a side table in the back-left corner: the bulb sits on the stem below the shade
    cylinder((-2.2, 1.6, 0.3), 0.3, 0.6, material("SideWood", (0.3, 0.17, 0.08), rough=0.5), name="SideTable")
    cylinder((-2.2, 1.6, 0.63), 0.08, 0.06, material("GreenGlaze", (0.1, 0.35, 0.2), rough=0.1), name="LampBase")
    cylinder((-2.2, 1.6, 0.82), 0.01, 0.32, brass, name="LampStem")
    cone((-2.2, 1.6, 1.1), 0.2, 0.12, 0.24, material("Shade", (0.85, 0.8, 0.65), rough=1.0), "Shade")
    bulb = sphere((-2.2, 1.6, 0.84), 0.025, material("Bulb", (1, 1, 1), emit=30.0, emit_color=(1.0, 0.8, 0.55)),
                  "Bulb")
    bulb.visible_shadow = False
    light("POINT", (-2.2, 1.6, 0.84), 15.0, size=0.03, color=(1.0, 0.8, 0.55), name="TableBulb")
    # sconce on the left wall: the bulb sits between the plate and the wall, out of the camera's sight
    box((-2.35, -0.85, 1.4), (-2.32, -0.35, 2.0), material("SconcePaint", (0.8, 0.75, 0.65), rough=0.8),
        "SconcePlate")
    light("POINT", (-2.55, -0.6, 1.7), 20.0, size=0.02, color=(1.0, 0.85, 0.65), name="SconceBulb")
    box((-2.8, -1.5, 0), (-2.35, -0.9, 0.7), material("BlackCabinet", (0.03, 0.03, 0.035), rough=0.08,
                                                      specular=0.6), "Cabinet")
    cylinder((-2.55, -1.2, 0.85), 0.07, 0.3, material("Vase", (0.6, 0.1, 0.15), rough=0.15), name="Vase")


def showroom(scene):
    """Bright gallery open at the front: a chrome sphere, a standing mirror slab, a gold ring (sharp reflections),
    a brushed-steel block and a copper cone (rough reflections), a lacquered cylinder; striped, brick and checker
    walls for them to reflect."""
    sky(scene, color=(0.5, 0.5, 0.52), strength=0.5)
    _room(-4.0, 4.0, -4.0, 3.0, 3.5,
          {"back": material("Stripes", (0.85, 0.82, 0.75), rough=0.8, tex=("wave", 2.5, (0.12, 0.15, 0.3), 0.0)),
           "left": material("RedBrick", (0.6, 0.2, 0.1), rough=0.85, tex=("brick", 3.0, (0.85, 0.8, 0.7))),
           "right": material("GreenChecker", (0.9, 0.9, 0.85), rough=0.8, tex=("checker", 3.0, (0.1, 0.3, 0.15)))},
          material("Concrete", (0.45, 0.45, 0.43), rough=0.45, tex=("noise", 3.0, (0.6, 0.6, 0.58), 6.0)),
          material("White", (0.85, 0.85, 0.85), rough=0.9), open_side="front")
    for x, e in ((-1.2, 130.0), (1.5, 130.0)):
        light("AREA", (x, 0.3, 3.4), e, (0, 0, -1), size=1.2, color=(0.95, 0.97, 1.0), name="Ceiling")
    plinth = material("Plinth", (0.8, 0.8, 0.78), rough=0.7)
    box((-2.0, 0.4, 0), (-1.2, 1.2, 0.5), plinth, "Plinth")
    sphere((-1.6, 0.8, 0.95), 0.45, material("Chrome", (0.95, 0.95, 0.95), rough=0.0, metal=1.0), "Chrome")
    box((1.4, 0.6, 0), (2.2, 1.4, 0.8), material("BrushedSteel", (0.75, 0.75, 0.77), rough=0.35, metal=1.0),
        "SteelBlock")
    torus((0.2, 1.8, 0.6), 0.45, 0.1, material("Gold", (1.0, 0.78, 0.35), rough=0.1, metal=1.0),
          rotation=(math.radians(90), 0, 0), name="GoldRing")
    cylinder((0.0, 0.2, 0.35), 0.3, 0.7, material("RedLacquer", (0.55, 0.03, 0.04), rough=0.03, specular=0.8),
             name="Lacquer")
    box((2.3, -0.9, 0), (2.9, -0.3, 0.4), plinth, "Plinth2")
    cone((2.6, -0.6, 0.75), 0.25, 0.0, 0.7, material("RoughCopper", (0.95, 0.62, 0.5), rough=0.5, metal=1.0),
         "Copper")
    mirror = box((-0.9, 2.6, 0), (0.9, 2.7, 2.2), material("MirrorSlab", (0.95, 0.95, 0.95), rough=0.0, metal=1.0),
                 "Mirror")
    mirror.rotation_euler = (0, 0, math.radians(-30))   # turned to reflect the brick wall
    sphere((-0.6, -0.5, 0.2), 0.2, material("BlackGloss", (0.01, 0.01, 0.01), rough=0.0, specular=0.5), "Black")


def library(scene):
    """Study open at the front (a flat warm sky) with a ceiling lamp: a bookshelf of ~300 narrow book spines,
    brick at 3/m on a wall and 12/m on a fireplace, wood grain (wave), a voronoi rug, a checker armchair at
    30/m (about 1 px per cell) and a checker table runner at 12/m (2-3 px per cell), a magic-texture globe."""
    sky(scene, color=(0.9, 0.85, 0.75), strength=0.6)
    _room(-3.0, 3.0, -2.5, 2.5, 3.0,
          {"back": material("Plaster", (0.8, 0.77, 0.7), rough=0.9),
           "left": material("LargeBrick", (0.55, 0.25, 0.15), rough=0.85, tex=("brick", 3.0, (0.75, 0.7, 0.6))),
           "right": material("Stone", (0.5, 0.48, 0.44), rough=0.85, tex=("voronoi", 5.0, (0.72, 0.7, 0.65)))},
          material("Boards", (0.35, 0.2, 0.1), rough=0.4, tex=("wave", 2.5, (0.55, 0.35, 0.18), 3.0)),
          material("Ceiling", (0.85, 0.84, 0.8), rough=0.95), open_side="front")
    light("AREA", (0.0, 0.3, 2.95), 200.0, (0, 0, -1), size=1.0, color=(1.0, 0.88, 0.7), name="CeilingLamp")
    box((-3.0, -0.5, 0), (-2.6, 1.0, 1.2), material("SmallBrick", (0.4, 0.4, 0.42), rough=0.85,
                                                    tex=("brick", 12.0, (0.7, 0.68, 0.6))), "Fireplace")
    box((-2.62, -0.1, 0.1), (-2.58, 0.6, 0.7), material("Soot", (0.02, 0.02, 0.02), rough=0.9), "Firebox")
    shelf = material("ShelfWood", (0.3, 0.16, 0.07), rough=0.5, tex=("wave", 10.0, (0.5, 0.3, 0.14), 6.0))
    for x in (-2.2, 2.15):
        box((x, 2.1, 0), (x + 0.05, 2.5, 2.6), shelf, "ShelfSide")
    for z in (0.0, 0.6, 1.2, 1.8, 2.4):
        box((-2.15, 2.1, z), (2.15, 2.5, z + 0.03), shelf, "Shelf")
    rng = random.Random(7)
    palette = [material(f"Book{i}", c, rough=r, tex=t) for i, (c, r, t) in enumerate([
        ((0.5, 0.08, 0.06), 0.6, None), ((0.08, 0.18, 0.4), 0.5, None), ((0.1, 0.3, 0.12), 0.7, None),
        ((0.75, 0.65, 0.45), 0.8, None), ((0.2, 0.1, 0.05), 0.4, ("magic", 40.0, (0.6, 0.45, 0.2))),
        ((0.6, 0.55, 0.2), 0.5, ("noise", 60.0, (0.3, 0.25, 0.08), 2.0)), ((0.85, 0.82, 0.78), 0.9, None),
        ((0.05, 0.05, 0.06), 0.3, None)])]
    for z in (0.03, 0.63, 1.23, 1.83):
        x = -2.13
        while True:
            w = rng.uniform(0.03, 0.07)
            if x + w > 2.13:
                break
            if rng.random() > 0.05:
                h = rng.uniform(0.3, 0.52)
                y = 2.15 + rng.uniform(0.0, 0.05)
                box((x, y, z), (x + w - 0.003, 2.45, z + h), rng.choice(palette), "Book")
            x += w
    box((-1.5, -1.2, 0), (1.5, 1.0, 0.01), material("Rug", (0.25, 0.1, 0.1), rough=1.0,
                                                    tex=("voronoi", 8.0, (0.7, 0.55, 0.35))), "Rug")
    oak = material("Oak", (0.45, 0.3, 0.15), rough=0.35, tex=("wave", 6.0, (0.6, 0.42, 0.22), 8.0))
    box((-0.6, -0.3, 0.72), (0.9, 0.5, 0.76), oak, "TableTop")
    for x in (-0.55, 0.8):
        for y in (-0.25, 0.4):
            box((x, y, 0), (x + 0.05, y + 0.05, 0.72), oak, "TableLeg")
    box((-0.5, -0.1, 0.76), (0.8, 0.3, 0.765), material("Runner", (0.85, 0.82, 0.7), rough=0.9,
                                                        tex=("checker", 12.0, (0.2, 0.08, 0.08))), "Runner")
    sphere((0.5, 0.2, 0.95), 0.18, material("Globe", (0.1, 0.25, 0.45), rough=0.3,
                                            tex=("magic", 6.0, (0.75, 0.65, 0.35))), "Globe")
    chair = material("Tartan", (0.7, 0.65, 0.5), rough=0.95, tex=("checker", 30.0, (0.15, 0.2, 0.3)))
    box((-2.2, -1.4, 0), (-1.4, -0.6, 0.45), chair, "ChairSeat")
    box((-1.55, -1.4, 0.45), (-1.4, -0.6, 1.0), chair, "ChairBack")


def rails(scene):
    """A high balcony against a bright overcast sky: 2 cm balusters every 11 cm under a 5 cm handrail, a trellis
    of 1.5 cm bars 10 cm apart, a mast with crossbars, a washing line and power lines (2-2.4 cm), a bistro
    table on one thin leg; white buildings far off. A weak sun casts the bars' shadows on the slab."""
    sky(scene, color=(0.9, 0.93, 1.0), strength=1.0)
    light("SUN", (0, 0, 10), 1.5, sun_direction(50.0, 200.0), angle=1.0, color=(1.0, 0.96, 0.9), name="Sun")
    box((-3.0, -2.5, -0.25), (3.0, 1.4, 0), material("Slab", (0.55, 0.55, 0.52), rough=0.85,
                                                     tex=("noise", 12.0, (0.7, 0.7, 0.66), 4.0)), "Slab")
    plane((0, 10, -8), 80, material("Far", (0.3, 0.35, 0.28), rough=0.9, tex=("noise", 1.5, (0.5, 0.5, 0.45))),
          "Ground")
    box((-15, 20, -8), (-5, 26, 10), material("WhiteBlock", (0.9, 0.9, 0.88), rough=0.8), "Building")
    box((4, 18, -8), (12, 24, 4), material("GreyBlock", (0.7, 0.7, 0.72), rough=0.8), "Building2")
    iron = material("Iron", (0.03, 0.03, 0.03), rough=0.4, metal=0.5)
    rod((-3.0, 1.3, 1.05), (3.0, 1.3, 1.05), 0.025, iron, "Handrail", vertices=16)
    rod((-3.0, 1.3, 0.1), (3.0, 1.3, 0.1), 0.015, iron, "BottomRail")
    for i in range(54):
        x = -2.95 + 0.11 * i
        rod((x, 1.3, 0.0), (x, 1.3, 1.05), 0.01, iron, "Baluster", vertices=8)
    rod((-2.95, -2.5, 1.05), (-2.95, 1.3, 1.05), 0.025, iron, "SideRail", vertices=16)
    for i in range(26):
        y = -2.45 + 0.145 * i
        rod((-2.95, y, 0.0), (-2.95, y, 1.05), 0.01, iron, "SideBaluster", vertices=8)
    green = material("TrellisGreen", (0.1, 0.25, 0.12), rough=0.6)
    for i in range(15):
        x = -2.2 + 0.1 * i
        box((x, 0.19, 0.0), (x + 0.015, 0.205, 2.0), green, "TrellisV")
    for i in range(21):
        z = 0.1 * i
        box((-2.2, 0.185, z), (-0.8, 0.21, z + 0.015), green, "TrellisH")
    steel = material("Steel", (0.6, 0.6, 0.62), rough=0.3, metal=1.0)
    rod((1.2, 0.6, 0.0), (1.2, 0.6, 3.2), 0.02, steel, "Mast")
    for z in (2.3, 2.5):
        rod((0.7, 0.6, z), (1.7, 0.6, z), 0.01, steel, "Crossbar")
    rod((1.2, 0.6, 2.6), (0.2, 1.3, 1.05), 0.01, steel, "GuyWire", vertices=8)
    rod((-2.9, -0.5, 1.9), (2.9, 0.5, 2.1), 0.01, material("Line", (0.9, 0.9, 0.85), rough=0.7), "WashingLine")
    cable = material("Cable", (0.05, 0.05, 0.05), rough=0.5)
    rod((-8, 4.5, 3.4), (8, 3.5, 2.4), 0.012, cable, "PowerLine")
    rod((-8, 5.0, 3.8), (8, 4.0, 2.9), 0.012, cable, "PowerLine2")
    cylinder((1.7, -0.6, 0.72), 0.3, 0.03, material("TableTop", (0.8, 0.3, 0.1), rough=0.4), name="BistroTop")
    rod((1.7, -0.6, 0.0), (1.7, -0.6, 0.71), 0.015, iron, "BistroLeg")


def atelier(scene):
    """Painter's studio: sun and sky through an open window in the side wall; the sun patch falls on an
    orange-red rug that bleeds colour onto the white walls; clear and frosted glass on a low sunlit table (caustics),
    an easel with a canvas, a plaster bust."""
    elevation, azimuth = 30.0, 15.0
    sky(scene, elevation=elevation, azimuth=azimuth, strength=0.7)
    light("SUN", (0, 0, 10), 6.0, sun_direction(elevation, azimuth), angle=0.55, color=(1.0, 0.94, 0.84),
          name="Sun")
    white = material("WhiteWall", (0.82, 0.82, 0.8), rough=0.95)
    x0, x1, y0, y1, H, t = -2.5, 2.5, -2.2, 2.2, 3.0, 0.15
    _room(x0, x1, y0, y1, H, white, material("Screed", (0.6, 0.58, 0.55), rough=0.8,
                                             tex=("noise", 1.5, (0.5, 0.48, 0.45), 3.0)),
          material("Ceiling", (0.85, 0.85, 0.85), rough=0.95), open_side="right")
    wy0, wy1, wz0, wz1 = -1.2, 0.6, 0.7, 2.4   # window opening in the right wall
    box((x1, y0 - t, 0), (x1 + t, wy0, H), white, "RightWallA")
    box((x1, wy1, 0), (x1 + t, y1 + t, H), white, "RightWallB")
    box((x1, wy0, 0), (x1 + t, wy1, wz0), white, "RightWallLow")
    box((x1, wy0, wz1), (x1 + t, wy1, H), white, "RightWallHigh")
    plane((0, 0, -0.16), 60, material("Yard", (0.25, 0.3, 0.2), rough=0.9), "Outside")
    box((-1.3, -1.6, 0), (1.0, 0.0, 0.01), material("RedRug", (0.8, 0.15, 0.03), rough=1.0), "Rug")
    wood = material("Pine", (0.55, 0.4, 0.25), rough=0.5)
    # a low table standing in the sun patch on the rug, glass on it in direct sun (caustics on the top and rug)
    box((0.0, -1.0, 0.46), (0.9, -0.2, 0.5), wood, "TableTop")
    for x in (0.02, 0.85):
        for y in (-0.98, -0.25):
            box((x, y, 0.01), (x + 0.03, y + 0.03, 0.46), wood, "TableLeg")
    glass = material("Glass", (1, 1, 1), rough=0.0, transmission=1.0, ior=1.5)
    sphere((0.25, -0.7, 0.62), 0.12, glass, "Paperweight")
    cylinder((0.6, -0.45, 0.66), 0.08, 0.32, glass, name="Carafe")
    box((0.55, -0.9, 0.5), (0.73, -0.72, 0.68), material("Frosted", (0.9, 0.95, 1.0), rough=0.25, transmission=1.0,
                                                        ior=1.5), "FrostedBlock")
    for a in (0, 120, 240):
        r = math.radians(a)
        x, y = -1.3 + 0.3 * math.cos(r), -1.5 + 0.3 * math.sin(r)
        box((x, y, 0), (x + 0.03, y + 0.03, 1.6), wood, "EaselLeg")
    box((-1.75, -1.55, 0.8), (-0.85, -1.5, 1.55), material("Canvas", (0.85, 0.8, 0.7), rough=0.9,
                                                          tex=("magic", 1.5, (0.15, 0.3, 0.6))), "Canvas")
    cylinder((1.9, 1.6, 0.5), 0.18, 1.0, white, name="Pedestal")
    sphere((1.9, 1.6, 1.2), 0.2, material("Plaster", (0.9, 0.88, 0.84), rough=0.9), "Bust")
    box((-2.5, -2.0, 1.4), (-2.2, -0.4, 1.43), wood, "WallShelf")
    for i, c in enumerate(((0.2, 0.5, 0.3), (0.7, 0.6, 0.1), (0.3, 0.2, 0.6))):
        cylinder((-2.35, -1.7 + 0.45 * i, 1.53), 0.06, 0.2, material(f"Jar{i}", c, rough=0.3), name="Jar")


def tune_a(scene):
    """(tuning) Small bathroom lit by sun and sky through a window above the bath: tiled walls and floor
    (checker), a glossy bath, a wall mirror above a basin, a towel on a chrome rail, a faint ceiling lamp."""
    elevation, azimuth = 45.0, 120.0
    sky(scene, elevation=elevation, azimuth=azimuth, strength=0.5)
    light("SUN", (0, 0, 10), 3.0, sun_direction(elevation, azimuth), angle=0.55, color=(1.0, 0.95, 0.86),
          name="Sun")
    tiles = material("WallTiles", (0.75, 0.78, 0.76), rough=0.3, tex=("checker", 7.0, (0.45, 0.65, 0.62)))
    x0, x1, y0, y1, H, t = -1.6, 1.6, -1.4, 1.4, 2.5, 0.15
    _room(x0, x1, y0, y1, H, tiles, material("FloorTiles", (0.1, 0.1, 0.12), rough=0.4,
                                             tex=("checker", 12.0, (0.8, 0.8, 0.78))),
          material("Ceiling", (0.9, 0.9, 0.9), rough=0.95), open_side="back")
    wx0, wx1, wz0, wz1 = -0.6, 0.6, 1.2, 2.1
    box((x0 - t, y1, 0), (wx0, y1 + t, H), tiles, "BackA")
    box((wx1, y1, 0), (x1 + t, y1 + t, H), tiles, "BackB")
    box((wx0, y1, 0), (wx1, y1 + t, wz0), tiles, "BackLow")
    box((wx0, y1, wz1), (wx1, y1 + t, H), tiles, "BackHigh")
    plane((0, 0, -0.16), 60, material("Outside", (0.3, 0.32, 0.25), rough=0.9), "Outside")
    enamel = material("Enamel", (0.9, 0.9, 0.88), rough=0.05, specular=0.6)
    box((-1.6, 0.6, 0), (0.2, 1.4, 0.55), enamel, "Bath")
    box((1.1, -0.6, 0.75), (1.6, 0.2, 0.85), enamel, "Basin")
    box((1.58, -0.55, 1.1), (1.6, 0.15, 1.9), material("Mirror", (0.95, 0.95, 0.95), rough=0.0, metal=1.0),
        "Mirror")
    chrome = material("Chrome", (0.9, 0.9, 0.9), rough=0.05, metal=1.0)
    rod((-1.55, -1.0, 1.2), (-1.55, 0.2, 1.2), 0.012, chrome, "TowelRail")
    box((-1.58, -0.8, 0.7), (-1.52, 0.0, 1.21), material("Towel", (0.8, 0.4, 0.15), rough=1.0,
                                                         tex=("noise", 40.0, (0.95, 0.55, 0.25), 3.0)), "Towel")
    sphere((0.4, 1.3, 1.3), 0.12, material("Plant", (0.1, 0.3, 0.08), rough=0.8,
                                           tex=("voronoi", 25.0, (0.2, 0.45, 0.12))), "Plant")
    cylinder((0.4, 1.3, 1.16), 0.08, 0.12, material("Pot", (0.3, 0.3, 0.32), rough=0.6), name="Pot")
    light("AREA", (0.0, -0.5, 2.48), 40.0, (0, 0, -1), size=0.3, color=(1.0, 0.9, 0.8), name="CeilingLamp")


def tune_b(scene):
    """(tuning) Garden at midday: lawn, a dark glossy pond in a stone rim, stepping stones, a hedge, a
    wooden shed, a stone birdbath, a bed of flower heads, a glossy blue ball."""
    elevation, azimuth = 55.0, 160.0
    sky(scene, elevation=elevation, azimuth=azimuth, strength=0.3)
    light("SUN", (0, 0, 10), 2.5, sun_direction(elevation, azimuth), angle=0.55, color=(1.0, 0.96, 0.9),
          name="Sun")
    plane((0, 0, 0), 60, material("Lawn", (0.07, 0.18, 0.04), rough=0.9, tex=("noise", 30.0, (0.15, 0.3, 0.07), 4.0)),
          "Lawn")
    cylinder((1.0, 2.0, 0.02), 1.3, 0.04, material("Water", (0.02, 0.04, 0.05), rough=0.02, specular=0.6),
             name="Pond")
    stone = material("PaleStone", (0.55, 0.53, 0.5), rough=0.8, tex=("voronoi", 10.0, (0.75, 0.73, 0.68)))
    torus((1.0, 2.0, 0.03), 1.3, 0.08, stone, name="Rim")
    for i in range(5):
        cylinder((-1.5 + 0.7 * i, -1.5 + 0.5 * math.sin(i), 0.02), 0.25, 0.04, stone, name="SteppingStone")
    box((-5.0, 4.5, 0), (5.0, 5.3, 1.4), material("Hedge", (0.04, 0.12, 0.03), rough=0.9,
                                                  tex=("voronoi", 20.0, (0.1, 0.26, 0.06))), "Hedge")
    box((-4.5, 1.5, 0), (-2.5, 3.5, 2.2), material("ShedWood", (0.35, 0.22, 0.12), rough=0.8,
                                                   tex=("noise", 4.0, (0.5, 0.34, 0.2), 8.0)), "Shed")
    cylinder((-0.8, 0.6, 0.4), 0.08, 0.8, stone, name="BirdbathStem")
    cylinder((-0.8, 0.6, 0.82), 0.3, 0.04, stone, name="BirdbathDish")
    torus((-0.8, 0.6, 0.85), 0.27, 0.04, stone, name="BirdbathRim")
    rng = random.Random(11)
    colours = [(0.7, 0.05, 0.1), (0.9, 0.75, 0.05), (0.45, 0.1, 0.6), (0.9, 0.9, 0.85)]
    petals = [material(f"Flower{i}", c, rough=0.6) for i, c in enumerate(colours)]
    for i in range(12):
        x = -3.0 + 0.5 * i
        cylinder((x, 4.0, 0.2), 0.01, 0.4, material("StemGreen", (0.1, 0.3, 0.05), rough=0.7), name="FlowerStem",
                 vertices=8)
        sphere((x, 4.0, 0.42 + 0.1 * rng.random()), rng.uniform(0.07, 0.12), rng.choice(petals), "Flower")
    sphere((2.0, -0.5, 0.2), 0.2, material("BlueBall", (0.05, 0.15, 0.6), rough=0.1, specular=0.6), "Ball")


SCENES = {
    "porch": (porch, [((2.2, -3.4, 1.1), (-0.4, 2.0, 1.8), 20.0)],
              "house front under a low sun and visible sky: board siding, decking, posts and porch roof casting "
              "hard shadows, glossy window panes"),
    "lounge": (lounge, [((2.1, -1.9, 1.45), (-0.9, 1.4, 0.8), 22.0)],
               "living room at night: square ceiling lamp, table-lamp bulb in view under its shade, sconce bulb "
               "hidden behind its plate"),
    "showroom": (showroom, [((0.8, -3.6, 1.6), (0.0, 1.2, 0.7), 24.0)],
                 "bright gallery: chrome sphere, mirror slab, gold ring, brushed steel, rough copper, lacquer; "
                 "striped, brick and checker walls reflected"),
    "library": (library, [((1.2, -2.3, 1.6), (-0.6, 2.0, 1.0), 24.0)],
                "study: bookshelf of narrow spines, brick at two scales, wood grain, voronoi rug, fine checker "
                "chair and runner"),
    "rails": (rails, [((0.4, -2.1, 1.55), (-0.2, 3.0, 1.2), 26.0)],
              "balcony against a bright sky: 2 cm balusters, trellis grid, mast, washing line, power lines"),
    "atelier": (atelier, [((-1.8, 1.6, 1.5), (1.4, -0.7, 0.8), 24.0)],
                "studio with a sunlit window: red rug bleeding onto white walls, glass on a sunlit table, easel"),
    "tune_a": (tune_a, [((0.9, -1.2, 1.6), (-0.6, 1.2, 0.8), 18.0)],
               "(tuning) bathroom: window over the bath, checker tiles, mirror, glossy enamel, towel"),
    "tune_b": (tune_b, [((2.5, -3.5, 1.5), (-0.5, 2.5, 0.6), 26.0)],
               "(tuning) garden: lawn, glossy pond, stepping stones, hedge, shed, birdbath, flowers"),
}
