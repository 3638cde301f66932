#!/bin/sh
# reduce.sh: builds bench/reduce.c against build/libshdrt.a and prints its
# table (the reduction family's row kernels against the generic reduction
# walk), then NumPy's times for the same operations (bench/reduce.py).
set -e
cd "$(dirname "$0")/.."
B=${B:-build}
make -s "$B/libshdrt.a"
mkdir -p "$B/bench"
${MPICC:-mpicc} -std=c11 -D_GNU_SOURCE -O2 -Iruntime -o "$B/bench/reduce" bench/reduce.c "$B/libshdrt.a" \
    -lopenblas -lm
SHD_QUIET=1 mpirun --allow-run-as-root -np 1 "$B/bench/reduce"
echo
"$(tools/find-python)" bench/reduce.py
