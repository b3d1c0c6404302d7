#!/usr/bin/env bash
# Download, here, the wheels that scripts/device_check.py carries to a GPU machine without network.
#
#     scripts/device_wheels.sh            # into .device/wheels/ (ignored by git), then prints their size
#
# The machine it is for (docs/devices.md) has its own Python 3.12 with torch, JAX, Flax, optax, onnx,
# onnxruntime, absl-py, h5py, rich (with markdown-it-py, mdurl, pygments), ml-dtypes and packaging, but
# no Keras and no jsonschema: these are what the notebooks it runs, and device_check.py itself, need beyond
# that, each at its requirements/modern.txt pin, as Python 3.12 manylinux x86_64 wheels, without their
# dependencies (--no-deps: each one is named here).
#   keras, namex, optree   Keras 3 and the two of its dependencies that machine lacks
#   jsonschema, jsonschema-specifications, referencing, rpds-py, attrs
#                          support.records checks every record against its JSON Schema (the notebooks' records
#                          and device_check.py's, through scripts.results); rpds-py is compiled (cp312)
#   pooch, platformdirs    support's downloads (imported only for a real download; pooch imports platformdirs,
#                          and requests only when it downloads, which that machine, without network, never does)
#   jax2onnx               the JAX notebooks' ONNX export (its plugins for dm-pix, equinox and others are
#                          skipped with a warning where the library is absent; the notebooks use none)
#   onnxscript, onnx-ir    torch.onnx.export(dynamo=True) and jax2onnx; device_check.py installs a carried
#                          wheel only where the machine lacks that distribution, so these are a fallback
# Flax brings orbax-checkpoint (a requirement of flax), torch typing_extensions (referencing's), and that machine
# has filelock and packaging, so they are not carried.
# device_check.py installs them with `pip install --no-index --no-deps --target .device/site`; the device
# tool carries the folder when the run names it: carry [".device"].
set -euo pipefail
cd "$(dirname "$0")/.."

NAMES=(keras namex optree jax2onnx onnxscript onnx-ir jsonschema jsonschema-specifications referencing rpds-py attrs
       pooch platformdirs)
DEST=.device/wheels
PIP=(${PIP:-python3 -m pip})

pin() {   # the requirements/modern.txt pin of a distribution, e.g. keras==3.15.1 (without the line's hashes)
    local line
    line=$(grep -i -o -E "^$(echo "$1" | sed 's/[-_.]/[-_.]/g')==[A-Za-z0-9.+!_-]+" requirements/modern.txt || true)
    if [ -z "$line" ]; then echo "device_wheels.sh: $1 has no pin in requirements/modern.txt" >&2; exit 2; fi
    echo "$line"
}

SPECS=()
for name in "${NAMES[@]}"; do SPECS+=("$(pin "$name")"); done
mkdir -p "$DEST"
rm -f "$DEST"/*.whl
"${PIP[@]}" download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$DEST" "${SPECS[@]}"
ls -l "$DEST"
total=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
echo "device_wheels.sh: ${#SPECS[@]} wheels (${SPECS[*]}), $((total / 1024)) KiB in $DEST"
if [ "$total" -gt $((35 * 1024 * 1024)) ]; then
    echo "device_wheels.sh: above 35 MiB: the device tool carries at most 64 MiB with the working tree" >&2
    exit 1
fi
