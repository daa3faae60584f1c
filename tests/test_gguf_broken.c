/* test_gguf_broken.c - the GGUF reader and model loader against a corpus of broken
 * files made from a good one: truncated at many offsets, huge counts, wrong types, bad
 * alignment, a bool that is not 0 or 1, a missing tensor, a known key of the wrong type,
 * an unknown architecture or tokenizer, control bytes in the names a message quotes.
 * Each must give one clear line naming the file and the problem, never a crash (make test
 * runs it under ASan/UBSan too). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/gguf/gguf.h"
#include "engine/arch/arch.h"
#include "tests/check.h"
#include "tests/oracle.h"

static unsigned char *good;
static size_t good_n;

/* offset of the first occurrence of a byte string in the good file */
static size_t find(const void *needle, size_t n) {
    for (size_t i = 0; i + n <= good_n; i++)
        if (!memcmp(good + i, needle, n)) return i;
    return (size_t)-1;
}

static int one_line(const char *err) { return err[0] && !strchr(err, '\n'); }

/* parse a mutated copy: must fail with a message containing `expect` (if given) */
static void must_fail(const char *what, const unsigned char *buf, size_t n, const char *expect) {
    char err[512] = "";
    gguf_file *f = gguf_open_buffer(buf, n, "broken.gguf", err, sizeof err);
    CHECK(!f, "%s: parsed a broken file", what);
    CHECK(one_line(err) && !strncmp(err, "broken.gguf: ", 13), "%s: bad message '%s'", what, err);
    if (expect) CHECK(strstr(err, expect), "%s: message '%s' lacks '%s'", what, err, expect);
    gguf_close(f);
}

static unsigned char *copy(void) {
    unsigned char *b = malloc(good_n);
    memcpy(b, good, good_n);
    return b;
}

static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }

/* writes buf to tests/tmp/NAME and runs model_load: must fail with `expect` */
static void load_must_fail(const char *name, const unsigned char *buf, size_t n, const char *expect) {
    char path[256], err[512] = "";
    mkdir("tests/tmp", 0755);
    snprintf(path, sizeof path, "tests/tmp/%s", name);
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(buf, 1, n, f) == n && fclose(f) == 0, "cannot write %s", path);
    model *m = model_load(path, err, sizeof err);
    CHECK(!m, "%s: loaded", name);
    CHECK(one_line(err) && strstr(err, expect), "%s: message '%s' lacks '%s'", name, err, expect);
    model_free(m);
    remove(path);
}

int main(void) {
    good = (unsigned char *)read_file(FIXTURES "qwen35-tiny-q8_0.gguf", &good_n);
    REQUIRE(good, "missing fixture");
    char err[512];
    gguf_file *g = gguf_open_buffer(good, good_n, "good.gguf", err, sizeof err);
    REQUIRE(g, "the good file does not parse: %s", err);
    const uint64_t data_off = g->data_offset;

    /* 1. truncated: every offset through the header, then a sample through the data */
    int truncs = 0;
    for (size_t n = 0; n < good_n; n += n < data_off + 64 ? 1 : 997) {
        char e[512] = "";
        gguf_file *f = gguf_open_buffer(good, n, "broken.gguf", e, sizeof e);
        CHECK(!f && one_line(e), "truncated at %zu: %s", n, f ? "parsed" : e);
        gguf_close(f);
        truncs++;
    }
    printf("  %d truncations refused\n", truncs);

    /* 2. huge counts in the header */
    unsigned char *b = copy();
    put_u64(b + 8, (uint64_t)1 << 60);
    must_fail("huge tensor count", b, good_n, "tensors");
    memcpy(b, good, good_n);
    put_u64(b + 16, UINT64_MAX);
    must_fail("huge metadata count", b, good_n, "metadata");
    free(b);

    /* 3. a string length running past the end: the architecture value */
    size_t k = find("general.architecture", 20);
    REQUIRE(k != (size_t)-1, "no general.architecture key");
    b = copy();
    put_u64(b + k + 20 + 4, (uint64_t)1 << 40); /* key, u32 type, then the string's u64 length */
    must_fail("string past the end", b, good_n, "length");
    /* 4. wrong value type */
    memcpy(b, good, good_n);
    put_u32(b + k + 20, 77);
    must_fail("unknown value type", b, good_n, "unknown value type");
    /* 5. array of arrays */
    size_t t = find("tokenizer.ggml.tokens", 21);
    memcpy(b, good, good_n);
    put_u32(b + t + 21 + 4, GGUF_ARRAY);
    must_fail("nested array", b, good_n, "array");
    /* 6. an array count larger than the file */
    memcpy(b, good, good_n);
    put_u64(b + t + 21 + 8, (uint64_t)1 << 50);
    must_fail("huge array", b, good_n, "past the end");
    /* 7. a bool that is neither 0 nor 1 */
    size_t bo = find("tokenizer.ggml.add_bos_token", 28);
    REQUIRE(bo != (size_t)-1, "no tokenizer.ggml.add_bos_token");
    memcpy(b, good, good_n);
    REQUIRE(good[bo + 28] == GGUF_BOOL, "add_bos_token is not a bool");
    b[bo + 28 + 4] = 2; /* key, u32 type, then the value byte */
    must_fail("bad bool", b, good_n, "bool");
    free(b);

    /* tensor-info corruptions: find the info of token_embd.weight (name, n_dims, ne, type, offset) */
    size_t ti = find("token_embd.weight", 17);
    REQUIRE(ti != (size_t)-1, "no token_embd");
    size_t dims = ti + 17, ne0 = dims + 4, type = ne0 + 16, off = type + 4;
    b = copy();
    put_u32(b + dims, 7);
    must_fail("too many dims", b, good_n, "dimensions");
    memcpy(b, good, good_n);
    put_u64(b + ne0, 0);
    must_fail("zero dim", b, good_n, "shape");
    memcpy(b, good, good_n);
    put_u64(b + ne0 + 8, (uint64_t)1 << 62);
    must_fail("overflowing shape", b, good_n, "token_embd.weight");
    memcpy(b, good, good_n);
    put_u32(b + type, 99);
    must_fail("unknown ggml type", b, good_n, "unknown type");
    memcpy(b, good, good_n);
    put_u64(b + ne0, 48); /* not a multiple of the Q8_0 block */
    must_fail("row not a block multiple", b, good_n, "block size");
    memcpy(b, good, good_n);
    b[ti + 5] = '\n'; /* a name with a newline in a message: still one line */
    put_u32(b + dims, 7);
    must_fail("newline in a tensor name", b, good_n, "tensor 'token?embd.weight' has 7 dimensions");
    memcpy(b, good, good_n);
    put_u64(b + off, 3);
    must_fail("misaligned offset", b, good_n, "aligned");
    memcpy(b, good, good_n);
    put_u64(b + off, good_n);
    must_fail("tensor past the end", b, good_n, "runs past the end of the file");
    /* 8. bad alignment value */
    size_t al = find("general.alignment", 17);
    REQUIRE(al != (size_t)-1, "no general.alignment");
    memcpy(b, good, good_n);
    put_u32(b + al + 17 + 4, 3);
    must_fail("alignment not a power of two", b, good_n, "alignment");
    /* 9. bad magic and version */
    memcpy(b, good, good_n);
    b[0] = 'X';
    must_fail("bad magic", b, good_n, "not a GGUF file");
    memcpy(b, good, good_n);
    put_u32(b + 4, 99);
    must_fail("bad version", b, good_n, "version");

    /* model-level: structurally valid files the loader must refuse */
    memcpy(b, good, good_n);
    memcpy(b + ti, "token_embd.weigh_", 17); /* token_embd now missing */
    load_must_fail("missing.gguf", b, good_n, "tensor 'token_embd.weight' is missing");
    memcpy(b, good, good_n);
    size_t a = find("qwen35", 6); /* the architecture value */
    memcpy(b + a, "qwen99", 6);
    load_must_fail("unknown-arch.gguf", b, good_n, "architecture 'qwen99' is not supported");
    memcpy(b, good, good_n);
    b[a + 3] = '\n';
    load_must_fail("arch-newline.gguf", b, good_n, "arch-newline.gguf: architecture 'qwe?35' is not supported");
    memcpy(b, good, good_n);
    size_t tm = find("tokenizer.ggml.model", 20);
    REQUIRE(tm != (size_t)-1 && !memcmp(good + tm + 20 + 4 + 8, "gpt2", 4), "no tokenizer.ggml.model = gpt2");
    memcpy(b + tm + 20 + 4 + 8, "gpx2", 4); /* key, u32 type, u64 length, then the text */
    load_must_fail("bad-tokenizer.gguf", b, good_n, "bad-tokenizer.gguf: unsupported tokenizer model 'gpx2'");
    memcpy(b, good, good_n);
    size_t bc = find("qwen35.block_count", 18);
    REQUIRE(bc != (size_t)-1, "no qwen35.block_count");
    put_u32(b + bc + 18, GGUF_F32); /* a known key with a value of the wrong type (same size) */
    load_must_fail("wrong-type.gguf", b, good_n, "metadata 'qwen35.block_count' has the wrong type");
    memcpy(b, good, good_n);
    size_t blk = find("blk.3.attn_q.weight", 19);
    REQUIRE(blk != (size_t)-1, "no blk.3.attn_q.weight");
    put_u64(b + blk + 19 + 4 + 8, 64); /* half the rows: a wrong shape */
    load_must_fail("wrong-shape.gguf", b, good_n, "blk.3.attn_q.weight");
    free(b);

    /* random byte flips: no crash, and either parses or gives one line */
    srand(1234);
    int parsed = 0;
    for (int i = 0; i < 3000; i++) {
        b = copy();
        size_t lim = data_off < good_n ? data_off : good_n;
        for (int f = 0; f < 1 + i % 4; f++) b[(size_t)rand() % lim] ^= (unsigned char)(1 + rand() % 255);
        char e[512] = "";
        gguf_file *f = gguf_open_buffer(b, good_n, "broken.gguf", e, sizeof e);
        if (f) parsed++;
        else CHECK(one_line(e), "flip %d: bad message", i);
        gguf_close(f);
        free(b);
    }
    printf("  3000 random corruptions: %d still parse, the rest refused with one line\n", parsed);
    gguf_close(g);
    free(good);
    return check_report("test_gguf_broken");
}
