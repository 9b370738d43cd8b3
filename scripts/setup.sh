#!/usr/bin/env bash
# Installs the Debian packages cohort needs (skipping those already there),
# then configures and builds into build/ (Release, ccache when present).
# Idempotent: a second run with nothing changed only re-checks and relinks nothing.
#
#   scripts/setup.sh            packages + build
#   scripts/setup.sh --no-build packages (and the tests' npm peers) only
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libzmq3-dev cppzmq-dev          # control-plane transport
  libboost-dev                    # Asio event loop, Beast HTTP
  libspdlog-dev libfmt-dev        # logging
  libtomlplusplus-dev             # job files
  nlohmann-json3-dev              # message encoding, metrics, HF config.json
  libcli11-dev                    # command-line parsing
  libsqlite3-dev                  # coordinator state
  libopenmpi-dev openmpi-bin      # MPI collective backend, mpirun launch
  libgloo-dev                     # Gloo collective backend (CPU)
  libopenblas-dev                 # CPU matmul
  libpcre2-dev                    # tokenizer split patterns (Unicode properties)
  libutf8proc-dev                 # tokenizer normalization (NFC, NFKC, ...)
  libsentencepiece-dev            # SentencePiece tokenizer.model
  libgtest-dev libgmock-dev       # tests
  python3-jinja2                  # test peer: renders the chat-template suite (tests/text/template_parity.py)
  fortunes-min fortunes           # English text for the quickstart corpus
  procps psmisc                   # ps/pgrep used by process-leak checks in tests
  valgrind                        # memcheck of the server start/stop test (tests/infer)
  iproute2                        # ip netns: the multi-node tests over a real network (tests/cluster)
  prometheus                      # test peer: scrapes the server's /metrics
  clang libclang-rt-14-dev        # libFuzzer + sanitizers for scripts/fuzz.sh (fuzz/)
  chromium                        # test peer: Playwright drives it through the web page
  zsh                             # test peer: loads `cohort completion zsh` (tests/cli)
  systemd shellcheck              # tests/deploy: systemd-analyze verify of the units, the sbatch script
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node and npm for the test peers (scripts/test-peers.sh: the OpenAI client,
# Playwright): Debian's packages only where no npm is on PATH, since a Node
# build that bundles npm conflicts with Debian's npm package.
command -v npm >/dev/null || missing+=(nodejs npm)
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

scripts/test-peers.sh            # npm packages the tests talk to (idempotent)

[[ ${1:-} == --no-build ]] && exit 0
exec scripts/build.sh
