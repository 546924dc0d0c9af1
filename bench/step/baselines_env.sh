#!/bin/bash
# The bench-only Python environment of the CPU step benchmark's baselines: current PyTorch and
# TensorFlow from PyPI in .venv-bench inside the checkout (bench/step/bench_step.py calls this
# before it runs a baseline). It never touches .venv, scripts/test or the training path: hardy
# trains without Python; these are only what it is measured against.
#
#   bench/step/baselines_env.sh           create or update it; a no-op when it is up to date
#   bench/step/baselines_env.sh --full    torch with every dependency it declares (also triton,
#                                         cuSOLVER, NVTX, cuda-bindings: about 1.3 GB more)
#   bench/step/baselines_env.sh --python  print the environment's python and exit (1: not there)
#
# Disk: about 5.5 GB (torch 4.1 GB of it, with the CUDA libraries its libraries link against;
# tensorflow-cpu about 1.4 GB); `--full` about 6.8 GB. HARDY_BENCH_VENV puts it elsewhere.
#
# Why the CUDA libraries on a CPU machine: PyPI's Linux torch wheel is built with CUDA and its
# libtorch_python.so links libtorch_cuda.so, which names cuDNN, cuBLAS(Lt), cuFFT, cuSPARSE(Lt),
# cuFile, NCCL, NVSHMEM, NVRTC, CUPTI and the CUDA runtime as DT_NEEDED: without any one of them
# `import torch` fails (no CPU-only wheel is on PyPI, and PyPI is the only index reachable
# here). Those are installed; what torch loads only on demand is not (triton, 1 GB, which
# torch.compile needs only for GPU kernels: on the CPU inductor generates C++; cuSOLVER, NVTX,
# cuda-bindings). Checked 2026-11-29 with torch 2.15.0: import, eager and torch.compile on the CPU.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV=${HARDY_BENCH_VENV:-$ROOT/.venv-bench}
if [[ $(realpath -m "$VENV") == "$(realpath -m "$ROOT/.venv")" ]]; then
  echo "baselines_env.sh: $VENV is the tools' .venv; the baselines never go there" >&2
  exit 2
fi

# The pins: what the baselines are. Change them here (and rerun) to measure other versions.
TORCH=torch==2.15.0
TENSORFLOW=tensorflow-cpu==2.21.0
# torch 2.15.0's own pins of the CUDA wheels, less the libraries it loads only on demand.
TORCH_CUDA_LIBS=(
  "cuda-toolkit[cublas,cudart,cufft,cufile,cupti,cusparse,nvjitlink,nvrtc]==13.2.2"
  nvidia-cudnn-cu13==9.26.0.51 nvidia-cusparselt-cu13==0.8.1 nvidia-nccl-cu13==2.30.7
  nvidia-nvshmem-cu13==3.7.2)
# torch's pure-Python requirements (its METADATA) and the versions both frameworks ran with.
TORCH_PY_DEPS=(filelock "typing-extensions>=4.13.0" "setuptools>=77.0.3" "sympy>=1.13.3"
               "networkx>=2.5.1" jinja2 "fsspec>=0.8.5")
COMMON_PINS=(numpy==2.4.6 keras==3.15.1)

full=0
case "${1:-}" in
  --full) full=1 ;;
  --python)
    if [[ -x $VENV/bin/python ]]; then echo "$VENV/bin/python"; exit 0; fi
    exit 1 ;;
  "") ;;
  *) echo "usage: $0 [--full | --python]" >&2; exit 2 ;;
esac

wanted="$TORCH $TENSORFLOW ${TORCH_CUDA_LIBS[*]} ${COMMON_PINS[*]} full=$full"
stamp=$VENV/.hardy-baselines
if [[ -f $stamp && "$(cat "$stamp")" == "$wanted" ]] &&
   "$VENV/bin/python" -c "import torch, tensorflow" 2>/dev/null; then
  echo "baselines_env.sh: $VENV is up to date ($TORCH, $TENSORFLOW)" >&2
  exit 0
fi

echo "baselines_env.sh: installing $TORCH and $TENSORFLOW into $VENV (about 5.5 GB)" >&2
if [[ ! -x $VENV/bin/python ]]; then
  # Not --system-site-packages: Debian's torch 1.13 must not shadow the current one.
  /usr/bin/python3 -m venv "$VENV"
fi
pip=("$VENV/bin/python" -m pip install --disable-pip-version-check --quiet)
rm -f "$stamp"
if ((full)); then
  "${pip[@]}" "$TORCH" "$TENSORFLOW" "${COMMON_PINS[@]}"
else
  "${pip[@]}" --no-deps "$TORCH"
  "${pip[@]}" "${TORCH_PY_DEPS[@]}" "${TORCH_CUDA_LIBS[@]}" "$TENSORFLOW" "${COMMON_PINS[@]}"
fi
# The check that matters: both import, and torch's CPU path has oneDNN.
"$VENV/bin/python" - <<'EOF'
import torch, tensorflow
assert torch.backends.mkldnn.is_available(), "torch without oneDNN"
print(f"baselines_env.sh: torch {torch.__version__}, tensorflow {tensorflow.__version__}",
      flush=True)
EOF
echo "$wanted" >"$stamp"
du -sh "$VENV" >&2
