"""Building blocks for the Blender scenes of this folder: materials with world-space procedural textures,
boxes and other primitives, lights and a physical sky. Runs inside Blender (imports bpy)."""
import math

import bpy
from mathutils import Vector


def _link(tree, a, b):
    tree.links.new(a, b)


def material(name, color=(0.8, 0.8, 0.8), rough=0.5, metal=0.0, emit=0.0, emit_color=(1.0, 0.9, 0.75),
             tex=None, specular=0.5, transmission=0.0, ior=1.45):
    """A Principled BSDF. ``tex`` = (kind, scale, color2[, extra]) paints the base colour with a procedural
    texture in *world* coordinates (metres), so its scale means the same on every object whatever its size;
    kind is checker, noise, voronoi, wave, brick or magic."""
    m = bpy.data.materials.new(name)
    m.use_nodes = True
    nodes, tree = m.node_tree.nodes, m.node_tree
    bsdf = nodes["Principled BSDF"]
    bsdf.inputs["Base Color"].default_value = (*color, 1.0)
    bsdf.inputs["Roughness"].default_value = rough
    bsdf.inputs["Metallic"].default_value = metal
    bsdf.inputs["Specular"].default_value = specular
    bsdf.inputs["Transmission"].default_value = transmission
    bsdf.inputs["IOR"].default_value = ior
    if emit:
        bsdf.inputs["Emission"].default_value = (*emit_color, 1.0)
        bsdf.inputs["Emission Strength"].default_value = emit
    if tex:
        kind, scale, color2 = tex[:3]
        pos = nodes.new("ShaderNodeNewGeometry").outputs["Position"]
        node = nodes.new({"checker": "ShaderNodeTexChecker", "noise": "ShaderNodeTexNoise",
                          "voronoi": "ShaderNodeTexVoronoi", "wave": "ShaderNodeTexWave",
                          "brick": "ShaderNodeTexBrick", "magic": "ShaderNodeTexMagic"}[kind])
        _link(tree, pos, node.inputs["Vector"])
        node.inputs["Scale"].default_value = scale
        if kind == "noise":
            node.inputs["Detail"].default_value = tex[3] if len(tex) > 3 else 6.0
        if kind == "wave":
            node.inputs["Distortion"].default_value = tex[3] if len(tex) > 3 else 4.0
            node.inputs["Detail"].default_value = 3.0
        fac = node.outputs["Distance" if kind == "voronoi" else "Fac"]
        ramp = nodes.new("ShaderNodeValToRGB")
        lo, hi = ramp.color_ramp.elements
        lo.color, hi.color = (*color, 1.0), (*color2, 1.0)
        if kind in ("noise", "wave"):          # stretch the mid-range so the pattern is not a grey wash
            lo.position, hi.position = 0.35, 0.65
        if kind == "voronoi":
            lo.position, hi.position = 0.05, 0.6
        if kind == "checker":
            node.inputs["Color1"].default_value = (1, 1, 1, 1)
            node.inputs["Color2"].default_value = (0, 0, 0, 1)
        _link(tree, fac, ramp.inputs["Fac"])
        _link(tree, ramp.outputs["Color"], bsdf.inputs["Base Color"])
    return m


def _finish(obj, mat, smooth=False, name=None):
    if name:
        obj.name = name
    obj.data.materials.append(mat)
    if smooth:
        for p in obj.data.polygons:
            p.use_smooth = True
    return obj


def box(lo, hi, mat, name=None):
    """Axis-aligned box between corners ``lo`` and ``hi`` (metres)."""
    lo, hi = Vector(lo), Vector(hi)
    bpy.ops.mesh.primitive_cube_add(size=1.0, location=(lo + hi) / 2)
    obj = bpy.context.object
    obj.scale = hi - lo
    return _finish(obj, mat, name=name)


def sphere(center, radius, mat, name=None):
    bpy.ops.mesh.primitive_uv_sphere_add(radius=radius, location=center, segments=48, ring_count=24)
    return _finish(bpy.context.object, mat, smooth=True, name=name)


def cylinder(center, radius, depth, mat, rotation=(0, 0, 0), name=None, vertices=48):
    bpy.ops.mesh.primitive_cylinder_add(radius=radius, depth=depth, location=center, rotation=rotation,
                                        vertices=vertices)
    obj = bpy.context.object
    _finish(obj, mat, smooth=True, name=name)
    obj.data.use_auto_smooth = True       # flat caps, smooth sides
    obj.data.auto_smooth_angle = math.radians(40)
    return obj


def cone(center, r1, r2, depth, mat, name=None):
    bpy.ops.mesh.primitive_cone_add(radius1=r1, radius2=r2, depth=depth, location=center, vertices=48)
    obj = bpy.context.object
    _finish(obj, mat, smooth=True, name=name)
    obj.data.use_auto_smooth = True
    obj.data.auto_smooth_angle = math.radians(40)
    return obj


def torus(center, major, minor, mat, rotation=(0, 0, 0), name=None):
    bpy.ops.mesh.primitive_torus_add(location=center, rotation=rotation, major_radius=major, minor_radius=minor,
                                     major_segments=48, minor_segments=16)
    return _finish(bpy.context.object, mat, smooth=True, name=name)


def plane(center, size, mat, name=None):
    bpy.ops.mesh.primitive_plane_add(size=size, location=center)
    return _finish(bpy.context.object, mat, name=name)


def light(kind, location, energy, direction=(0, 0, -1), size=0.5, color=(1.0, 1.0, 1.0), spread=None,
          angle=None, name="Light"):
    """A Blender lamp aimed along ``direction``: SUN (energy in W/m^2), AREA, POINT or SPOT (watts)."""
    data = bpy.data.lights.new(name, kind)
    data.energy = energy
    data.color = color
    if kind == "AREA":
        data.size = size
        if spread is not None:
            data.spread = math.radians(spread)
    elif kind == "SUN":
        data.angle = math.radians(angle if angle is not None else 0.55)
    else:
        data.shadow_soft_size = size
    if kind == "SPOT" and spread is not None:
        data.spot_size = math.radians(spread)
    obj = bpy.data.objects.new(name, data)
    obj.location = location
    obj.rotation_mode = "QUATERNION"
    obj.rotation_quaternion = Vector(direction).normalized().to_track_quat("-Z", "Y")
    bpy.context.scene.collection.objects.link(obj)
    return obj


def sun_direction(elevation, azimuth):
    """Direction the sunlight travels, from the sun's elevation and azimuth (degrees, azimuth from +x to +y)."""
    e, a = math.radians(elevation), math.radians(azimuth)
    return (-math.cos(e) * math.cos(a), -math.cos(e) * math.sin(a), -math.sin(e))


def sky(scene, elevation=None, azimuth=0.0, strength=1.0, color=None):
    """World: Blender's physical (Nishita) sky without its sun disc (a SUN lamp carries the sun, so light
    sampling finds it), or a flat colour when ``color`` is given."""
    world = bpy.data.worlds.new("World")
    world.use_nodes = True
    bg = world.node_tree.nodes["Background"]
    bg.inputs["Strength"].default_value = strength
    if color is not None:
        bg.inputs["Color"].default_value = (*color, 1.0)
    else:
        node = world.node_tree.nodes.new("ShaderNodeTexSky")
        node.sky_type = "NISHITA"
        node.sun_disc = False
        node.sun_elevation = math.radians(elevation)
        node.sun_rotation = math.radians(azimuth)
        world.node_tree.links.new(node.outputs["Color"], bg.inputs["Color"])
    scene.world = world
    return world
