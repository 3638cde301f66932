#!/bin/sh
# bench/baseline-shdc.sh REV DIR: build the shdc of commit REV (and its
# runtime) in DIR, a detached git worktree of this repository, for
# bench/gpt.py --baseline; prints the options that use it. An existing
# worktree at DIR is reused (brought to REV), so a second run only rebuilds.
# The shdc before issue 15 (the first parent of its merge, 52a8e12):
#   bench/baseline-shdc.sh '52a8e12^1' /tmp/pre15
# Needs what `make` needs here (tools/install-deps); builds at nice 10 with
# 2 jobs (JOBS=N to change).
set -eu
if [ $# -ne 2 ]; then
    echo "usage: bench/baseline-shdc.sh REV DIR" >&2
    exit 2
fi
rev=$1 dir=$2
cd "$(dirname "$0")/.."
commit=$(git rev-parse --verify "$rev^{commit}")
if [ -e "$dir" ]; then
    if ! git -C "$dir" rev-parse --git-dir >/dev/null 2>&1; then
        echo "bench/baseline-shdc.sh: $dir exists and is not a git worktree" >&2
        exit 1
    fi
    git -C "$dir" checkout -q --detach "$commit"
else
    git worktree add -q --detach "$dir" "$commit"
fi
nice -n 10 make -C "$dir" -j"${JOBS:-2}" >&2
dir=$(cd "$dir" && pwd)
echo "--baseline $dir/build/shdc --baseline-src gpt2=$dir/dsl-examples/gpt2.shd"
