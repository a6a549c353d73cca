#!/usr/bin/env bash
# Installs every Debian 12 package the mxval build and tests need.
# Idempotent: skips apt entirely when everything is already installed.
# Must run as root (or with sudo available) on Debian 12.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libabsl-dev            # absl::Status / StatusOr, synchronization
  nlohmann-json3-dev     # JSON: config tables, safetensors headers, reports
  libgtest-dev libgmock-dev
  libbenchmark-dev       # Google Benchmark (bench/)
  libopenblas-dev        # the cblas_sgemm peer in bench/
  python3-numpy          # cross-checks .npy files written by mxval in tests
  hipcc                  # compile check of the HIP kernels for gfx90a / gfx940 (no AMD GPU here)
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # the service API
  libsqlite3-dev         # the coordinator's durable store (embedded default)
  libpq-dev postgresql   # the shared PostgreSQL store; tests start a throwaway server on loopback
  prometheus-cpp-dev     # metrics (core + pull exposer)
  prometheus             # promtool, which checks real scrapes in the tests
  libyaml-dev            # YAML job specs and triage rule files
  libre2-dev             # triage rule patterns (RE2)
  python3-yaml           # deploy/ manifest checks and the Prometheus integration test
  python3-torch          # PyTorch 1.13 (CPU): runs the Python kernel libraries of the tests through a CPU worker
  chromium               # renders the web page in a headless browser test
  openssl                # test certificates (scripts/gen_test_certs.sh)
  clang-14 libclang-rt-14-dev  # libFuzzer + ASan/UBSan configuration (scripts/ci_sanitizers.sh)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
