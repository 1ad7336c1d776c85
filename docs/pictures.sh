#!/usr/bin/env bash
# Regenerates the pictures README.md and docs/validation.md show, from the shipped study and
# validation cases (about 5 minutes on a 2-core CPU): docs/serve_a_model_frontier.png and
# docs/validation.png.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
sweep run configs/serve_a_model.toml --out "$out/study" --quiet
sweep frontier "$out/study" --out "$out/frontier"
cp "$out/frontier/frontier.png" docs/serve_a_model_frontier.png
sweep validate validation/fit validation/holdout --out "$out/validation" --quiet
cp "$out/validation/validation.png" docs/validation.png
