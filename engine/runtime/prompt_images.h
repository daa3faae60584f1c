/* prompt_images.h - a request's images as its prompt carries them.
 *
 * Qwen3.5's template writes <|vision_start|><|image_pad|><|vision_end|> where an image
 * goes. The prompt holds, in place of <|image_pad|>, one id per row of the image's
 * embeddings (nx * ny of them): ids no vocabulary has (IMAGE_ROW_BASE and up), derived
 * from the image's key - its content hash mixed with the projector's fingerprint, which
 * fixes the preprocessing and the grid - and the row. So the token chain of a prompt, the
 * checkpoints keyed by it and the restore's token comparison tell two images apart as
 * they tell two texts apart: a checkpoint after an image holds for that image, through
 * that projector, only.
 *
 * The rows' rotary positions are not their indices: an image advances the position by
 * max(nx, ny) (model_image_positions), so the position of prompt index p is p plus the
 * shift of the images wholly before it (prompt_pos_shift). */
#ifndef CHATFS_PROMPT_IMAGES_H
#define CHATFS_PROMPT_IMAGES_H

#include <stddef.h>
#include <stdint.h>

#include "engine/tokenizer/tokenizer.h"

#define IMAGE_ROW_BASE 0x40000000 /* above every vocabulary (ids are below 2^30) */

/* The text the template writes for an image, and the two markers mtmd tokenizes alone */
#define IMAGE_BEGIN "<|vision_start|>"
#define IMAGE_END "<|vision_end|>"
#define IMAGE_PLACE IMAGE_BEGIN "<|image_pad|>" IMAGE_END

typedef struct {
    uint64_t key;        /* content hash with the projector's fingerprint */
    int nx, ny;          /* the embedding grid: nx * ny rows */
    const void *bytes;   /* the file as given (the request's copy) */
    size_t len;
} prompt_image;

/* A run of one image's rows in a prompt: indices [start, end). */
typedef struct {
    int start, end;
    int image;           /* its index in the request's images */
} image_span;

static inline int is_image_row(int id) { return id >= IMAGE_ROW_BASE; }
/* The id of row `row` of the image with this key */
int image_row_id(uint64_t key, int row);

/* Tokenizes a rendered prompt with images: the text between the places as one piece each,
 * each place's two markers alone (as mtmd tokenizes them), rows in place of the pad. The
 * k-th place takes images[k]; a rendering may place fewer images than given (a boundary
 * search renders the last message without its images), never more. Returns the count
 * (ids in *out, malloc'd), -1 when out of memory, -2 when the text has more places than
 * images. *placed (may be NULL): the places found. */
int prompt_tokenize(const tokenizer *tok, const char *text, size_t len, const prompt_image *images, int n_images,
                    int **out, int *placed);

/* The image rows of t[0..n): their runs, in order (malloc'd in *out; NULL when none).
 * Returns the count, -1 when out of memory. A run's first id names its image. */
int prompt_spans(const int *t, int n, const prompt_image *images, int n_images, image_span **out);

/* The rotary position of prompt index `at` minus `at`: what the images of the runs that
 * end at or before it add (max(nx, ny) - nx * ny each). */
int prompt_pos_shift(const image_span *spans, int n_spans, const prompt_image *images, int at);

#endif
