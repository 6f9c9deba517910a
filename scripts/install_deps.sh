#!/usr/bin/env bash
# Installs with apt-get whatever the build needs and this machine lacks (Debian 12).
# Runs apt-get only when something is missing; uses sudo when not root. Extra package
# names given as arguments are installed too (the test command adds the fuzzing tools, and
# PyTorch and h5py for the checkpoint loader test).
set -euo pipefail
pkgs=(g++ cmake make pkg-config libopenblas-openmp-dev libhdf5-dev hdf5-tools zlib1g-dev catch2
  libcairo2-dev fonts-dejavu-core libcli11-dev libopenmpi-dev openmpi-bin "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
