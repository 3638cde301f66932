#!/bin/sh
# collectives.sh: builds bench/collectives.c against build/libshdrt.a and
# prints its table (time per call and GB/s for each collective and
# algorithm) at 2, 4 and 8 ranks. Usage: bench/collectives.sh [MiB ...]
# (default sizes 1 16 64). RANKS="2 4" overrides the rank counts.
#
# The machine may have fewer cores than ranks; --oversubscribe lets Open MPI
# start them anyway (the 8-rank figures then measure a shared CPU).
set -e
cd "$(dirname "$0")/.."
B=${B:-build}
make -s "$B/libshdrt.a"
mkdir -p "$B/bench"
${MPICC:-mpicc} -std=c11 -D_GNU_SOURCE -O2 -Iruntime -o "$B/bench/collectives" \
    bench/collectives.c "$B/libshdrt.a" -lopenblas -lm
export SHD_QUIET=1
for p in ${RANKS:-2 4 8}; do
    mpirun --allow-run-as-root --oversubscribe -np "$p" "$B/bench/collectives" "$@"
done
