#!/usr/bin/env bash
# Installs the npm packages the tests use as real peers, into
# ${BUILD_DIR:-build}/test-peers/node_modules (never at build or test time):
#   openai           the official OpenAI client, against `kind = "serve"` (tests/infer)
#   playwright-core  drives Debian's Chromium through the web page (tests/web);
#                    it downloads no browser
# Idempotent: packages already there at the pinned version are left alone.
# Without node/npm it says so and exits 0 (the tests then skip).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${BUILD_DIR:-build}/test-peers
# The last openai release that runs on Debian's node 20 (7.x needs node 22).
packages=("openai@6.30.1" "playwright-core@1.65.1")
if ! command -v npm >/dev/null; then
  echo "test-peers: npm not found; the tests that need npm packages will skip"
  exit 0
fi
mkdir -p "$dir"
[[ -f $dir/package.json ]] || echo '{"name": "cohort-test-peers", "private": true}' >"$dir/package.json"
missing=()
for p in "${packages[@]}"; do
  name=${p%@*} version=${p##*@}
  have=$(node -e "try{console.log(require('./$dir/node_modules/$name/package.json').version)}catch(e){}" 2>/dev/null || true)
  [[ $have == "$version" ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "test-peers: installing ${missing[*]} into $dir"
  npm install --prefix "$dir" --no-audit --no-fund --save-exact "${missing[@]}"
else
  echo "test-peers: all present in $dir"
fi
