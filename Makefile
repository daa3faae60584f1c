# chatfs - chats with a local language model as plain files.
#
#   make              build ./chatfs
#   make run          install what is missing, build, and run chatfs on the bundled model
#   make test         install what is missing, build, and run every test (the command CI runs)
#   make check        the fast loop: the room checks and the C test programs, two at a time
#                     (no package install, no llama-server, no sanitizer builds)
#   make bench        benchmarks on synthetic models (see bench/)
#   make bench-blas   OpenBLAS side by side with our own kernels (docs/performance.md)
#   make asan         sanitizer build (ASan+UBSan) of the tests, then run them
#   make tsan         ThreadSanitizer build of the concurrency tests (filesystem, engine, batching)
#   make fuzz         libFuzzer target for the GGUF reader (clang)
#   make fuzz-chatfs  libFuzzer target for the conversation logic on the fake engine (clang)
#   make fuzz-jinja   libFuzzer target for the chat templates' Jinja interpreter (clang)
#   make fuzz-toolcall libFuzzer target for the tool-call reader (clang)
#
# Dependencies come from pkg-config: fuse3 sqlite3 libcjson libcurl stb.

CC      ?= cc
PKGS    := fuse3 sqlite3 libcjson libcurl stb
BUILD   ?= build
OPT     ?= -O2 -g
CFLAGS  ?= $(OPT)
# -Wno-missing-field-initializers: a struct given its first fields has the rest zero (C11
# 6.7.9), and the code relies on it: a chat message is {"user", text}, its calls NULL.
CFLAGS  += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -pthread -I. -MMD -MP \
           $(shell pkg-config --cflags $(PKGS))
LDLIBS  += $(shell pkg-config --libs $(PKGS)) -lm -pthread

ENGINE_SRC := $(sort $(wildcard engine/*/*.c))
STORE_SRC  := $(sort $(wildcard store/*.c))
FS_SRC     := $(sort $(wildcard fs/*.c))
LIB_SRC    := $(ENGINE_SRC) $(STORE_SRC) $(FS_SRC)
LIB_OBJ    := $(LIB_SRC:%.c=$(BUILD)/%.o)
# One archive per room, linked from the top down (fs, store, then the engine's rooms in
# the reverse of engine/README.md's order): a room that called into a room above it
# would leave its symbol undefined, so the linker enforces the order check_rooms.sh reads
# in the includes. The engine's archives need no SQLite, FUSE or libcurl (ENGINE_LDLIBS).
ENGINE_ROOMS := base gguf kernels layers vision tokenizer grammar toolcall jinja template model arch runtime
reverse = $(if $(1),$(call reverse,$(wordlist 2,$(words $(1)),$(1))) $(firstword $(1)))
ENGINE_LIBS  := $(foreach r,$(call reverse,$(ENGINE_ROOMS)),$(BUILD)/lib/engine-$(r).a)
LIBS         := $(BUILD)/lib/fs.a $(BUILD)/lib/store.a $(ENGINE_LIBS)
ENGINE_LDLIBS := $(shell pkg-config --libs libcjson stb) -lm -pthread
CLI_SRC    := $(sort $(wildcard cli/*.c cli/synth/*.c))
MAIN_OBJ   := $(CLI_SRC:%.c=$(BUILD)/%.o)
# the GGUF writer and the weight quantizers: chatfs synth's, and the tests'
SYNTH_OBJ  := $(BUILD)/cli/synth/gguf_write.o $(BUILD)/cli/synth/quantize.o
TEST_SRC   := $(sort $(wildcard tests/test_*.c))
TEST_BIN   := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

# The engine's plain C loops (norms, residual adds, the experts' weighted sum, the sampler)
# run over lengths known only at run time; -O2 vectorizes a loop only when no scalar
# remainder is left, the cost model of -O3 also with one. Element-wise arithmetic gives the
# same bits either way (no reassociation without -ffast-math, no FMA without -mfma). On the
# 8-block Qwen3.5 file at one thread: six sequences' decode 1.01-1.02x, prompts 1.02-1.04x.
# The flag is GCC's; clang refuses it (and vectorizes such loops at -O2 already).
VECT_FLAGS := $(shell $(CC) -fvect-cost-model=dynamic -x c -c -o /dev/null /dev/null 2>/dev/null && echo -fvect-cost-model=dynamic)
$(BUILD)/engine/%.o: CFLAGS += $(VECT_FLAGS)

# Kernels for one instruction set each, and the layer math for each vector width
# (layers/simd_*.c); the dispatcher picks one set at run time from the CPU's features, so
# the binary still runs on CPUs without AVX-512.
# -ffp-contract=off: the kernels spell out every fused multiply-add the reference has, and
# no other (a contracted a*b+c would round differently from llama.cpp).
# -falign-loops=64: each hot loop starts on a cache line wherever the code before it ends;
# otherwise an edit to one kernel moves another's loops across cache lines and changes its
# speed without a change to its code.
AVX2_FLAGS   := -mavx2 -mfma -mf16c -ffp-contract=off -falign-loops=64
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c \
                -ffp-contract=off -falign-loops=64
$(BUILD)/engine/kernels/kernels_avx2.o $(BUILD)/engine/layers/simd_avx2.o:     CFLAGS += $(AVX2_FLAGS)
$(BUILD)/engine/kernels/kernels_avxvnni.o:                                      CFLAGS += $(AVX2_FLAGS) -mavxvnni
$(BUILD)/engine/kernels/kernels_avx512.o $(BUILD)/engine/layers/simd_avx512.o: CFLAGS += $(AVX512_FLAGS)
$(BUILD)/engine/kernels/kernels_amx.o:    CFLAGS += -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mamx-tile -mamx-int8 \
                                            -mf16c -ffp-contract=off -falign-loops=64

# chatfs --version: the release and the commit it was built from
VERSION := 0.1$(shell git rev-parse --short HEAD 2>/dev/null | sed 's/^/ (commit /; s/$$/)/')
$(BUILD)/cli/main.o: CFLAGS += -DCHATFS_VERSION='"$(VERSION)"'

.PHONY: all run test check deps bench bench-cache bench-blas bench-compression asan tsan fuzz fuzz-chatfs fuzz-jinja fuzz-toolcall clean
all: chatfs

deps:
	@tools/deps.sh

DEFAULT_MODEL ?= models/chatfs-default.gguf
MOUNTPOINT ?= mnt
# Mounts the conversations on ./mnt in the foreground (Ctrl-C unmounts); in another
# terminal: mkdir mnt/c; echo 'What is 17 + 25?' > mnt/c/message; cat mnt/c/reply
run:
	@tools/deps.sh
	@$(MAKE) --no-print-directory chatfs
	@mkdir -p $(MOUNTPOINT)
	@echo "chatfs: mounted on $(MOUNTPOINT) (Ctrl-C unmounts). Try: mkdir $(MOUNTPOINT)/c; echo 'What is 17 + 25?' > $(MOUNTPOINT)/c/message; cat $(MOUNTPOINT)/c/reply"
	./chatfs mount $(MOUNTPOINT) -f -m $(DEFAULT_MODEL)

chatfs: $(MAIN_OBJ) $(LIBS)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

.PHONY: libs
libs: $(LIBS)

define ENGINE_ROOM_ARCHIVE
$(BUILD)/lib/engine-$(1).a: $(patsubst %.c,$(BUILD)/%.o,$(sort $(wildcard engine/$(1)/*.c)))
endef
$(foreach r,$(ENGINE_ROOMS),$(eval $(call ENGINE_ROOM_ARCHIVE,$(r))))
$(BUILD)/lib/store.a: $(STORE_SRC:%.c=$(BUILD)/%.o)
$(BUILD)/lib/fs.a: $(FS_SRC:%.c=$(BUILD)/%.o)
$(LIBS):
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/libsynth.a: $(SYNTH_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libsynth.a $(LIBS)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# The tests of the engine alone link only the engine's archives, without SQLite, FUSE or
# libcurl: the engine stands as a library (a chat engine without a checkpoint store keeps
# no checkpoints, engine/runtime/checkpoint_port.h).
ENGINE_TESTS := test_chat test_default_model test_default_template test_gguf_broken test_grammar test_jinja \
                test_json_schema test_kernels test_mtp test_parity_archs test_parity_kquants test_parity_moe \
                test_parity_qwen35 test_parity_types test_parity_kv test_reply test_sampler test_template test_tokenizer test_toolcall \
                test_vision
$(ENGINE_TESTS:%=$(BUILD)/tests/%): $(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libsynth.a $(ENGINE_LIBS)
	$(CC) $(CFLAGS) -o $@ $^ $(ENGINE_LDLIBS)

# The chat-template renderer of the Jinja parity test and benchmark (tests/t_jinja.sh)
$(BUILD)/tests/jinja_render: $(BUILD)/tests/jinja/jinja_render.o $(LIBS)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

test:
	@tools/deps.sh
	@$(MAKE) --no-print-directory check-all

# Everything: the C test programs, the end-to-end scripts (tests/t_*.sh: the mount driven
# by real tools, a real llama-server, python-jinja2), the sanitizer builds, a fuzz smoke.
check-all: check-rooms check-docs chatfs $(TEST_BIN) $(BUILD)/tests/jinja_render sanitized-gguf sanitized-fs fuzz-smoke
	BUILD=$(BUILD) tests/run.sh

# The inner loop: the same C test programs, run two at a time, each one's output whole.
UNIT_RUNS := $(TEST_BIN:$(BUILD)/tests/%=unit-%)
.PHONY: check-all unit-tests $(UNIT_RUNS)
check: check-rooms check-docs chatfs $(TEST_BIN)
	@$(MAKE) --no-print-directory -k -j2 -O unit-tests
unit-tests: $(UNIT_RUNS)
$(UNIT_RUNS): unit-%:
	@$(BUILD)/tests/$* || { echo "FAILED: $(BUILD)/tests/$*"; exit 1; }

# The engine's rooms include only the rooms below them (engine/README.md), and the
# archives use only the rooms below them.
.PHONY: check-rooms
check-rooms: $(LIBS)
	@tools/check_rooms.sh
	@tools/check_links.sh $(LIBS)

# Every path the documents and comments name exists; each room's code table lists its files.
.PHONY: check-docs
check-docs:
	@python3 tools/check_docs.py

# The GGUF reader must stay clean under ASan/UBSan on the broken-file corpus, and the
# tool-call reader on every prefix of its cases: make test always runs those tests in a
# sanitizer build too.
SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
.PHONY: sanitized-gguf
sanitized-gguf:
	$(MAKE) --no-print-directory BUILD=build-asan OPT="-O1 -g $(SAN)" build-asan/tests/test_gguf_broken \
	    build-asan/tests/test_toolcall
	ASAN_OPTIONS=detect_leaks=1 build-asan/tests/test_gguf_broken
	ASAN_OPTIONS=detect_leaks=1 build-asan/tests/test_toolcall

# The filesystem's logic (fake engine, threads, random operations) under ASan+UBSan and
# TSan: quick, so make test always runs both.
.PHONY: sanitized-fs
# after sanitized-gguf: under make -j both would rebuild build-asan's archives at once
sanitized-fs: sanitized-gguf
	$(MAKE) --no-print-directory BUILD=build-asan OPT="-O1 -g $(SAN)" build-asan/tests/test_chatfs
	ASAN_OPTIONS=detect_leaks=1 build-asan/tests/test_chatfs
	$(MAKE) --no-print-directory tsan

# ThreadSanitizer: the filesystem's logic (fake engine), the engine API, the remote
# backend's worker (test_remote: a loopback server), many conversations batched at once
# on a real (tiny) model (CHATFS_TEST_QUICK: one model, fewer bursts), speculative
# decoding through the engine, and one chat template rendered from several threads
# (test_jinja's interpreter, test_template's templates shared by counted references). The
# ISA kernels - arithmetic on buffers their callers own - are built without
# instrumentation there, and so is the layer math per instruction set; that makes the
# model runs several times faster; the thread pool, the dispatch into the kernels and
# everything around stay instrumented.
TSAN_TESTS := test_chatfs test_chat test_concurrency test_spec_engine test_remote test_jinja test_template test_vision_chat
tsan:
	$(MAKE) --no-print-directory BUILD=build-tsan OPT="-O1 -g -fsanitize=thread" $(TSAN_TESTS:%=build-tsan/tests/%)
	TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_chatfs
	TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_chat
	TSAN_OPTIONS=halt_on_error=1 CHATFS_TEST_QUICK=1 build-tsan/tests/test_concurrency
	TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_spec_engine
	TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_remote
	TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_jinja
	TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/test_template
ifeq ($(BUILD),build-tsan)
ISA_OBJ := $(addprefix $(BUILD)/engine/,kernels/kernels_avx2.o kernels/kernels_avxvnni.o kernels/kernels_avx512.o \
             kernels/kernels_amx.o layers/simd_avx2.o layers/simd_avx512.o)
$(ISA_OBJ): CFLAGS += -fno-sanitize=thread
endif

# Every test under ASan+UBSan (slow: the kernels' scalar path runs unoptimised).
asan:
	$(MAKE) --no-print-directory BUILD=build-asan OPT="-O1 -g $(SAN)" libs \
	    $(TEST_SRC:tests/%.c=build-asan/tests/%) build-asan/tests/jinja_render chatfs-asan
	BUILD=build-asan CHATFS=./chatfs-asan tests/run.sh

chatfs-asan: $(LIB_SRC) $(CLI_SRC)
	$(MAKE) --no-print-directory BUILD=build-asan OPT="-O1 -g $(SAN)" libs $(CLI_SRC:%.c=build-asan/%.o)
	$(CC) -O1 -g $(SAN) -o $@ $(CLI_SRC:%.c=build-asan/%.o) $(LIBS:$(BUILD)/%=build-asan/%) $(LDLIBS)

# libFuzzer target for the GGUF reader (Debian's clang). FUZZ_SECONDS of fuzzing,
# starting from the fixtures.
FUZZ_SECONDS ?= 60
FUZZ_BIN := build-fuzz/fuzz_gguf
$(FUZZ_BIN): tests/fuzz/fuzz_gguf.c engine/gguf/gguf.c engine/gguf/gguf.h
	@mkdir -p $(dir $@)
	clang -std=gnu11 -O1 -g -I. -fsanitize=fuzzer,address,undefined -o $@ tests/fuzz/fuzz_gguf.c engine/gguf/gguf.c
fuzz: $(FUZZ_BIN)
	@mkdir -p build-fuzz/corpus
	cp -n tests/fixtures/*.gguf build-fuzz/corpus/ 2>/dev/null || true
	$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -max_len=4096 build-fuzz/corpus

# libFuzzer target for the conversation logic (fs/chatfs.c, files.c and the files they
# delegate to: names.c, scratch.c, conv.c, generation.c, views.c, commit.c; fs/settings.c, which
# compiles a settings.json's chat_template with the engine's template room, its grammar and
# response_format with the grammar room) on the fake engine: each input a
# script of operations (see tests/fuzz/fuzz_chatfs.c), starting from the hand-written ones
# in tests/fuzz/chatfs/; new inputs go to build-fuzz/corpus-chatfs.
FUZZ_FS_BIN := build-fuzz/fuzz_chatfs
FUZZ_FS_SRC := tests/fuzz/fuzz_chatfs.c fs/chatfs.c fs/files.c fs/names.c fs/scratch.c fs/copyin.c fs/text.c fs/conv.c fs/generation.c \
               fs/views.c fs/commit.c fs/import.c fs/calls.c fs/attachments.c fs/data_url.c \
               fs/settings.c fs/backend_fake.c store/conversations.c store/db.c \
               $(sort $(wildcard engine/template/*.c engine/jinja/*.c engine/tokenizer/*.c engine/grammar/*.c \
                                 engine/toolcall/*.c)) \
               engine/gguf/gguf.c engine/base/strbuf.c engine/base/hash.c
FUZZ_FS_RUN := $(FUZZ_FS_BIN) -max_len=4096 -timeout=10 -artifact_prefix=build-fuzz/ \
               build-fuzz/corpus-chatfs tests/fuzz/chatfs
$(FUZZ_FS_BIN): $(FUZZ_FS_SRC) $(wildcard fs/*.h engine/template/*.h engine/jinja/*.h engine/tokenizer/*.h \
                                engine/grammar/*.h engine/toolcall/*.h) store/db.h \
                engine/runtime/chat.h
	@mkdir -p $(dir $@)
	clang -std=gnu11 -O1 -g -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -I. $(shell pkg-config --cflags libcjson sqlite3) \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $@ $(FUZZ_FS_SRC) \
	    $(shell pkg-config --libs libcjson sqlite3) -lm -pthread
fuzz-chatfs: $(FUZZ_FS_BIN)
	@mkdir -p build-fuzz/corpus-chatfs
	$(FUZZ_FS_RUN) -max_total_time=$(FUZZ_SECONDS)

# libFuzzer target for the Jinja interpreter (engine/jinja/): an input is template text, a
# NUL and message contents (see tests/fuzz/fuzz_jinja.c). The corpus starts from the
# hand-written tests/fuzz/jinja/ and llama.cpp's chat templates (copied at run time from
# tools/llama-cpp-src.sh's tree, each with a short conversation); tests/fuzz/jinja.dict
# holds Jinja's vocabulary.
FUZZ_JINJA_BIN := build-fuzz/fuzz_jinja
FUZZ_JINJA_SRC := tests/fuzz/fuzz_jinja.c $(sort $(wildcard engine/jinja/*.c))
FUZZ_JINJA_RUN := $(FUZZ_JINJA_BIN) -max_len=65536 -timeout=10 -dict=tests/fuzz/jinja.dict \
                  -artifact_prefix=build-fuzz/ build-fuzz/corpus-jinja tests/fuzz/jinja
$(FUZZ_JINJA_BIN): $(FUZZ_JINJA_SRC) $(wildcard engine/jinja/*.h)
	@mkdir -p $(dir $@)
	clang -std=gnu11 -O1 -g -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -I. $(shell pkg-config --cflags libcjson) \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $@ $(FUZZ_JINJA_SRC) \
	    $(shell pkg-config --libs libcjson) -lm
.PHONY: fuzz-jinja-corpus
fuzz-jinja-corpus:
	@mkdir -p build-fuzz/corpus-jinja
	@src=$$(tools/llama-cpp-src.sh 2>/dev/null) && for f in "$$src"/models/templates/*.jinja; do \
	    seed=build-fuzz/corpus-jinja/template-$$(basename "$$f" .jinja); \
	    [ -f "$$seed" ] || { cat "$$f"; printf '\0\001S Be brief.\001Hi\001R<think>\002Hello!\001What is 2+2?'; } > "$$seed"; \
	done || echo "fuzz-jinja: llama.cpp's templates are not available, starting from tests/fuzz/jinja only"
fuzz-jinja: $(FUZZ_JINJA_BIN) fuzz-jinja-corpus
	$(FUZZ_JINJA_RUN) -max_total_time=$(FUZZ_SECONDS)

# libFuzzer target for the tool-call reader (engine/toolcall/): an input is a family, a cut
# and an answer text (see tests/fuzz/fuzz_toolcall.c); the corpus starts from the
# hand-written tests/fuzz/toolcall/, tests/fuzz/toolcall.dict holds the families' markers.
FUZZ_TC_BIN := build-fuzz/fuzz_toolcall
# (the reader alone: call_grammar.c, which writes grammars, links the grammar room)
FUZZ_TC_SRC := tests/fuzz/fuzz_toolcall.c $(sort $(filter-out engine/toolcall/call_grammar.c,$(wildcard engine/toolcall/*.c))) \
               engine/base/strbuf.c
FUZZ_TC_RUN := $(FUZZ_TC_BIN) -max_len=4096 -timeout=10 -dict=tests/fuzz/toolcall.dict \
               -artifact_prefix=build-fuzz/ build-fuzz/corpus-toolcall tests/fuzz/toolcall
$(FUZZ_TC_BIN): $(FUZZ_TC_SRC) $(wildcard engine/toolcall/*.h)
	@mkdir -p $(dir $@)
	clang -std=gnu11 -O1 -g -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -I. $(shell pkg-config --cflags libcjson) \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $@ $(FUZZ_TC_SRC) \
	    $(shell pkg-config --libs libcjson)
fuzz-toolcall: $(FUZZ_TC_BIN)
	@mkdir -p build-fuzz/corpus-toolcall
	$(FUZZ_TC_RUN) -max_total_time=$(FUZZ_SECONDS)

# make test: the GGUF reader for 20000 inputs, the conversation logic for FUZZ_SMOKE_RUNS
# inputs (about 20 s), the Jinja interpreter for FUZZ_JINJA_SMOKE_RUNS, the tool-call
# reader for FUZZ_TC_SMOKE_RUNS, all from a fixed
# seed: a smoke run in make test checks that nothing
# known breaks, and finding new bugs is what make fuzz / fuzz-chatfs are for. (The
# conversation target's engine thread still makes its coverage, and so its later inputs,
# vary a little from run to run.) A crash, leak or failed check fails it and leaves
# the input in build-fuzz/crash-* or leak-* (CHATFS_FUZZ_TRACE=1 build-fuzz/fuzz_chatfs FILE
# shows what a script does). Their output goes to build-fuzz/*.log: piped into tail, a
# crash would not fail make.
FUZZ_SMOKE_RUNS ?= 3000
FUZZ_JINJA_SMOKE_RUNS ?= 10000
FUZZ_TC_SMOKE_RUNS ?= 20000
.PHONY: fuzz-smoke
fuzz-smoke: $(FUZZ_BIN) $(FUZZ_FS_BIN) $(FUZZ_JINJA_BIN) $(FUZZ_TC_BIN) fuzz-jinja-corpus
	@mkdir -p build-fuzz/corpus build-fuzz/corpus-chatfs build-fuzz/corpus-toolcall
	cp -n tests/fixtures/*.gguf build-fuzz/corpus/ 2>/dev/null || true
	$(FUZZ_BIN) -seed=1 -runs=20000 -max_len=4096 -artifact_prefix=build-fuzz/ build-fuzz/corpus >build-fuzz/fuzz_gguf.log 2>&1 || \
	    { tail -n 40 build-fuzz/fuzz_gguf.log; exit 1; }
	@tail -n 2 build-fuzz/fuzz_gguf.log
	$(FUZZ_FS_RUN) -seed=1 -runs=$(FUZZ_SMOKE_RUNS) >build-fuzz/fuzz_chatfs.log 2>&1 || \
	    { tail -n 40 build-fuzz/fuzz_chatfs.log; exit 1; }
	@grep -E '^(#[0-9]+[[:space:]]+DONE|Done )' build-fuzz/fuzz_chatfs.log
	$(FUZZ_JINJA_RUN) -seed=1 -runs=$(FUZZ_JINJA_SMOKE_RUNS) >build-fuzz/fuzz_jinja.log 2>&1 || \
	    { tail -n 40 build-fuzz/fuzz_jinja.log; exit 1; }
	@grep -E '^(#[0-9]+[[:space:]]+DONE|Done )' build-fuzz/fuzz_jinja.log
	$(FUZZ_TC_RUN) -seed=1 -runs=$(FUZZ_TC_SMOKE_RUNS) >build-fuzz/fuzz_toolcall.log 2>&1 || \
	    { tail -n 40 build-fuzz/fuzz_toolcall.log; exit 1; }
	@grep -E '^(#[0-9]+[[:space:]]+DONE|Done )' build-fuzz/fuzz_toolcall.log

bench: chatfs $(BUILD)/bench/cache_bench $(BUILD)/bench/concurrency_bench $(BUILD)/bench/spec_heldout \
       $(BUILD)/bench/vision_bench
	BUILD=$(BUILD) bench/run.sh

# The benchmark programs: bench/cache_bench.c (bench/cache.sh: cold, warm and
# after-restart TTFT), bench/concurrency_bench.c (bench/concurrency.sh: batched decode,
# single flight) and bench/spec_heldout.c (bench/speculative.sh: the default model's
# drafts on its held-out conversations).
$(BUILD)/bench/%: bench/%.c $(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
bench-cache: chatfs $(BUILD)/bench/cache_bench
	bench/cache.sh
# OpenBLAS side by side with our kernels (docs/performance.md, "OpenBLAS"; two to three
# minutes). chatfs does not use OpenBLAS: this measurement alone links it (Debian:
# libopenblas-dev).
BLAS_PAIRS ?= 5
$(BUILD)/bench/blas_bench: bench/blas_bench.c $(LIBS)
	@pkg-config --exists openblas || { echo "make bench-blas: needs OpenBLAS (Debian: libopenblas-dev)"; exit 1; }
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(shell pkg-config --cflags openblas 2>/dev/null) -o $@ $^ $(LDLIBS) \
	    $(shell pkg-config --libs openblas 2>/dev/null)
bench-blas: $(BUILD)/bench/blas_bench
	$(BUILD)/bench/blas_bench $(BLAS_PAIRS)
# zstd on the bundled model's stored states (docs/checkpoints.md, "Compression"; about a
# minute). chatfs does not compress them: the zstd command alone measures it.
bench-compression: chatfs
	bench/state_compression.sh

clean:
	rm -rf build build-* chatfs chatfs-asan

-include $(LIB_OBJ:.o=.d) $(MAIN_OBJ:.o=.d) $(TEST_BIN:=.d) $(BUILD)/tests/jinja/jinja_render.d
