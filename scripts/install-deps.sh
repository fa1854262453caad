#!/usr/bin/env bash
# Install what mtk needs on a fresh Debian 12 / Python 3.11 machine of the CI kind.
#   scripts/install-deps.sh train   torch (CPU, pinned) + megatron-core + mtk[train,data]   (make demo)
#   scripts/install-deps.sh test    the above + Debian daemons the integration tests drive  (make test)
# Idempotent: re-running only checks what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-test}"
PIP=(python3 -m pip install --quiet --disable-pip-version-check)

# torch first, pinned: any other spec pulls multi-GB CUDA wheels on this machine. numpy before megatron-core,
# or pip picks a numpy source release that fails to build.
"${PIP[@]}" torch==2.13.0 numpy 'packaging>=24.2'
# megatron-core 0.19.2 declares Requires-Python >=3.12 but its cp311 wheel works (shared/notes).
"${PIP[@]}" --ignore-requires-python megatron-core==0.19.2

if [[ "$what" == "test" ]]; then
  if [[ "$(id -u)" == 0 ]]; then
    APT_PACKAGES=(slurm-wlm munge etcd-server docker.io shellcheck squashfs-tools docker-registry
                  apache2-utils debootstrap iproute2 procps util-linux)
    missing=()
    for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    if ((${#missing[@]})); then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
    # kubectl (the EKS test that `kubectl apply -f` takes the manifests unchanged) ships with this machine
    # image; where it is missing, try the package but do not fail the whole install on it.
    if ! command -v kubectl >/dev/null; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubectl >/dev/null 2>&1 ||
        echo "warning: kubectl not installable here; the kubectl apply test will fail" >&2
    fi
  else
    echo "not root: skipping apt-get; integration tests need slurm-wlm munge etcd-server docker.io ..." >&2
  fi
  "${PIP[@]}" --ignore-requires-python -e '.[all,test]'
else
  "${PIP[@]}" --ignore-requires-python -e '.[train,data]'
fi
