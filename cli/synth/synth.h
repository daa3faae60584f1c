/* synth.h - the files `chatfs synth` writes besides a text model. */
#ifndef CHATFS_SYNTH_H
#define CHATFS_SYNTH_H

#include <stdint.h>

/* A random-weight vision projector of shape `shape` (tiny, qwen3.5-35b-a3b) in ggml type
 * `type` (type_name as the user wrote it) whose output width is n_embd_text (0: the
 * shape's own), into `out`. Returns 0, or 1 after one error line. */
int synth_mmproj(const char *shape, uint32_t type, const char *type_name, long n_embd_text, long seed,
                 const char *out, int quiet);

#endif
