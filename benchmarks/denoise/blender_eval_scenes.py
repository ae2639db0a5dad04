"""The four Blender evaluation scenes (see README.md beside this file for what each one tests).

Each entry of :data:`SCENES`: name -> (build(scene), three views (origin, target, lens mm), description).
World frame: z up, metres.
"""
from blender_kit import box, cone, cylinder, light, material, plane, sky, sphere, sun_direction, torus

WALL = 0.2


def _shell(W, D, H, wall, floor, ceiling, window=None):
    """A room whose inner faces are x = +-W/2, y = +-D/2, z = 0 and H, walls WALL thick outward.
    ``window`` = (x0, x1, z0, z1): an opening in the back wall (y = +D/2), built as four wall pieces."""
    w, d = W / 2, D / 2
    box((-w - WALL, -d - WALL, -WALL), (w + WALL, d + WALL, 0.0), floor, "Floor")
    box((-w - WALL, -d - WALL, H), (w + WALL, d + WALL, H + WALL), ceiling, "Ceiling")
    box((-w - WALL, -d - WALL, 0), (-w, d + WALL, H), wall, "WallLeft")
    box((w, -d - WALL, 0), (w + WALL, d + WALL, H), wall, "WallRight")
    box((-w, -d - WALL, 0), (w, -d, H), wall, "WallFront")
    if window is None:
        box((-w, d, 0), (w, d + WALL, H), wall, "WallBack")
        return
    x0, x1, z0, z1 = window
    box((-w, d, 0), (x0, d + WALL, H), wall, "WallBackL")
    box((x1, d, 0), (w, d + WALL, H), wall, "WallBackR")
    box((x0, d, 0), (x1, d + WALL, z0), wall, "WallBackLow")
    box((x0, d, z1), (x1, d + WALL, H), wall, "WallBackHigh")


def _table(x, y, top_z, sx, sy, top_mat, leg_mat):
    box((x - sx, y - sy, top_z - 0.04), (x + sx, y + sy, top_z), top_mat, "TableTop")
    for dx in (-1, 1):
        for dy in (-1, 1):
            cx, cy = x + dx * (sx - 0.06), y + dy * (sy - 0.06)
            box((cx - 0.025, cy - 0.025, 0), (cx + 0.025, cy + 0.025, top_z - 0.04), leg_mat, "Leg")


def interior(scene):
    """(a) Sky-lit interior: sun and sky through a window opening, a small lamp in view, an area light hidden
    behind a free-standing panel, lighting the ceiling."""
    elevation, azimuth = 32.0, 100.0
    sky(scene, elevation=elevation, azimuth=azimuth, strength=0.35)
    light("SUN", (0, 6, 6), 4.0, sun_direction(elevation, azimuth), angle=0.55,
          color=(1.0, 0.93, 0.82), name="Sun")
    plaster = material("Plaster", (0.78, 0.76, 0.72), rough=0.9)
    ceiling = material("Ceiling", (0.85, 0.85, 0.85), rough=0.95)
    wood = material("Wood", (0.36, 0.2, 0.09), rough=0.35, tex=("wave", 3.0, (0.55, 0.34, 0.16), 6.0))
    _shell(6.0, 5.0, 3.0, plaster, wood, ceiling, window=(-1.1, 1.1, 0.9, 2.3))
    plane((0, 14, -0.01), 30, material("Grass", (0.08, 0.2, 0.04), rough=0.9,
                                       tex=("noise", 30.0, (0.2, 0.35, 0.08), 3.0)), "Ground")
    box((-6, 9, 0), (6, 9.4, 1.6), material("Hedge", (0.05, 0.12, 0.03), rough=0.8,
                                            tex=("voronoi", 18.0, (0.12, 0.25, 0.05))), "Hedge")
    rug = material("Rug", (0.5, 0.08, 0.06), rough=1.0, tex=("checker", 9.0, (0.85, 0.75, 0.5)))
    box((-1.4, -1.0, 0), (1.2, 1.2, 0.012), rug, "Rug")
    _table(0.0, 0.3, 0.75, 0.7, 0.45, material("TableWood", (0.25, 0.12, 0.05), rough=0.25,
                                                 tex=("wave", 5.0, (0.45, 0.25, 0.1), 10.0)),
           material("Steel", (0.7, 0.7, 0.72), rough=0.3, metal=1.0))
    # the small lamp in view: a stem and a bright bulb on the table, a firefly source for glossy surfaces
    cylinder((0.35, 0.45, 0.88), 0.012, 0.22, material("Stem", (0.05, 0.05, 0.05), rough=0.4))
    sphere((0.35, 0.45, 1.02), 0.045, material("Bulb", (1, 1, 1), emit=60.0, emit_color=(1.0, 0.8, 0.55)), "Bulb")
    sphere((-0.3, 0.2, 0.87), 0.12, material("Vase", (0.05, 0.25, 0.45), rough=0.08, specular=0.6), "Vase")
    box((-2.9, -1.2, 0), (-2.3, 1.4, 0.45), material("Sofa", (0.3, 0.32, 0.4), rough=0.9,
                                                    tex=("checker", 24.0, (0.45, 0.47, 0.55))), "Sofa")
    box((-2.9, -1.2, 0.45), (-2.75, 1.4, 0.9), material("SofaBack", (0.3, 0.32, 0.4), rough=0.9), "SofaBack")
    # the hidden light: a panel stands 0.5 m in front of the right wall; an area lamp behind it faces up
    box((2.35, -1.6, 0), (2.4, 0.9, 2.2), material("Panel", (0.62, 0.6, 0.55), rough=0.7,
                                                   tex=("brick", 6.0, (0.4, 0.38, 0.35))), "Panel")
    light("AREA", (2.7, -0.35, 2.0), 90.0, (0, 0, 1), size=0.4, color=(1.0, 0.85, 0.65), name="Hidden")
    box((1.2, 1.9, 0), (2.4, 2.45, 1.9), material("Shelf", (0.8, 0.78, 0.7), rough=0.5,
                                                  tex=("noise", 4.0, (0.6, 0.55, 0.45), 2.0)), "Shelf")
    sphere((1.6, 2.1, 2.05), 0.15, material("Globe", (0.9, 0.9, 0.9), rough=0.02, metal=1.0), "Chrome")


def yard(scene):
    """(b) Outdoor yard under sun and sky: a chrome sphere, textures at scales from 2 cm to 2 m, a fence
    whose slats cast striped shadows."""
    elevation, azimuth = 38.0, 30.0
    sky(scene, elevation=elevation, azimuth=azimuth, strength=0.5)
    light("SUN", (0, 0, 10), 3.5, sun_direction(elevation, azimuth), angle=0.55, color=(1.0, 0.95, 0.88),
          name="Sun")
    plane((0, 0, 0), 80, material("Grass", (0.06, 0.16, 0.03), rough=0.9,
                                  tex=("noise", 45.0, (0.22, 0.36, 0.09), 3.0)), "Ground")
    box((-1.5, -8, 0), (1.5, 8, 0.015), material("Paving", (0.35, 0.33, 0.3), rough=0.75,
                                                 tex=("voronoi", 2.5, (0.7, 0.66, 0.6))), "Path")
    box((-6, 4, 0), (6, 4.3, 1.8), material("Brick", (0.45, 0.14, 0.08), rough=0.85,
                                            tex=("brick", 3.0, (0.7, 0.68, 0.62))), "Wall")
    slat = material("Slat", (0.55, 0.45, 0.32), rough=0.7, tex=("wave", 12.0, (0.38, 0.28, 0.18), 8.0))
    for k in range(14):
        x = -5.8 + 0.25 * k
        box((x, -1.0, 0), (x + 0.12, -0.95, 1.3), slat, "Slat")
    box((-5.8, -1.02, 0.95), (-2.3, -0.93, 1.05), slat, "Rail")
    sphere((1.9, 0.4, 0.6), 0.6, material("Chrome", (0.95, 0.95, 0.95), rough=0.01, metal=1.0), "Chrome")
    box((-1.0, 1.2, 0), (0.0, 2.2, 1.0), material("Checker", (0.9, 0.9, 0.88), rough=0.5,
                                                 tex=("checker", 8.0, (0.08, 0.1, 0.35))), "Crate")
    cylinder((3.6, 2.3, 0.5), 0.35, 1.0, material("Barrel", (0.15, 0.3, 0.5), rough=0.3, specular=0.7,
                                                  tex=("magic", 3.0, (0.6, 0.2, 0.1))), name="Barrel")
    cone((-2.8, 2.0, 0.9), 0.7, 0.0, 1.8, material("Tree", (0.04, 0.14, 0.03), rough=0.9,
                                                   tex=("voronoi", 14.0, (0.1, 0.3, 0.06))), "Tree")
    cylinder((-2.8, 2.0, 0.1), 0.09, 0.2, material("Trunk", (0.2, 0.12, 0.06), rough=0.9))
    torus((0.6, -2.2, 0.12), 0.45, 0.12, material("Tyre", (0.03, 0.03, 0.03), rough=0.6), name="Tyre")
    sphere((-0.4, -2.6, 0.25), 0.25, material("Ball", (0.9, 0.75, 0.1), rough=0.25,
                                              tex=("checker", 22.0, (0.1, 0.1, 0.1))), "Ball")


def studio(scene):
    """(c) Dark studio: a bright emissive strip light in view, glossy, metallic and glass spheres on a
    semi-glossy floor that reflects the strip; almost no other light."""
    sky(scene, color=(0.01, 0.012, 0.015), strength=1.0)
    backdrop = material("Backdrop", (0.06, 0.06, 0.065), rough=0.8)
    box((-6, -6, -0.1), (6, 6, 0.0), material("StudioFloor", (0.08, 0.08, 0.09), rough=0.22,
                                              tex=("checker", 2.0, (0.2, 0.2, 0.22))), "Floor")
    box((-6, 3, 0), (6, 3.1, 4), backdrop, "Backdrop")
    strip = material("Strip", (1, 1, 1), emit=25.0, emit_color=(0.9, 0.95, 1.0))
    box((-1.8, 2.6, 2.2), (1.8, 2.7, 2.27), strip, "Strip")
    box((-3.2, 0.5, 0.05), (-3.15, 2.0, 1.6), material("StripWarm", (1, 1, 1), emit=12.0,
                                                       emit_color=(1.0, 0.6, 0.3)), "StripSide")
    sphere((-1.2, 0.8, 0.5), 0.5, material("RedGloss", (0.6, 0.04, 0.03), rough=0.12, specular=0.8), "Red")
    sphere((0.1, 1.4, 0.55), 0.55, material("Gold", (1.0, 0.76, 0.33), rough=0.25, metal=1.0), "Gold")
    sphere((1.3, 0.6, 0.4), 0.4, material("Mirror", (0.95, 0.95, 0.95), rough=0.0, metal=1.0), "Mirror")
    sphere((0.4, -0.2, 0.25), 0.25, material("Glass", (1, 1, 1), rough=0.0, transmission=1.0, ior=1.5), "Glass")
    torus((-0.4, -0.3, 0.08), 0.25, 0.08, material("Copper", (0.95, 0.64, 0.54), rough=0.4, metal=1.0),
          name="Ring")
    cylinder((2.3, 1.8, 0.6), 0.3, 1.2, material("BluePlastic", (0.05, 0.12, 0.5), rough=0.05, specular=0.5,
                                                 tex=("noise", 9.0, (0.1, 0.25, 0.7), 3.0)), name="Pillar")


def bounce(scene):
    """(d) A room lit almost only indirectly: an area lamp behind a partition faces a wall; everything the
    camera sees is lit by light that bounced at least once. Textured objects at several scales."""
    sky(scene, color=(0.0, 0.0, 0.0), strength=0.0)
    wall = material("Wall", (0.8, 0.78, 0.74), rough=0.9)
    _shell(5.0, 4.0, 2.7, wall, material("Tiles", (0.55, 0.5, 0.45), rough=0.6,
                                         tex=("checker", 3.0, (0.25, 0.22, 0.2))),
           material("Ceiling", (0.82, 0.82, 0.82), rough=0.95))
    # partition from the front wall towards the back, 1.9 m high; the lamp sits behind it near the left wall
    box((-1.6, -2.0, 0), (-1.5, 0.9, 1.9), material("Partition", (0.7, 0.68, 0.62), rough=0.8,
                                                     tex=("noise", 2.0, (0.55, 0.52, 0.45), 4.0)), "Partition")
    # a wall-wash: a wide lamp 0.6 m from the left wall lights a patch about 2.5 m across, most of it behind
    # the partition; a narrow beam would make a small, very bright patch that even 4096 spp cannot resolve
    light("AREA", (-1.9, -0.2, 1.3), 200.0, (-1, 0, 0.1), size=1.2, color=(1.0, 0.9, 0.75), name="Hidden")
    box((0.3, 1.2, 0), (1.3, 2.0, 0.8), material("BrickBlock", (0.5, 0.18, 0.1), rough=0.85,
                                                 tex=("brick", 9.0, (0.75, 0.72, 0.66))), "Block")
    sphere((1.9, 0.2, 0.45), 0.45, material("Voronoi", (0.1, 0.3, 0.4), rough=0.5,
                                            tex=("voronoi", 12.0, (0.85, 0.8, 0.6))), "Pebbles")
    cylinder((-0.6, 1.3, 0.6), 0.3, 1.2, material("Marble", (0.85, 0.85, 0.82), rough=0.15, specular=0.6,
                                                  tex=("wave", 4.0, (0.3, 0.3, 0.32), 12.0)), name="Column")
    box((0.0, -0.9, 0), (1.2, -0.3, 0.5), material("Fabric", (0.2, 0.35, 0.2), rough=1.0,
                                                   tex=("checker", 40.0, (0.7, 0.65, 0.3))), "Ottoman")
    sphere((0.6, -0.6, 0.7), 0.2, material("Satin", (0.8, 0.8, 0.82), rough=0.2, metal=1.0), "Satin")
    cone((2.0, 1.5, 0.35), 0.3, 0.05, 0.7, material("Clay", (0.6, 0.3, 0.15), rough=0.7,
                                                    tex=("magic", 6.0, (0.3, 0.12, 0.05))), "Pot")


SCENES = {
    "interior": (interior, [((-2.5, -2.2, 1.5), (0.3, 1.6, 1.1), 22.0),
                            ((2.1, -2.3, 1.3), (-0.6, 1.0, 0.9), 24.0),
                            ((-1.2, 2.2, 1.9), (0.8, -1.0, 0.9), 20.0)],
                 "sky-lit interior: window, sun patch, hidden area light behind a panel, small bright lamp in view"),
    "yard": (yard, [((5.5, -6.0, 1.7), (0.5, 0.8, 0.6), 30.0),
                    ((-4.5, -5.0, 1.2), (0.0, 1.0, 0.8), 26.0),
                    ((2.8, -1.6, 0.9), (1.9, 0.4, 0.6), 32.0)],
             "outdoor yard: sun + sky, chrome sphere, noise/voronoi/checker/brick/wave at many scales"),
    "studio": (studio, [((0.0, -4.0, 1.2), (0.0, 1.0, 0.6), 32.0),
                        ((-3.0, -2.8, 0.45), (0.2, 1.2, 0.8), 26.0),
                        ((2.5, -2.5, 2.6), (0.0, 0.8, 0.3), 30.0)],
               "dark studio: emissive strips in view, glossy/metal/glass spheres, strip reflected in the floor"),
    "bounce": (bounce, [((2.2, -1.8, 1.5), (-0.5, 1.0, 0.8), 22.0),
                        ((-1.2, 1.7, 1.6), (1.0, -1.0, 0.5), 22.0),
                        ((2.3, 1.6, 2.2), (-0.2, -0.8, 0.4), 20.0)],
               "indirect-lit room: lamp hidden behind a partition facing a wall; textured objects"),
}
