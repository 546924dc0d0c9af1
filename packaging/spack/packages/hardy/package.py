# Spack recipe for hardy. Use it from a repository of your own:
#   spack repo add <hardy checkout>/packaging/spack
#   spack install hardy +ulfm              # CPU, Open MPI 5 with ULFM
#   spack install hardy +cuda cuda_arch=90 # H100/H200
# SPDX-License-Identifier: (Apache-2.0 OR MIT)

from spack.package import *


class Hardy(CMakePackage, CudaPackage):
    """Fault-tolerant data-parallel training of a DeepLabv3+ climate-segmentation model: survives
    node failures inside the job (ULFM: revoke, shrink, roll back, rebalance) and relaunches a job
    that died as a whole, with self-describing HDF5 checkpoints and Slurm/LSF submission."""

    homepage = "https://github.com/hardy-project/hardy"
    git = "https://github.com/hardy-project/hardy.git"

    maintainers("hardy-project")

    license("Apache-2.0")

    version("main", branch="main")

    variant(
        "ulfm",
        default=True,
        description="Survive rank failures inside the job with ULFM (needs Open MPI 5); "
        "without it a failed job is relaunched by hardy run",
    )
    variant("benchmarks", default=False, description="Build the benchmarks in bench/")

    depends_on("c", type="build")
    depends_on("cxx", type="build")
    depends_on("cmake@3.22:", type="build")
    depends_on("ninja", type="build")

    depends_on("mpi")
    # Open MPI 5 carries ULFM (MPIX_Comm_shrink, MPIX_Comm_revoke); hardy enables it at run time
    # with mpirun --with-ft ulfm.
    depends_on("openmpi@5:", when="+ulfm")
    depends_on("hdf5@1.10:~mpi")
    depends_on("boost@1.71:+program_options")
    depends_on("fmt")
    depends_on("nlohmann-json@3.9:")
    depends_on("onednn")
    depends_on("xxhash")
    # `hardy report` draws runs with matplotlib; `hardy` finds python3 on PATH.
    depends_on("python@3.8:", type="run")
    depends_on("py-matplotlib", type="run")

    # The CUDA backend: cuDNN convolutions, cuBLAS, and NCCL with ncclCommShrink (2.27).
    depends_on("cuda@12:", when="+cuda")
    depends_on("cudnn@8:", when="+cuda")
    depends_on("nccl@2.27:", when="+cuda")
    conflicts("cuda_arch=none", when="+cuda", msg="hardy +cuda needs cuda_arch (90 for H100/H200)")

    depends_on("catch2@2", type="test")

    generator("ninja")

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define("HARDY_CUDA", "ON" if spec.satisfies("+cuda") else "OFF"),
            self.define("HARDY_ULFM", "AUTO" if spec.satisfies("+ulfm") else "OFF"),
            self.define_from_variant("HARDY_BUILD_BENCHMARKS", "benchmarks"),
            self.define("HARDY_BUILD_TESTS", self.run_tests),
            self.define("MPI_CXX_COMPILER", spec["mpi"].mpicxx),
            self.define("MPI_C_COMPILER", spec["mpi"].mpicc),
        ]
        if spec.satisfies("+cuda"):
            args.append(self.define("CMAKE_CUDA_ARCHITECTURES", spec.variants["cuda_arch"].value))
            args.append(self.define("CUDNN_ROOT", spec["cudnn"].prefix))
            args.append(self.define("NCCL_ROOT", spec["nccl"].prefix))
        return args

    def check(self):
        # The quick labels only: the fault, cluster and Slurm labels need network namespaces and a
        # private Slurm.
        with working_dir(self.build_directory):
            ctest("-L", "unit", "--output-on-failure")

    @run_after("install")
    @on_package_attributes(run_tests=True)
    def check_install(self):
        hardy = Executable(self.prefix.bin.hardy)
        hardy("--version")
        hardy("completion", "bash", output=str)
