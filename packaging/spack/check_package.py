#!/usr/bin/env python3
"""Checks packaging/spack/packages/hardy/package.py without Spack (which cannot be installed
here): it must be valid Python that, run against stand-ins for Spack's directives and base
classes, declares a CMakePackage and CudaPackage with the variants cuda and ulfm, Open MPI 5 when
ulfm, the libraries hardy's CMakeLists find, and cmake_args that pass the variants to HARDY_CUDA
and HARDY_ULFM. Exit 0 when it does, 1 with the problems otherwise.
Usage: check_package.py [PACKAGE_PY]"""
import ast
import sys
import types
from pathlib import Path

recipe = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "packages/hardy/package.py")
problems = []
declared = {"variant": [], "depends_on": [], "conflicts": [], "version": [], "generator": []}


def directive(name):
    def record(*args, **kwargs):
        declared[name].append((args, kwargs))
    return record


class Spec:
    """What cmake_args asks of self.spec: satisfies('+cuda'), spec['mpi'].mpicxx, variants."""

    def __init__(self, on):
        self.on = on
        self.variants = {"cuda_arch": types.SimpleNamespace(value="90")}

    def satisfies(self, text):
        return text.lstrip("+") in self.on if text.startswith("+") else False

    def __getitem__(self, name):
        return types.SimpleNamespace(mpicxx="/mpi/bin/mpicxx", mpicc="/mpi/bin/mpicc", prefix=f"/{name}")


class PackageBase:
    run_tests = False

    def define(self, name, value):
        value = {True: "ON", False: "OFF"}.get(value, value)
        return f"-D{name}={value}"

    def define_from_variant(self, name, variant):
        return f"-D{name}={'ON' if self.spec.satisfies('+' + variant) else 'OFF'}"


spack_package = types.ModuleType("spack.package")
spack_package.CMakePackage = type("CMakePackage", (PackageBase,), {})
spack_package.CudaPackage = type("CudaPackage", (PackageBase,), {})
for name in declared:
    setattr(spack_package, name, directive(name))
spack_package.maintainers = lambda *names: None
spack_package.license = lambda *args, **kwargs: None
spack_package.run_after = lambda *args, **kwargs: (lambda f: f)
spack_package.on_package_attributes = lambda **kwargs: (lambda f: f)
spack_package.__all__ = [n for n in dir(spack_package) if not n.startswith("_")]
sys.modules["spack"] = types.ModuleType("spack")
sys.modules["spack.package"] = spack_package

source = recipe.read_text()
try:
    ast.parse(source, str(recipe))
except SyntaxError as e:
    print(f"FAILED: {recipe} is not valid Python: {e}")
    sys.exit(1)
namespace = {}
exec(compile(source, str(recipe), "exec"), namespace)
Hardy = namespace.get("Hardy")
if Hardy is None:
    print("FAILED: no class Hardy")
    sys.exit(1)
if not (issubclass(Hardy, spack_package.CMakePackage) and issubclass(Hardy, spack_package.CudaPackage)):
    problems.append("Hardy is not a CMakePackage and CudaPackage (CudaPackage gives +cuda and cuda_arch)")
if not (Hardy.__doc__ or "").strip():
    problems.append("Hardy has no docstring (spack info shows it)")
for attribute in ("homepage", "git"):
    if not getattr(Hardy, attribute, None):
        problems.append(f"no {attribute}")

variants = {args[0]: kwargs for args, kwargs in declared["variant"]}
if "ulfm" not in variants or "description" not in variants["ulfm"]:
    problems.append("no variant ulfm with a description")
depends = [(args[0], kwargs.get("when")) for args, kwargs in declared["depends_on"]]
if ("openmpi@5:", "+ulfm") not in depends:
    problems.append("+ulfm does not depend on openmpi@5:")
needed = ["mpi", "hdf5", "boost", "fmt", "nlohmann-json", "onednn", "xxhash", "cmake", "py-matplotlib"]
names = {spec.split("@")[0].split("+")[0].split("~")[0] for spec, _ in depends}
problems += [f"no depends_on for {name}" for name in needed if name not in names]
for name in ("cudnn", "nccl"):
    if not any(spec.startswith(name) and when == "+cuda" for spec, when in depends):
        problems.append(f"{name} is not a dependency when +cuda")
if not declared["version"]:
    problems.append("no version")

for on, expect in (({"cuda", "ulfm"}, ["-DHARDY_CUDA=ON", "-DHARDY_ULFM=AUTO", "-DCMAKE_CUDA_ARCHITECTURES=90"]),
                   (set(), ["-DHARDY_CUDA=OFF", "-DHARDY_ULFM=OFF", "-DMPI_CXX_COMPILER=/mpi/bin/mpicxx"])):
    package = Hardy()
    package.spec = Spec(on)
    args = package.cmake_args()
    problems += [f"cmake_args with {sorted(on) or 'no variants'} lacks {e} (gave {args})" for e in expect if e not in args]

for problem in problems:
    print("FAILED:", problem)
print(f"{recipe}: " + ("declares what it should" if not problems else f"{len(problems)} problem(s)"))
sys.exit(1 if problems else 0)
