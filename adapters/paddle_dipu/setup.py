# The paddle-dipu package: the CustomDevice plugin in
# site-packages/paddle_custom_device/ (the directory `import paddle` loads
# plugins from when CUSTOM_DEVICE_ROOT is unset) and the dipu-rs runtime it
# links, with a few helpers, in site-packages/paddle_dipu/. build.sh builds
# the two libraries into build/ first.
import os

from setuptools import setup
from setuptools.command.build_py import build_py

here = os.path.dirname(os.path.abspath(__file__))
built = os.path.join(here, "build")
for need in ("paddle_custom_device/libpaddle-dipu.so", "paddle_dipu/libdipu_runtime.so"):
    if not os.path.isfile(os.path.join(built, need)):
        raise SystemExit(f"paddle-dipu: build/{need} is missing: run adapters/paddle_dipu/build.sh")


class BuildPy(build_py):
    """Adds the prebuilt libraries to the two packages."""

    def run(self):
        super().run()
        for pkg, name in (("paddle_custom_device", "libpaddle-dipu.so"), ("paddle_dipu", "libdipu_runtime.so")):
            dst = os.path.join(self.build_lib, pkg)
            os.makedirs(dst, exist_ok=True)
            self.copy_file(os.path.join(built, pkg, name), os.path.join(dst, name))


setup(
    name="paddle-dipu",
    version="0.1.0",
    description="PaddlePaddle CustomDevice plugin for the dipu-rs device runtime",
    packages=["paddle_dipu"],
    cmdclass={"build_py": BuildPy},
    python_requires=">=3.8",
    zip_safe=False,
)
