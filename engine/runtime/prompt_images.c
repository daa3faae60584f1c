/* prompt_images.c - image rows in a prompt's ids (see prompt_images.h). */
#include "engine/runtime/prompt_images.h"

#include <stdlib.h>
#include <string.h>

#include "engine/base/hash.h"

int image_row_id(uint64_t key, int row) {
    const uint64_t h = hash64(&row, sizeof row, key);
    return IMAGE_ROW_BASE + (int)(h & (IMAGE_ROW_BASE - 1));
}

typedef struct {
    int *ids;
    int n, cap;
} id_list;

static int push(id_list *l, const int *ids, int k) {
    if (l->n + k > l->cap) {
        const int cap = (l->n + k) * 2 + 64;
        int *grown = realloc(l->ids, sizeof(int) * (size_t)cap);
        if (!grown) return -1;
        l->ids = grown, l->cap = cap;
    }
    memcpy(l->ids + l->n, ids, sizeof(int) * (size_t)k);
    l->n += k;
    return 0;
}

/* text[0..len) tokenized onto l (add_special: the prompt's first piece) */
static int push_text(id_list *l, const tokenizer *tok, const char *text, size_t len, int add_special) {
    if (len == 0 && !add_special) return 0;
    int *t = NULL;
    const int k = tokenizer_encode(tok, text, len, add_special, 1, &t);
    const int rc = k < 0 ? -1 : push(l, t, k);
    free(t);
    return rc;
}

/* the first place in text[0..len), or NULL */
static const char *find_place(const char *text, size_t len) {
    static const char place[] = IMAGE_PLACE;
    for (const char *p = text; (size_t)(text + len - p) >= sizeof place - 1; p++) {
        p = memchr(p, place[0], (size_t)(text + len - p) - (sizeof place - 2));
        if (!p) return NULL;
        if (!memcmp(p, place, sizeof place - 1)) return p;
    }
    return NULL;
}

int prompt_tokenize(const tokenizer *tok, const char *text, size_t len, const prompt_image *images, int n_images,
                    int **out, int *placed) {
    id_list l = {0};
    const char *piece = text, *end = text + len;
    int k = 0;
    for (;; k++) {
        const char *at = find_place(piece, (size_t)(end - piece));
        if (at && k == n_images) {
            free(l.ids);
            return -2;
        }
        if (k > 0 && push_text(&l, tok, IMAGE_END, sizeof IMAGE_END - 1, 0)) goto oom;
        if (push_text(&l, tok, piece, (size_t)((at ? at : end) - piece), k == 0)) goto oom;
        if (!at) break;
        if (push_text(&l, tok, IMAGE_BEGIN, sizeof IMAGE_BEGIN - 1, 0)) goto oom;
        const prompt_image *im = &images[k];
        for (int row = 0; row < im->nx * im->ny; row++) {
            const int id = image_row_id(im->key, row);
            if (push(&l, &id, 1)) goto oom;
        }
        piece = at + sizeof IMAGE_PLACE - 1;
    }
    if (placed) *placed = k;
    if (!l.ids && push(&l, NULL, 0)) goto oom; /* an empty prompt still gets an array */
    *out = l.ids;
    return l.n;
oom:
    free(l.ids);
    return -1;
}

int prompt_spans(const int *t, int n, const prompt_image *images, int n_images, image_span **out) {
    *out = NULL;
    image_span *sp = NULL;
    int count = 0;
    for (int i = 0; i < n; i++) {
        if (!is_image_row(t[i])) continue;
        int j = 0;
        while (j < n_images && image_row_id(images[j].key, 0) != t[i]) j++;
        if (j == n_images) { /* rows of no image of this request: ids no tokenizer makes */
            free(sp);
            return -1;
        }
        const int rows = images[j].nx * images[j].ny;
        image_span *grown = realloc(sp, sizeof *sp * (size_t)(count + 1));
        if (!grown) {
            free(sp);
            return -1;
        }
        sp = grown;
        sp[count++] = (image_span){i, i + rows < n ? i + rows : n, j};
        i = sp[count - 1].end - 1;
    }
    *out = sp;
    return count;
}

int prompt_pos_shift(const image_span *spans, int n_spans, const prompt_image *images, int at) {
    int shift = 0;
    for (int i = 0; i < n_spans && spans[i].end <= at; i++) {
        const prompt_image *im = &images[spans[i].image];
        const int n = im->nx * im->ny, adv = im->nx > im->ny ? im->nx : im->ny;
        shift += adv - n;
    }
    return shift;
}
