# chatfs - chats with a local language model as plain files.
#
#   make              build ./chatfs
#   make test         build and run every test (the command CI runs)
#   make bench        benchmarks on synthetic models (see bench/)
#   make asan         sanitizer build (ASan+UBSan) of the tests, then run them
#   make tsan         ThreadSanitizer build of the concurrency tests
#   make fuzz         libFuzzer target for the GGUF reader (clang)
#
# Dependencies come from pkg-config: fuse3 openblas sqlite3 libcjson.

CC      ?= cc
PKGS    := fuse3 openblas sqlite3 libcjson
BUILD   ?= build
OPT     ?= -O2 -g
CFLAGS  ?= $(OPT)
CFLAGS  += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -pthread -I. -MMD -MP \
           $(shell pkg-config --cflags $(PKGS))
LDLIBS  += $(shell pkg-config --libs $(PKGS)) -lm -pthread

ENGINE_SRC := $(sort $(wildcard engine/*.c))
STORE_SRC  := $(sort $(wildcard store/*.c))
FS_SRC     := $(sort $(wildcard fs/*.c))
LIB_SRC    := $(ENGINE_SRC) $(STORE_SRC) $(FS_SRC)
LIB_OBJ    := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_SRC    := $(sort $(wildcard cli/*.c))
MAIN_OBJ   := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_SRC   := $(sort $(wildcard tests/test_*.c))
TEST_BIN   := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

# Kernels for one instruction set each; the dispatcher picks one at run time from the
# CPU's features, so the binary still runs on CPUs without AVX-512.
# -ffp-contract=off: the kernels spell out every fused multiply-add the reference has, and
# no other (a contracted a*b+c would round differently from llama.cpp).
$(BUILD)/engine/kernels_avx2.o:   CFLAGS += -mavx2 -mfma -mf16c -ffp-contract=off
$(BUILD)/engine/kernels_avx512.o: CFLAGS += -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni \
                                            -mavx512bf16 -mavx2 -mfma -mf16c -ffp-contract=off

.PHONY: all test bench asan tsan fuzz clean
all: chatfs

chatfs: $(MAIN_OBJ) $(BUILD)/libchatfs.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/libchatfs.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libchatfs.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

test: chatfs $(TEST_BIN)
	BUILD=$(BUILD) tests/run.sh

bench: chatfs
	BUILD=$(BUILD) bench/run.sh

clean:
	rm -rf build build-* chatfs

-include $(LIB_OBJ:.o=.d) $(MAIN_OBJ:.o=.d) $(TEST_BIN:=.d)
