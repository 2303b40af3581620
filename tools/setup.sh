#!/usr/bin/env bash
# Installs the Debian 12 packages metagrad needs; idempotent and quiet when everything is present.
set -euo pipefail
pkgs=(build-essential cmake ninja-build clang-14 clang-format zlib1g-dev
      libboost1.81-dev llvm-16-dev libzstd-dev ocl-icd-opencl-dev opencl-headers pocl-opencl-icd
      catch2 libbenchmark-dev libeigen3-dev libopenblas-dev dataset-fashion-mnist time pkgconf graphviz
      libopenmpi-dev openmpi-bin fortunes libtorch-dev python3-matplotlib
      libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "metagrad setup: installing ${missing[*]}"
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${missing[@]}" >/dev/null
