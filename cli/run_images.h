/* run_images.h - `chatfs run --image`: prompts with images (run_images.c). */
#ifndef CHATFS_RUN_IMAGES_H
#define CHATFS_RUN_IMAGES_H

#include "engine/base/arena.h"
#include "engine/base/strbuf.h"
#include "engine/model/model.h"
#include "engine/vision/projector.h"

#define RUN_MAX_IMAGES 16

/* text with each <__media__> replaced by <|vision_start|><|image_pad|><|vision_end|>;
 * malloc'd, NULL out of memory */
char *run_images_mark(const char *text);
/* The projector at mmproj, or the one mmproj*.gguf beside model_path when mmproj is NULL,
 * checked against the model's embedding width; NULL after printing the reason. */
projector *run_images_projector(const char *mmproj, const char *model_path, const model *m);
/* Feeds text (<|vision_start|><|image_pad|><|vision_end|> per image) to s with each
 * image's rows in place of its <|image_pad|>, and the last position's logits into logits. ids_line (may be NULL) gets
 * the prompt as " id id [image NxM] id ...". 0, or -1 after printing the reason. */
int run_images_prefill(const model *m, struct seq_state *s, const projector *p, const char *text, char *const *paths,
                       int n_paths, float *logits, arena *a, strbuf *ids_line);

#endif
