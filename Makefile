# shdc: one non-recursive makefile; every output goes under build/.
#
#   make          build build/shdc, build/libshdrt.a, build/include/shdrt.h
#   make test     install what is missing, build, run every test
#   make demo     build, compile dsl-examples/mlp_dp.shd, run it under mpirun
#   make san      the same build with ASan+UBSan, under build/san/
#   make fuzz     mutated test programs through the sanitizer build
#   make bench    run the benchmarks in bench/ and print their tables
#   make clean

.DELETE_ON_ERROR:
.SUFFIXES:
MAKEFLAGS += --no-builtin-rules

B        ?= build
CC       ?= cc
MPICC    ?= mpicc
WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wno-unused-parameter -Wvla
OPT      ?= -O2 -g
SAN      ?=
CFLAGS_C := -std=c11 -D_GNU_SOURCE $(OPT) $(SAN) $(WARN) -MMD -MP
# Deferred: on a fresh machine OpenBLAS is installed by $(B)/stamp-deps first.
BLAS_INC  = $(shell pkg-config --cflags openblas 2>/dev/null)
RE2C     ?= re2c
LEMON    ?= lemon

COMPILER_SRC := $(filter-out compiler/lexer.re compiler/grammar.y,$(wildcard compiler/*.c))
COMPILER_OBJ := $(COMPILER_SRC:compiler/%.c=$(B)/compiler/%.o) $(B)/gen/lexer.o $(B)/gen/grammar.o
RUNTIME_SRC  := $(wildcard runtime/*.c)
RUNTIME_OBJ  := $(RUNTIME_SRC:runtime/%.c=$(B)/runtime/%.o)

all: $(B)/stamp-deps $(B)/shdc $(B)/libshdrt.a $(B)/include/shdrt.h

# Missing Debian packages are installed when run as root; otherwise the
# script prints the apt-get line to run and fails.
$(B)/stamp-deps: tools/install-deps
	@mkdir -p $(B)
	@tools/install-deps
	@touch $@

# ---- compiler -------------------------------------------------------------
# Generated lexer and parser C lives in $(B)/gen, never in the tree.
$(B)/gen/lexer.c: compiler/lexer.re | $(B)/stamp-deps
	@mkdir -p $(@D)
	$(RE2C) -W --no-generation-date --no-version -o $@ $<

$(B)/gen/grammar.c $(B)/gen/grammar.h: compiler/grammar.y | $(B)/stamp-deps
	@mkdir -p $(B)/gen
	cp compiler/grammar.y $(B)/gen/grammar.y
	cd $(B)/gen && $(LEMON) -q -s grammar.y >/dev/null

$(B)/gen/lexer.o: $(B)/gen/lexer.c $(B)/gen/grammar.h
	$(CC) $(CFLAGS_C) -Wno-unused-macros -Icompiler -I$(B)/gen -c -o $@ $<

# Lemon's template is not -Wall clean; its own warnings are not ours.
$(B)/gen/grammar.o: $(B)/gen/grammar.c
	$(CC) -std=c11 -D_GNU_SOURCE $(OPT) $(SAN) -w -Icompiler -I$(B)/gen -c -o $@ $<

$(B)/compiler/%.o: compiler/%.c $(B)/gen/grammar.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_C) -Icompiler -I$(B)/gen -c -o $@ $<

$(B)/shdc: $(COMPILER_OBJ)
	$(CC) $(SAN) -o $@ $^ -lm

# ---- runtime --------------------------------------------------------------
$(B)/runtime/%.o: runtime/%.c runtime/shdrt.h | $(B)/stamp-deps
	@mkdir -p $(@D)
	$(MPICC) $(CFLAGS_C) $(BLAS_INC) -Iruntime -c -o $@ $<

$(B)/libshdrt.a: $(RUNTIME_OBJ)
	rm -f $@
	ar rcs $@ $^

$(B)/include/shdrt.h: runtime/shdrt.h
	@mkdir -p $(@D)
	cp $< $@

# ---- runtime unit tests (tests/runtime/test_*.c, run by tests/run.py) ------
RT_TEST_SRC := $(wildcard tests/runtime/test_*.c)
RT_TESTS    := $(RT_TEST_SRC:tests/runtime/%.c=$(B)/tests/runtime/%)
BLAS_LIBS   := -lopenblas -lm

$(B)/tests/runtime/%: tests/runtime/%.c $(B)/libshdrt.a runtime/shdrt.h
	@mkdir -p $(@D)
	$(MPICC) $(CFLAGS_C) -Iruntime -o $@ $< $(B)/libshdrt.a $(BLAS_LIBS)

runtime-tests: $(RT_TESTS)

# ---- tests, demo, benchmarks ----------------------------------------------
# The python is chosen when the recipe runs: on a fresh machine NumPy is
# installed by $(B)/stamp-deps, after the makefile was read.
test: all runtime-tests
	"$$(tools/find-python)" tests/run.py --shdc $(B)/shdc --build $(B) $(TESTFLAGS)

demo: all
	tools/demo

san:
	$(MAKE) B=$(B)/san SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -Wno-format-truncation" OPT="-O1 -g" all

# Every test program, truncated and mutated, through the sanitizer build:
# shdc must answer each with diagnostics, never crash or hang.
fuzz: san
	ASAN_OPTIONS=detect_leaks=0:exitcode=86 UBSAN_OPTIONS=halt_on_error=1:exitcode=87 \
	    "$$(tools/find-python)" tests/errors/test_fuzz.py --shdc $(B)/san/shdc --all \
	    --mutations $${FUZZ_MUTATIONS:-20} --seed $${FUZZ_SEED:-1}

bench: all
	bench/run

clean:
	rm -rf $(B)

.PHONY: all test demo san fuzz bench clean runtime-tests

-include $(COMPILER_OBJ:.o=.d) $(RUNTIME_OBJ:.o=.d) $(RT_TESTS:=.d)
