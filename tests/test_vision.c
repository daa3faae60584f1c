/* test_vision.c - images into Qwen3.5's vision projector, against llama.cpp's mtmd
 * (tests/fixtures/vision/, made by its make.sh).
 *
 * For each test image (scaled up to the minimum size and padded, scaled down, an extreme
 * aspect ratio, exactly the position grid's size; PNG with and without alpha, JPEG): the
 * embeddings' grid is mtmd's, and every value is mtmd's bit for bit (F32 weights, flash
 * attention off in the encoder, llama.cpp's AVX-512 build), on every kernel path. Then each
 * image between two texts through the tiny Qwen3.5 model (its rows with IMROPE positions,
 * the position counter advanced by max(columns, rows)): the last logits within 1e-4 of
 * llama.cpp's and its greedy continuation. Then the refusals, each with its
 * reason: a truncated JPEG, a text file, a PNG header claiming 30000 x 30000 pixels, a
 * projector of another kind, one with a tensor missing. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "cli/synth/gguf_write.h"
#include "engine/base/threadpool.h"
#include "engine/kernels/kernels.h"
#include "engine/vision/image.h"
#include "engine/vision/projector.h"
#include "tests/check.h"
#include "tests/oracle.h"
#include "tests/parity.h"

#define VISION FIXTURES "vision/"

static const char *const images[] = {"grad-97x61.png", "noise-131x91.png", "wide-640x37.jpg", "checks-128x128.png",
                                     "dots-100x90.png"};
#define N_IMAGES (int)(sizeof images / sizeof images[0])

static projector *load_projector(const char *path, char *err, size_t errlen) {
    gguf_file *f = gguf_open(path, err, errlen);
    return f ? projector_load(f, err, errlen) : NULL;
}

static int json_grid(const cJSON *j, const char *key) {
    const cJSON *chunks = cJSON_GetObjectItemCaseSensitive(j, "chunks"), *c;
    cJSON_ArrayForEach(c, chunks) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
        if (cJSON_IsNumber(v)) return v->valueint;
    }
    return -1;
}

/* an image's fixtures: the image, llama.cpp's output for it (suffix: ".embd.f32",
 * ".logits.f32") and its JSON */
typedef struct {
    char *bytes;
    size_t n_bytes;
    float *ref;
    size_t n_ref;
    cJSON *j;
} fixture;

static fixture load_fixture(const char *image, const char *suffix) {
    char path[256], base[128];
    fixture fx = {0};
    snprintf(base, sizeof base, "%s", image);
    *strrchr(base, '.') = 0;
    snprintf(path, sizeof path, VISION "%s", image);
    fx.bytes = read_file(path, &fx.n_bytes);
    snprintf(path, sizeof path, VISION "%s%s", base, suffix);
    fx.ref = (float *)read_file(path, &fx.n_ref);
    snprintf(path, sizeof path, VISION "%s.json", base);
    fx.j = read_json(path);
    REQUIRE(fx.bytes && fx.ref && fx.j, "fixtures of %s", image);
    return fx;
}

static void fixture_free(fixture *fx) {
    free(fx->bytes), free(fx->ref);
    cJSON_Delete(fx->j);
}

static void against_mtmd(const projector *p, const char *image) {
    fixture fx = load_fixture(image, ".embd.f32");
    image_rgb img;
    char err[256];
    REQUIRE(image_decode(fx.bytes, fx.n_bytes, &img, err, sizeof err) == 0, "%s: %s", image, err);
    int tw, th;
    projector_image_size(p, img.w, img.h, &tw, &th);
    const int nx = projector_cols(p, tw), ny = projector_rows(p, th);
    CHECK(nx == json_grid(fx.j, "grid_x") && ny == json_grid(fx.j, "grid_y"), "%s: grid %d x %d, mtmd's %d x %d", image,
          nx, ny, json_grid(fx.j, "grid_x"), json_grid(fx.j, "grid_y"));
    const size_t n = (size_t)nx * ny * p->n_embd_out;
    REQUIRE(n * sizeof(float) == fx.n_ref, "%s: %zu embeddings' values, mtmd wrote %zu", image, n, fx.n_ref / 4);
    float *out = malloc(n * sizeof(float));
    REQUIRE(out && projector_encode(p, &img, out) == 0, "encoding %s", image);
    float worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const float d = fabsf(out[i] - fx.ref[i]);
        if (!(d <= worst)) worst = d, at = i;
    }
    CHECK(worst == 0, "%s (%s): embeddings differ by %g at %zu (%g vs %g)", image, kernels_name(), worst, at,
          out[at], fx.ref[at]);
    printf("  %-20s %-8s %2d x %-2d tokens, worst difference %.2e\n", image, kernels_name(), nx, ny, worst);
    free(out);
    image_free(&img);
    fixture_free(&fx);
}

/* the ints of chunk `which` (0: before the image, 1: after) of a fixture's JSON */
static int *json_text_chunk(const cJSON *j, int which, int *n) {
    const cJSON *chunks = cJSON_GetObjectItemCaseSensitive(j, "chunks"), *c;
    int k = 0;
    cJSON_ArrayForEach(c, chunks) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "text");
        if (t && k++ == which) {
            *n = cJSON_GetArraySize(t);
            int *ids = malloc(sizeof(int) * (size_t)(*n > 0 ? *n : 1)), i = 0;
            const cJSON *v;
            cJSON_ArrayForEach(v, t) ids[i++] = v->valueint;
            return ids;
        }
    }
    *n = 0;
    return NULL;
}

/* [text, image, text] through the tiny Qwen3.5 model, fed as mtmd_helper_eval_chunks
 * feeds it (one pass per chunk): the last logits within 1e-4 of llama.cpp's and the greedy
 * continuation identical, the position counter where llama.cpp's n_past is */
static void text_image_text(const projector *p, const model *m, const char *image) {
    char err[256];
    fixture fx = load_fixture(image, ".logits.f32");
    REQUIRE(fx.n_ref == sizeof(float) * (size_t)m->n_vocab, "%s: llama.cpp's logits are not %d floats", image,
            m->n_vocab);
    int n0, n1, n_greedy;
    int *t0 = json_text_chunk(fx.j, 0, &n0), *t1 = json_text_chunk(fx.j, 1, &n1), *greedy = json_ints(fx.j, "greedy", &n_greedy);
    image_rgb img;
    REQUIRE(t0 && t1 && greedy && image_decode(fx.bytes, fx.n_bytes, &img, err, sizeof err) == 0, "%s", image);
    int tw, th;
    projector_image_size(p, img.w, img.h, &tw, &th);
    const int nx = projector_cols(p, tw), ny = projector_rows(p, th), n_img = nx * ny;
    float *embd = malloc(sizeof(float) * (size_t)n_img * p->n_embd_out);
    int *rope_pos = malloc(sizeof(int) * 3 * (size_t)n_img);
    float *lg = malloc(sizeof(float) * (size_t)m->n_vocab);
    REQUIRE(embd && rope_pos && lg && projector_encode(p, &img, embd) == 0, "encoding %s", image);
    seq_state *s = state_new(m, 0);
    arena a = {0};
    batch_seq before = {.state = s, .tokens = t0, .n_tokens = n0};
    REQUIRE(model_forward(m, &before, 1, &a) == 0, "the text before %s", image);
    /* the image's rows: time at the image's start, height and width by its grid */
    const int p0 = s->n_past + s->pos_shift, next = model_image_positions(p0, nx, ny, rope_pos);
    CHECK(next == p0 + (nx > ny ? nx : ny) && rope_pos[3 * (n_img - 1) + 1] == p0 + ny - 1 &&
              rope_pos[3 * (n_img - 1) + 2] == p0 + nx - 1,
          "%s: the last row's positions", image);
    batch_seq pic = {.state = s, .n_tokens = n_img, .embd = embd, .rope_pos = rope_pos, .rope_next = next};
    REQUIRE(model_forward(m, &pic, 1, &a) == 0, "the rows of %s", image);
    batch_seq after = {.state = s, .tokens = t1, .n_tokens = n1, .logits = 1, .out = lg};
    REQUIRE(model_forward(m, &after, 1, &a) == 0, "the text after %s", image);
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(fx.j, "n_past");
    CHECK(cJSON_IsNumber(np) && s->n_past + s->pos_shift == np->valueint, "%s: position %d after the prompt, llama.cpp %d",
          image, s->n_past + s->pos_shift, cJSON_IsNumber(np) ? np->valueint : -1);
    float worst = 0;
    for (int v = 0; v < m->n_vocab; v++) worst = fmaxf(worst, fabsf(lg[v] - fx.ref[v]));
    CHECK(worst <= 1e-4f, "%s (%s): last logits differ by %g", image, kernels_name(), worst);
    int *ours = malloc(sizeof(int) * (size_t)n_greedy);
    parity_greedy(m, s, lg, n_greedy, ours, &a);
    CHECK(!memcmp(ours, greedy, sizeof(int) * (size_t)n_greedy), "%s (%s): greedy continuation differs", image,
          kernels_name());
    printf("  %-20s %-8s [text %d, image %d x %d, text %d]: logits within %.1e, %d greedy tokens equal\n", image,
           kernels_name(), n0, nx, ny, n1, worst, n_greedy);
    free(ours), free(embd), free(rope_pos), free(lg), free(t0), free(t1), free(greedy);
    image_free(&img);
    state_free(s);
    arena_free(&a);
    fixture_free(&fx);
}

static void refusals(void) {
    char err[256];
    image_rgb img;
    size_t n = 0;
    char *jpg = read_file(VISION "wide-640x37.jpg", &n);
    REQUIRE(jpg, "the JPEG fixture");
    CHECK(image_decode(jpg, n / 2, &img, err, sizeof err) == -1 && strstr(err, "cannot be decoded"),
          "a truncated JPEG: %s", err);
    free(jpg);
    const char text[] = "this is a text file, not a picture\n";
    CHECK(image_decode(text, sizeof text - 1, &img, err, sizeof err) == -1 && strstr(err, "not an image"),
          "a text file: %s", err);
    /* PNG headers of 30000 x 30000 and 9000 x 8000 pixels and nothing after them: refused
     * from the header (the first by stb_image's own bound), before any pixel is decoded */
    unsigned char big[33] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                             0, 0, 0x75, 0x30, 0, 0, 0x75, 0x30, 8, 2, 0, 0, 0, 0, 0, 0, 0};
    CHECK(image_decode(big, sizeof big, &img, err, sizeof err) == -1 && strstr(err, "too large"),
          "a 30000 x 30000 header: %s", err);
    big[18] = 0x23, big[19] = 0x28, big[22] = 0x1f, big[23] = 0x40; /* 9000 x 8000 */
    CHECK(image_decode(big, sizeof big, &img, err, sizeof err) == -1 && strstr(err, "9000 x 8000"),
          "a 9000 x 8000 header: %s", err);
    CHECK(load_projector(FIXTURES "qwen35-tiny-f32.gguf", err, sizeof err) == NULL &&
              strstr(err, "not a vision projector"),
          "a text model as a projector: %s", err);
    /* LFM2-VL's projector, and Qwen3.5's metadata without its tensors */
    char path[] = "/tmp/chatfs-test-vision-XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0, "a temporary file");
    close(fd);
    for (int v = 0; v < 2; v++) {
        gguf_writer *w = gguf_writer_new();
        const float half[3] = {0.5f, 0.5f, 0.5f};
        gguf_w_str(w, "clip.projector_type", v ? "qwen3vl_merger" : "lfm2");
        gguf_w_bool(w, "clip.has_vision_encoder", 1);
        gguf_w_bool(w, "clip.use_gelu", 1);
        static const char *const keys[] = {"clip.vision.embedding_length", "clip.vision.feed_forward_length",
                                           "clip.vision.block_count", "clip.vision.attention.head_count",
                                           "clip.vision.projection_dim", "clip.vision.patch_size",
                                           "clip.vision.image_size"};
        static const uint32_t vals[] = {64, 96, 2, 4, 64, 16, 128};
        for (int k = 0; k < 7; k++) gguf_w_u32(w, keys[k], vals[k]);
        gguf_w_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f);
        gguf_w_arr(w, "clip.vision.image_mean", GGUF_F32, half, 3);
        gguf_w_arr(w, "clip.vision.image_std", GGUF_F32, half, 3);
        REQUIRE(gguf_writer_save(w, path, err, sizeof err) == 0, "%s", err);
        gguf_writer_free(w);
        projector *p = load_projector(path, err, sizeof err);
        CHECK(!p && strstr(err, v ? "tensor v.patch_embd.weight is missing" : "projector type 'lfm2' is not one"),
              "%s: %s", v ? "no tensors" : "another kind", err);
        projector_free(p);
    }
    unlink(path);
}

int main(void) {
    pool_set_threads(2);
    char err[512];
    projector *p = load_projector(VISION "mmproj-tiny-f32.gguf", err, sizeof err);
    REQUIRE(p, "%s", err);
    CHECK(p->n_embd == 64 && p->n_layer == 2 && p->head_dim == 16 && p->grid == 8 && p->n_embd_out == 64,
          "the tiny projector's shape");
    const char *const *isa = kernels_available();
    for (int k = 0; isa[k]; k++) {
        REQUIRE(kernels_select(isa[k]), "cannot select %s", isa[k]);
        for (int i = 0; i < N_IMAGES; i++) against_mtmd(p, images[i]);
    }
    model *m = parity_load("qwen35-tiny-f32");
    for (int k = 0; isa[k]; k++) {
        REQUIRE(kernels_select(isa[k]), "cannot select %s", isa[k]);
        for (int i = 0; i < N_IMAGES; i++) text_image_text(p, m, images[i]);
    }
    model_free(m);
    kernels_select("auto");
    refusals();
    projector_free(p);
    pool_shutdown();
    return check_report("test_vision");
}
