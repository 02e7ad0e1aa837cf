#!/bin/bash
# Copy this branch's tree (tracked and untracked files, not ignored ones) and .vllm into the
# session checkout's ignored .bench/i24, the one folder the device tool carries from there.
set -eu
dest=${1:-/work/main/.bench/i24}
rm -rf "$dest"; mkdir -p "$dest"
git ls-files -co --exclude-standard | grep -v '^\.bench/' | tar -cf - -T - | tar -xf - -C "$dest"
[ -d .vllm ] && cp -r .vllm "$dest/"
du -sh "$dest"
