#!/usr/bin/env bash
# Set up mtk's own environment on a fresh Debian 12 / Python 3.11 machine, from the committed lock files.
#   scripts/install-deps.sh train   .venv with requirements/demo.lock + megatron-core + mtk    (make demo)
#   scripts/install-deps.sh test    .venv with requirements/test.lock + megatron-core + mtk,
#                                   and the Debian daemons the integration tests drive          (make test)
# Everything Python goes into the project virtualenv ($MTK_VENV, default .venv), never into the machine's
# Python. Versions come only from requirements/*.lock (regenerate on purpose with `make lock`), so a release
# published upstream tonight cannot change what this installs. Re-running is a no-op when nothing changed:
# a stamp in the venv records the hash of the lock files and of this script.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-test}"
VENV="${MTK_VENV:-.venv}"
PYTHON="${MTK_PYTHON:-python3}"
# torch 2.13.0+cpu: from this folder when it holds the wheel (this project's machines have it on disk), else
# downloaded once from PyTorch's CPU index (below); any other torch spec pulls multi-GB CUDA wheels.
WHEELS="${MTK_WHEELS:-/opt/wheels}"

case "$what" in
  train) LOCK=requirements/demo.lock ;;
  test) LOCK=requirements/test.lock ;;
  *) echo "usage: $0 train|test" >&2; exit 2 ;;
esac

say() { echo "install-deps: $*" >&2; }
# One line per stage as it starts, with the time the previous one took: the whole install is 40-60 s and each
# stage is silent on its own (--quiet), so a user sees what it is doing instead of a pause.
stage_start=$SECONDS
stage() {
  local took=$((SECONDS - stage_start))
  stage_start=$SECONDS
  say "$* (the step before took ${took} s)"
}

install_debian_packages() {
  if [[ "$(id -u)" != 0 ]]; then
    say "not root: skipping apt-get; integration tests need slurm-wlm munge slurmdbd mariadb-server etcd-server docker.io ..."
    return
  fi
  local packages=(slurm-wlm munge slurmdbd mariadb-server etcd-server docker.io shellcheck squashfs-tools docker-registry
                  apache2-utils debootstrap iproute2 procps util-linux)
  local missing=() p
  for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if ((${#missing[@]})); then
    say "apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  # kubectl (the EKS test that `kubectl apply -f` takes the manifests unchanged) ships with this machine
  # image; where it is missing, try the package but do not fail the whole install on it.
  if ! command -v kubectl >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubectl >/dev/null 2>&1 ||
      say "warning: kubectl not installable here; the kubectl apply test will fail"
  fi
}

# The hash of everything that decides the environment's content.
fingerprint() {
  { "$PYTHON" -c 'import sys; print(sys.version)'; cat "$1" requirements/megatron-core.txt pyproject.toml setup.py "$0"; } |
    sha256sum | cut -d' ' -f1
}

# The "name==version --hash=..." block of one package in a lock file.
locked() { awk -v pkg="$1==" 'index($0, pkg) == 1 {on = 1} on {print} on && !/\\$/ {exit}' "$2"; }

[[ "$what" == test ]] && install_debian_packages

current() { [[ -f "$VENV/.mtk-deps-$1" && "$(cat "$VENV/.mtk-deps-$1")" == "$(fingerprint "$2")" ]]; }
# The test set is a superset of the demo set, so an up-to-date test environment serves the demo too.
if current "$what" "$LOCK" || { [[ "$what" == train ]] && current test requirements/test.lock; }; then
  say "$VENV is up to date ($what)"
  exit 0
fi

start=$SECONDS
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || {
  say "the lock files are resolved for Python 3.11; $PYTHON is $("$PYTHON" -V 2>&1). Set MTK_PYTHON=python3.11."
  exit 2
}
[[ -x "$VENV/bin/python" ]] || { say "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
rm -f "$VENV"/.mtk-deps-*

# torch's CPU build is not on PyPI (PyPI's torch is the CUDA build, multi-GB). A local folder of wheels ($WHEELS)
# is only a speed-up: without one, the wheel the lock pins is downloaded once from PyTorch's own CPU index into
# the user's cache, checked against the lock's hash (pip refuses any other file), and found there next time.
torch_wheel_here() { compgen -G "$1/torch-*+cpu-*.whl" >/dev/null; }
if grep -q '^torch==.*+cpu' "$LOCK" && ! torch_wheel_here "$WHEELS"; then
  cached="${XDG_CACHE_HOME:-$HOME/.cache}/mtk/wheels"
  if ! torch_wheel_here "$cached"; then
    index="${MTK_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
    torch_req="$(mktemp)"
    locked torch "$LOCK" >"$torch_req"
    say "no torch CPU wheel in $WHEELS: downloading $(grep -o '^torch==[^ ]*' "$torch_req") from $index into $cached (hash-checked against $LOCK)"
    mkdir -p "$cached"
    # Only the index named here: the machine's own pip settings (find-links, extra indexes) take no part.
    if ! env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null \
        "$VENV/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --require-hashes --index-url "$index" --dest "$cached/.partial" -r "$torch_req"; then
      rm -rf "$cached/.partial" "$torch_req"
      say "could not download torch from $index: set MTK_WHEELS=<a folder with the wheel> or MTK_TORCH_INDEX=<a mirror of PyTorch's CPU index>"
      exit 2
    fi
    mv "$cached"/.partial/torch-*.whl "$cached"/ && rm -rf "$cached/.partial" "$torch_req"
  fi
  WHEELS="$cached"
fi

# uv, at the version the lock pins, checked against the lock's hashes.
uv_req="$(mktemp)"
trap 'rm -f "$uv_req"' EXIT
locked uv "$LOCK" >"$uv_req"
stage_start=$SECONDS
say "[1/5] uv $(grep -o '^uv==[^ ]*' "$uv_req" | cut -d= -f3) into $VENV (pip, hash-checked)"
PIP_CONFIG_FILE=/dev/null "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes -r "$uv_req"
uv=("$VENV/bin/uv" pip)
export UV_LINK_MODE="${UV_LINK_MODE:-copy}"
target=(--python "$VENV/bin/python")

# --compile-bytecode: the bytecode of every installed module is written once, here. Where the environment sets
# PYTHONDONTWRITEBYTECODE (this machine kind and its CI do), nothing is cached at import, so each process would
# compile torch and transformers from source again (~10 CPU s per process that imports torch + megatron.core on
# 2 cores: every torchrun rank, megatron-core check and entrypoint step).
stage "[2/5] $(grep -c '^[A-Za-z0-9]' "$LOCK") packages from $LOCK with uv (torch from $WHEELS; downloads and bytecode: the long step)"
# The long step: on a terminal uv draws its own progress bars; in a log it stays quiet (one line per stage above).
quiet=(--quiet)
[[ -t 2 ]] && quiet=()
if [[ "$what" == test ]]; then
  # Exactly the lock: anything else in the venv is removed.
  "${uv[@]}" sync "${quiet[@]}" "${target[@]}" --require-hashes --compile-bytecode --find-links "$WHEELS" "$LOCK"
else
  "${uv[@]}" install "${quiet[@]}" "${target[@]}" --require-hashes --compile-bytecode --find-links "$WHEELS" -r "$LOCK"
fi
# megatron-core 0.19.2 declares Requires-Python >=3.12 but its cp311 wheel works (shared/notes): it alone is
# installed past that check, without dependencies (the lock already holds them).
stage "[3/5] megatron-core from requirements/megatron-core.txt (pip, past its Python >=3.12 check)"
PIP_CONFIG_FILE=/dev/null "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --ignore-requires-python \
  --only-binary=:all: --require-hashes -r requirements/megatron-core.txt
stage "[4/5] mtk itself (editable, from this checkout)"
"${uv[@]}" install --quiet "${target[@]}" --no-deps --no-build-isolation -e .
stage "[5/5] bytecode of mtk's own sources"
# mtk's own sources too (pip compiles megatron-core itself): the folders setup.py maps onto the package.
"$VENV/bin/python" - <<'PY'
import ast, compileall, sys
tree = ast.parse(open("setup.py").read())
folders = next(ast.literal_eval(n.value) for n in tree.body
               if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "FOLDERS")
sys.exit(not all(compileall.compile_dir(f, quiet=1, workers=0) for f in ("mtk", *folders)))
PY

fingerprint "$LOCK" >"$VENV/.mtk-deps-$what"
stage "stamp written"
say "$VENV ready ($what, $LOCK) in $((SECONDS - start)) s"
