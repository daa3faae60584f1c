/* fuzz_gguf.c - libFuzzer target for the GGUF reader: any byte string must give either
 * a parsed file whose every pointer lies inside the input, or one error line.
 *   make fuzz            (clang -fsanitize=fuzzer,address,undefined; runs FUZZ_SECONDS) */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/gguf/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    gguf_file *f = gguf_open_buffer(data, size, "fuzz.gguf", err, sizeof err);
    if (!f) {
        if (!err[0] || strchr(err, '\n')) __builtin_trap(); /* one line, always */
        return 0;
    }
    /* touch everything the parser handed out */
    volatile uint64_t sink = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        sink += kv->key.len ? (uint8_t)kv->key.s[kv->key.len - 1] : 0;
        if (kv->type == GGUF_ARRAY && kv->arr_type == GGUF_STRING && kv->arr_n < 4096) {
            gguf_str strs[4096];
            gguf_arr_strs(kv, strs);
            for (uint64_t k = 0; k < kv->arr_n; k++) sink += strs[k].len ? (uint8_t)strs[k].s[strs[k].len - 1] : 0;
        } else if (kv->type == GGUF_ARRAY && kv->arr_n) {
            int64_t v;
            gguf_arr_i64(kv, kv->arr_n - 1, &v);
            sink += (uint64_t)v;
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (t->nbytes) sink += ((const uint8_t *)t->data)[t->nbytes - 1];
    }
    (void)sink;
    gguf_close(f);
    return 0;
}
