/* request_images.c - a request's images: collected at the submit (their grids and keys, the
 * files copied), found in its prompt, and encoded by the projector when the prefill reaches
 * them - once per image while the engine remembers it (chat_engine.encoded). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/runtime/chat_impl.h"
#include "engine/base/hash.h"

int engine_has_vision(const chat_engine *e) { return e->proj != NULL; }

int engine_check_image(const chat_engine *e, const void *bytes, size_t len, char *err, size_t errlen) {
    if (!e->proj) {
        snprintf(err, errlen, "this model has no vision projector: mount with --mmproj FILE (an mmproj GGUF)");
        errno = ENOTSUP;
        return -1;
    }
    return image_check(bytes, len, err, errlen);
}

void request_images_free(prompt_image *images, int n) {
    for (int i = 0; i < n; i++) free((void *)images[i].bytes);
    free(images);
}

int request_images_collect(const chat_engine *e, const chat_msg *msgs, int n, prompt_image **out, int *n_out,
                           char *err, size_t errlen) {
    int total = 0;
    for (int i = 0; i < n; i++) total += msgs[i].images ? msgs[i].n_images : 0;
    *out = NULL, *n_out = 0;
    if (total == 0) return 0;
    if (!e->proj) {
        snprintf(err, errlen, "the conversation has images and this model has no vision projector "
                              "(mount with --mmproj FILE)");
        errno = ENOTSUP;
        return -1;
    }
    prompt_image *im = calloc((size_t)total, sizeof *im);
    if (!im) goto oom;
    int k = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; msgs[i].images && j < msgs[i].n_images; j++, k++) {
            const chat_image *ci = &msgs[i].images[j];
            int w, h, tw, th;
            if (image_probe(ci->bytes, ci->len, &w, &h, err, errlen) != 0) {
                request_images_free(im, k);
                errno = EINVAL;
                return -1;
            }
            projector_image_size(e->proj, w, h, &tw, &th);
            void *copy = malloc(ci->len ? ci->len : 1);
            if (!copy) {
                request_images_free(im, k);
                goto oom;
            }
            memcpy(copy, ci->bytes, ci->len);
            im[k] = (prompt_image){.key = hash64(ci->bytes, ci->len, e->proj_fp),
                                   .nx = projector_cols(e->proj, tw),
                                   .ny = projector_rows(e->proj, th),
                                   .bytes = copy,
                                   .len = ci->len};
        }
    *out = im, *n_out = total;
    return 0;
oom:
    snprintf(err, errlen, "out of memory");
    errno = ENOMEM;
    return -1;
}

int request_images_locate(request *r) {
    free(r->spans);
    r->spans = NULL;
    r->n_spans = r->n_images ? prompt_spans(r->prompt, r->n_prompt, r->images, r->n_images, &r->spans) : 0;
    return r->n_spans < 0 ? -1 : 0;
}

/* the engine's copy of an image's rows (NULL: none), counted as used */
static float *remembered(chat_engine *e, uint64_t key, size_t n_floats) {
    for (int i = 0; i < (int)(sizeof e->encoded / sizeof *e->encoded); i++)
        if (e->encoded[i].rows && e->encoded[i].key == key && e->encoded[i].n_floats == n_floats) {
            e->encoded[i].used = ++e->encoded_clock;
            return e->encoded[i].rows;
        }
    return NULL;
}

/* keeps a copy of rows in place of the least recently used (nothing when out of memory) */
static void remember(chat_engine *e, uint64_t key, const float *rows, size_t n_floats) {
    int victim = 0;
    for (int i = 1; i < (int)(sizeof e->encoded / sizeof *e->encoded); i++)
        if (e->encoded[i].used < e->encoded[victim].used) victim = i;
    float *copy = malloc(sizeof(float) * n_floats);
    if (!copy) return;
    memcpy(copy, rows, sizeof(float) * n_floats);
    free(e->encoded[victim].rows);
    e->encoded[victim].key = key;
    e->encoded[victim].rows = copy;
    e->encoded[victim].n_floats = n_floats;
    e->encoded[victim].used = ++e->encoded_clock;
}

int request_image_rows(chat_engine *e, request *r, int i) {
    if (r->embd && r->embd[i]) return 0;
    if (!r->embd && !(r->embd = calloc((size_t)r->n_images, sizeof *r->embd))) goto oom;
    const prompt_image *im = &r->images[i];
    const size_t n_floats = (size_t)im->nx * im->ny * e->m->n_embd;
    if (!(r->embd[i] = malloc(sizeof(float) * n_floats))) goto oom;
    const float *known = remembered(e, im->key, n_floats);
    if (known) {
        memcpy(r->embd[i], known, sizeof(float) * n_floats);
        return 0;
    }
    image_rgb img;
    char err[256];
    if (image_decode(im->bytes, im->len, &img, err, sizeof err) != 0) {
        snprintf(r->image_error, sizeof r->image_error, "image %d: %s", i + 1, err);
        r->fail = r->image_error;
        free(r->embd[i]), r->embd[i] = NULL;
        return -1;
    }
    const int rc = projector_encode(e->proj, &img, r->embd[i]);
    image_free(&img);
    if (rc != 0) {
        free(r->embd[i]), r->embd[i] = NULL;
        goto oom;
    }
    remember(e, im->key, r->embd[i], n_floats);
    r->r.images_encoded++;
    pthread_mutex_lock(&e->lock);
    e->stats.images_encoded++;
    pthread_mutex_unlock(&e->lock);
    return 0;
oom:
    r->fail = "out of memory for an image's embeddings";
    return -1;
}
