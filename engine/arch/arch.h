/* arch.h - the architectures chatfs runs, and loading a model.
 *
 * model_load reads the general metadata of a GGUF file, the tokenizer and the chat
 * template, then hands the file to the loader of the architecture its
 * general.architecture names (one file per architecture, arch_*.c), which binds the
 * tensors and says what each block computes. */
#ifndef CHATFS_ARCH_H
#define CHATFS_ARCH_H

#include <stddef.h>

#include "engine/model/loader.h"
#include "engine/model/model.h"

/* Loads a GGUF model. NULL on error with one line in err ("m.gguf: ..."). */
model *model_load(const char *path, char *err, size_t errlen);

typedef struct {
    const char *name;
    int (*load)(loader *L);
} arch_desc;

const arch_desc *arch_find(const char *name);

#endif
