/* vision_bench.c - how long chatfs's vision projector takes to encode one image.
 *
 *   vision_bench MMPROJ IMAGE [-t N] [--reps R]
 *
 * Decodes IMAGE once, then encodes it R times (resize and normalisation included, as
 * llama.cpp's mtmd_encode_chunk includes them) and prints one JSON line: the image's size,
 * the size it is resized to, the embeddings it gives and the median encode time. The
 * llama.cpp side of the comparison is tests/vision/mtmd_ref.c --reps (bench/vision.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/threadpool.h"
#include "engine/vision/projector.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + 1e-6 * (double)ts.tv_nsec;
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = len > 0 ? malloc((size_t)len) : NULL;
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) free(b), b = NULL;
    fclose(f);
    *n = b ? (size_t)len : 0;
    return b;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: vision_bench MMPROJ IMAGE [-t N] [--reps R]\n");
        return 2;
    }
    int threads = 0, reps = 3;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    }
    if (reps < 1 || reps > 64) reps = 3;
    pool_set_threads(threads);
    char err[512];
    gguf_file *f = gguf_open(argv[1], err, sizeof err);
    projector *p = f ? projector_load(f, err, sizeof err) : NULL;
    size_t n = 0;
    char *bytes = slurp(argv[2], &n);
    image_rgb img;
    if (!p || !bytes || image_decode(bytes, n, &img, err, sizeof err)) {
        fprintf(stderr, "vision_bench: %s\n", p && bytes ? err : !p ? err : "cannot read the image");
        return 1;
    }
    int tw, th;
    projector_image_size(p, img.w, img.h, &tw, &th);
    const int nx = projector_cols(p, tw), ny = projector_rows(p, th);
    float *out = malloc(sizeof(float) * (size_t)nx * ny * p->n_embd_out);
    double ms[64];
    for (int r = 0; r < reps; r++) {
        const double t0 = now_ms();
        if (!out || projector_encode(p, &img, out)) {
            fprintf(stderr, "vision_bench: out of memory\n");
            return 1;
        }
        ms[r] = now_ms() - t0;
    }
    for (int a = 0; a < reps; a++)
        for (int b = a + 1; b < reps; b++)
            if (ms[b] < ms[a]) {
                const double t = ms[a];
                ms[a] = ms[b], ms[b] = t;
            }
    printf("{\"image\":\"%dx%d\",\"resized\":\"%dx%d\",\"embeddings\":%d,\"patches\":%d,\"threads\":%d,"
           "\"encode_ms\":%.1f}\n",
           img.w, img.h, tw, th, nx * ny, nx * ny * 4, pool_threads(), ms[reps / 2]);
    free(out), free(bytes);
    image_free(&img);
    projector_free(p);
    pool_shutdown();
    return 0;
}
