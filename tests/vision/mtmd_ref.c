/* mtmd_ref - llama.cpp's image path, as a reference for chatfs's vision tests.
 *
 *   mtmd_ref MODEL MMPROJ IMAGE [-t N] [--fa on|off] [--embd OUT.f32]
 *            [-p "text <__media__> text"] [--logits OUT.f32] [-n N] [--pixels OUT.rgb]
 *            [--dump TENSOR=OUT.f32] [--reps R]
 *
 * Loads the text model and its projector with llama.cpp's mtmd library (built by
 * mtmd-ref.sh from the release tools/llama-cpp-src.sh extracts), decodes IMAGE the way
 * llama-server does (mtmd_helper_bitmap_init_from_file), and prints one JSON line: the
 * image's grid, token and position counts, the prompt's chunks' tokens and the greedy
 * continuation. --pixels writes the decoded RGB bytes (before any resize), --embd the
 * projector's output (n_tokens x n_embd floats, a row per image token), --logits the
 * last prompt position's logits. The KV cache is F32, so the comparison needs no
 * cache-type tolerance. Not part of chatfs: the tests read only the files it wrote
 * (tests/fixtures/vision/make.sh). --reps R times the image's encode R times
 * (bench/vision.sh).
 */
#include "llama.h"
#include "mtmd.h"
#include "mtmd-helper.h"
#include "ggml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static bool no_progress(float progress, void *user) {
    (void)progress, (void)user;
    return true;
}

/* --dump NAME=FILE: the encoder's tensor NAME (clip's names: inp_pos_emb, ln1-0, Qcur_rope-0,
 * kqv_out-0, layer_out-0, ...) as floats, when it is computed */
static const char *dump_name, *dump_file;
static bool dump_tensor(struct ggml_tensor *t, bool ask, void *user) {
    (void)user;
    if (!dump_name || strcmp(ggml_get_name(t), dump_name)) return ask ? false : true;
    if (ask) return true;
    if (t->type == GGML_TYPE_F32 && ggml_is_contiguous(t)) {
        FILE *f = fopen(dump_file, "wb");
        if (f) fwrite(t->data, sizeof(float), (size_t)ggml_nelements(t), f), fclose(f);
        fprintf(stderr, "mtmd_ref: %s [%lld %lld %lld %lld] to %s\n", dump_name, (long long)t->ne[0],
                (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], dump_file);
    }
    return true;
}

static int write_floats(const char *path, const float *v, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(v, sizeof *v, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "mtmd_ref: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: mtmd_ref MODEL MMPROJ IMAGE [-t N] [--fa on|off] [--embd F] "
                        "[-p PROMPT] [--logits F] [-n N]\n");
        return 2;
    }
    const char *model_path = argv[1], *mmproj_path = argv[2], *image_path = argv[3];
    const char *embd_out = NULL, *logits_out = NULL, *prompt = NULL, *pixels_out = NULL;
    int threads = 2, n_gen = 0, fa = 0, reps = 0;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--fa")) fa = !strcmp(argv[i + 1], "on");
        else if (!strcmp(argv[i], "--embd")) embd_out = argv[i + 1];
        else if (!strcmp(argv[i], "--logits")) logits_out = argv[i + 1];
        else if (!strcmp(argv[i], "--pixels")) pixels_out = argv[i + 1];
        else if (!strcmp(argv[i], "--dump") && strchr(argv[i + 1], '=')) {
            static char spec[256];
            snprintf(spec, sizeof spec, "%s", argv[i + 1]);
            *strchr(spec, '=') = 0;
            dump_name = spec, dump_file = spec + strlen(spec) + 1;
        }
        else if (!strcmp(argv[i], "-p")) prompt = argv[i + 1];
        else if (!strcmp(argv[i], "-n")) n_gen = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else { fprintf(stderr, "mtmd_ref: unknown option %s\n", argv[i]); return 2; }
    }
    llama_log_set(quiet, NULL);
    mtmd_helper_log_set(quiet, NULL);
    llama_backend_init();

    struct llama_model_params mp = llama_model_default_params();
    mp.progress_callback = no_progress;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) { fprintf(stderr, "mtmd_ref: cannot load %s\n", model_path); return 1; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 4096;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *lctx = llama_init_from_model(model, cp);
    if (!lctx) { fprintf(stderr, "mtmd_ref: cannot make a context\n"); return 1; }

    struct mtmd_context_params mcp = mtmd_context_params_default();
    mcp.use_gpu = false;
    mcp.n_threads = threads;
    mcp.print_timings = false;
    mcp.warmup = false;
    mcp.flash_attn_type = fa ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    if (dump_name) mcp.cb_eval = dump_tensor;
    mtmd_context *mctx = mtmd_init_from_file(mmproj_path, model, mcp);
    if (!mctx) { fprintf(stderr, "mtmd_ref: cannot load %s\n", mmproj_path); return 1; }

    struct mtmd_helper_bitmap_wrapper bw =
        mtmd_helper_bitmap_init_from_file(mctx, image_path, false, mtmd_helper_init_opt_default());
    if (!bw.bitmap) { fprintf(stderr, "mtmd_ref: cannot decode %s\n", image_path); return 1; }
    if (pixels_out) {
        FILE *f = fopen(pixels_out, "wb");
        size_t n = mtmd_bitmap_get_n_bytes(bw.bitmap);
        if (!f || fwrite(mtmd_bitmap_get_data(bw.bitmap), 1, n, f) != n || fclose(f) != 0) {
            fprintf(stderr, "mtmd_ref: cannot write %s\n", pixels_out);
            return 1;
        }
    }

    mtmd_input_chunks *chunks = mtmd_input_chunks_init();
    struct mtmd_input_text text = {
        prompt ? prompt : mtmd_default_marker(), 0, false, true
    };
    text.text_len = strlen(text.text);
    const mtmd_bitmap *bitmaps[1] = { bw.bitmap };
    int rc = mtmd_tokenize(mctx, chunks, &text, bitmaps, 1);
    if (rc != 0) { fprintf(stderr, "mtmd_ref: mtmd_tokenize failed (%d)\n", rc); return 1; }

    const int n_embd = llama_model_n_embd_inp(model);
    double encode_ms = -1;
    printf("{\"image_nx\":%u,\"image_ny\":%u,\"chunks\":[", mtmd_bitmap_get_nx(bw.bitmap),
           mtmd_bitmap_get_ny(bw.bitmap));
    for (size_t c = 0; c < mtmd_input_chunks_size(chunks); c++) {
        const mtmd_input_chunk *ch = mtmd_input_chunks_get(chunks, c);
        if (c) printf(",");
        if (mtmd_input_chunk_get_type(ch) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
            size_t n = 0;
            const llama_token *t = mtmd_input_chunk_get_tokens_text(ch, &n);
            printf("{\"text\":[");
            for (size_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", t[i]);
            printf("]}");
            continue;
        }
        const mtmd_image_tokens *it = mtmd_input_chunk_get_tokens_image(ch);
        size_t n_tok = mtmd_input_chunk_get_n_tokens(ch);
        struct mtmd_decoder_pos p0 = mtmd_image_tokens_get_decoder_pos(it, 0, 0);
        struct mtmd_decoder_pos pl = mtmd_image_tokens_get_decoder_pos(it, 0, n_tok - 1);
        printf("{\"image_tokens\":%zu,\"n_pos\":%d,\"grid_x\":%u,\"grid_y\":%u}", n_tok,
               (int)mtmd_input_chunk_get_n_pos(ch), pl.x - p0.x + 1, pl.y - p0.y + 1);
        if (embd_out) {
            if (mtmd_encode_chunk(mctx, ch) != 0) { fprintf(stderr, "mtmd_ref: encode failed\n"); return 1; }
            if (write_floats(embd_out, mtmd_get_output_embd(mctx), n_tok * (size_t)n_embd)) return 1;
        }
        /* --reps R: the encode timed R times (preprocessing included, as the bitmap is
         * resized and normalised inside mtmd_encode_chunk's preparation), the median */
        double ms[64];
        int nr = reps < 64 ? reps : 64;
        for (int r = 0; r < nr; r++) {
            const int64_t t0 = ggml_time_us();
            if (mtmd_encode_chunk(mctx, ch) != 0) { fprintf(stderr, "mtmd_ref: encode failed\n"); return 1; }
            ms[r] = (double)(ggml_time_us() - t0) / 1e3;
        }
        for (int a = 0; a < nr; a++)
            for (int b = a + 1; b < nr; b++)
                if (ms[b] < ms[a]) { double t = ms[a]; ms[a] = ms[b]; ms[b] = t; }
        if (nr > 0) encode_ms = ms[nr / 2];
    }
    printf("]");
    if (encode_ms >= 0) printf(",\"encode_ms\":%.1f", encode_ms);

    llama_pos n_past = 0;
    if (prompt) {
        if (mtmd_helper_eval_chunks(mctx, lctx, chunks, 0, 0, (int)cp.n_batch, true, &n_past)) {
            fprintf(stderr, "mtmd_ref: eval failed\n");
            return 1;
        }
        const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
        if (logits_out && write_floats(logits_out, llama_get_logits_ith(lctx, -1), (size_t)n_vocab))
            return 1;
        printf(",\"n_past\":%d,\"greedy\":[", (int)n_past);
        for (int g = 0; g < n_gen; g++) {
            const float *lg = llama_get_logits_ith(lctx, -1);
            llama_token best = 0;
            for (int v = 1; v < n_vocab; v++) if (lg[v] > lg[best]) best = v;
            printf("%s%d", g ? "," : "", best);
            struct llama_batch b = llama_batch_get_one(&best, 1);
            /* after an image, positions are not the token count: M-RoPE models take 4 */
            llama_pos pos[4] = { n_past, n_past, n_past, 0 };
            if (mtmd_decode_use_mrope(mctx)) b.pos = pos;
            if (llama_decode(lctx, b)) { fprintf(stderr, "mtmd_ref: decode failed\n"); return 1; }
            n_past++;
        }
        printf("]");
    }
    printf("}\n");
    mtmd_input_chunks_free(chunks);
    mtmd_bitmap_free(bw.bitmap);
    mtmd_free(mctx);
    llama_free(lctx);
    llama_model_free(model);
    return 0;
}
