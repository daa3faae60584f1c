/* run_images.c - `chatfs run --image FILE`: a prompt with images through the model, as
 * llama.cpp's mtmd feeds one (llama-mtmd-cli): the text split where each image goes, each
 * image's markers <|vision_start|> and <|vision_end|> written around its rows, every piece
 * in passes of its own (text in 512-token passes, an image's rows in 512-row passes).
 *
 * Where the images go: a raw prompt (-p) marks each place with <__media__>, mtmd's marker;
 * with --chat the user message carries the images before its text and the model's template
 * writes <|vision_start|><|image_pad|><|vision_end|> for each. Either way the rendered
 * text then has <|vision_start|><|image_pad|><|vision_end|> per image, in the order the
 * images were given; the two markers are tokenized apart from the text around them, as
 * mtmd tokenizes them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/run_images.h"
#include "engine/model/state.h"
#include "engine/runtime/prompt_images.h"

#define CHUNK 512 /* mtmd_helper_eval_chunks' n_batch in llama-mtmd-cli */

char *run_images_mark(const char *text) {
    static const char marker[] = "<__media__>", with[] = IMAGE_PLACE;
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, marker)); p += sizeof marker - 1) n++;
    char *out = malloc(strlen(text) + n * (sizeof with - sizeof marker) + 1), *o = out;
    if (!out) return NULL;
    for (const char *p = text, *q; ; p = q + sizeof marker - 1) {
        q = strstr(p, marker);
        const size_t k = q ? (size_t)(q - p) : strlen(p);
        memcpy(o, p, k), o += k;
        if (!q) break;
        memcpy(o, with, sizeof with - 1), o += sizeof with - 1;
    }
    *o = 0;
    return out;
}

projector *run_images_projector(const char *mmproj, const char *model_path, const model *m) {
    char found[1200], err[600];
    if (!mmproj) { /* mmproj*.gguf beside the model, as LM Studio and ollama lay files out */
        int n = 0;
        if (cli_find_mmproj(model_path, found, sizeof found, &n)) n = 1;
        if (n > 1) {
            cli_error("%d mmproj*.gguf files beside the model: say which with --mmproj FILE", n);
            return NULL;
        }
        if (n == 0) {
            cli_error("no vision projector for the images: give --mmproj FILE (an mmproj GGUF)");
            return NULL;
        }
        mmproj = found;
    }
    gguf_file *f = gguf_open(mmproj, err, sizeof err);
    projector *p = f ? projector_load(f, err, sizeof err) : NULL;
    if (!p) {
        cli_error("%s", err);
        return NULL;
    }
    if (p->n_embd_out != m->n_embd) {
        cli_error("%s gives embeddings of width %d, and this model's are %d: it is another model's projector",
                  mmproj, p->n_embd_out, m->n_embd);
        projector_free(p);
        return NULL;
    }
    return p;
}

/* one image's rows into the sequence, rope positions by its grid, in CHUNK-row passes */
static int feed_image(const model *m, seq_state *s, const projector *p, const image_rgb *img, arena *a, int *nx_out,
                      int *ny_out) {
    int tw, th;
    projector_image_size(p, img->w, img->h, &tw, &th);
    const int nx = projector_cols(p, tw), ny = projector_rows(p, th), n = nx * ny;
    float *embd = malloc(sizeof(float) * (size_t)n * p->n_embd_out);
    int *pos = malloc(sizeof(int) * 3 * (size_t)n), rc = -1;
    if (embd && pos && projector_encode(p, img, embd) == 0) {
        const int next = model_image_positions(s->n_past + s->pos_shift, nx, ny, pos);
        rc = 0;
        for (int r0 = 0; rc == 0 && r0 < n; r0 += CHUNK) {
            const int k = n - r0 < CHUNK ? n - r0 : CHUNK;
            batch_seq b = {.state = s, .n_tokens = k, .embd = embd + (size_t)r0 * p->n_embd_out,
                           .rope_pos = pos + 3 * r0, .rope_next = next};
            rc = model_forward(m, &b, 1, a);
        }
    }
    free(embd), free(pos);
    *nx_out = nx, *ny_out = ny;
    return rc;
}

/* ids of text (a piece of the prompt, or an image's marker alone) appended to *ids */
static int add_text(const model *m, const char *text, size_t len, int first, int **ids, int *n, int *cap) {
    int *t = NULL;
    const int k = tokenizer_encode(m->tok, text, len, first, 1, &t);
    if (k < 0) return -1;
    if (*n + k > *cap) {
        int c = (*n + k) * 2 + 16, *grown = realloc(*ids, sizeof(int) * (size_t)c);
        if (!grown) {
            free(t);
            return -1;
        }
        *ids = grown, *cap = c;
    }
    memcpy(*ids + *n, t, sizeof(int) * (size_t)k);
    *n += k;
    free(t);
    return 0;
}

int run_images_prefill(const model *m, seq_state *s, const projector *p, const char *text, char *const *paths,
                       int n_paths, float *logits, arena *a, strbuf *ids_line) {
    int n_places = 0;
    for (const char *q = text; (q = strstr(q, IMAGE_PLACE)); q += sizeof IMAGE_PLACE - 1) n_places++;
    if (n_places != n_paths) {
        cli_error("the prompt has %d places for images and %d were given (--image)", n_places, n_paths);
        return -1;
    }
    /* Each text chunk as mtmd makes it: the text up to an image, then the image's opening
     * marker tokenized alone; after the image its closing marker alone, then the text. */
    const char *piece = text;
    int *ids = NULL, n = 0, cap = 0, rc = -1;
    for (int k = 0; k <= n_paths; k++) {
        const char *end = k < n_paths ? strstr(piece, IMAGE_PLACE) : piece + strlen(piece);
        n = 0;
        if (k > 0 && add_text(m, IMAGE_END, sizeof IMAGE_END - 1, 0, &ids, &n, &cap)) goto oom;
        if (add_text(m, piece, (size_t)(end - piece), k == 0, &ids, &n, &cap)) goto oom;
        if (k < n_paths && add_text(m, IMAGE_BEGIN, sizeof IMAGE_BEGIN - 1, 0, &ids, &n, &cap)) goto oom;
        for (int i = 0; ids_line && i < n; i++) strbuf_printf(ids_line, " %d", ids[i]);
        if (n > 0 && model_prefill(m, s, ids, n, CHUNK, k == n_paths ? logits : NULL, a) != 0) {
            cli_error("the prompt does not fit the context of %d", s->n_ctx);
            goto done;
        }
        if (k == n_paths) break;
        size_t len = 0;
        char err[300];
        char *bytes = cli_read_file(paths[k], &len);
        image_rgb img;
        if (!bytes || image_decode(bytes, len, &img, err, sizeof err)) {
            if (bytes) cli_error("%s: %s", paths[k], err);
            free(bytes);
            goto done;
        }
        free(bytes);
        int nx, ny;
        const int fed = feed_image(m, s, p, &img, a, &nx, &ny);
        image_free(&img);
        if (fed) {
            cli_error("%s: its %d x %d embeddings do not fit the context of %d (or out of memory)", paths[k], nx, ny,
                      s->n_ctx);
            goto done;
        }
        if (ids_line) strbuf_printf(ids_line, " [image %dx%d]", nx, ny);
        piece = end + sizeof IMAGE_PLACE - 1;
    }
    rc = 0;
    goto done;
oom:
    cli_error("out of memory");
done:
    free(ids);
    return rc;
}
