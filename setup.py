"""Maps the repository's top-level layers onto one import namespace.

The layers and their import rules: ARCHITECTURE.md, "Three layers, imports one way". Metadata lives in
pyproject.toml; only the package map needs code, because the subpackages of each layer are discovered
rather than listed by hand.
"""
from setuptools import find_packages, setup

LAYERS = {"vision": "vision", "vision.kernels": "kernels", "vision.pipelines": "pipelines"}

packages, package_dir = [], dict(LAYERS)
for name, folder in LAYERS.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]
# assets/ travels as package data of vision.assets so that a non-editable install still finds them.
packages.append("vision.assets")
package_dir["vision.assets"] = "assets"

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"vision.assets": ["*", "**/*"], "vision": ["py.typed"],
                  "vision.pipelines": ["blender_addon/vision_denoise/*.py", "blender_addon/vision_denoise/*.toml",
                                       "blender_addon/flamenco/*.js"]},
    include_package_data=False,
)
