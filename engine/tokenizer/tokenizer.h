/* tokenizer.h - text <-> token ids, read from a GGUF file's tokenizer.ggml.* keys.
 *
 * Supports byte-level BPE (tokenizer.ggml.model = "gpt2") with llama.cpp's
 * pre-tokenizers, and SentencePiece ("llama"). Special tokens (CONTROL,
 * USER_DEFINED, UNKNOWN) are recognised in text when parse_special is set, the way
 * llama.cpp tokenizes rendered chat prompts. */
#ifndef CHATFS_TOKENIZER_H
#define CHATFS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gguf/gguf.h"

typedef struct tokenizer tokenizer;

enum tok_type { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_USER_DEFINED = 4, TOK_UNUSED = 5, TOK_BYTE = 6 };

/* Loads the vocabulary. NULL on error, with one line in err. */
tokenizer *tokenizer_load(const gguf_file *f, char *err, size_t errlen);
void tokenizer_free(tokenizer *t);

int tokenizer_n_vocab(const tokenizer *t);
const char *tokenizer_model(const tokenizer *t);   /* "gpt2" or "llama" */
const char *tokenizer_pre(const tokenizer *t);     /* pre-tokenizer name as stored, e.g. "qwen35" */
int tokenizer_bos(const tokenizer *t);             /* -1 when none */
int tokenizer_eos(const tokenizer *t);
int tokenizer_add_bos(const tokenizer *t);         /* 1 if BOS is prepended by encode(add_special) */
int tokenizer_add_eos(const tokenizer *t);         /* 1 if EOS is appended by encode(add_special) */
int tokenizer_is_eog(const tokenizer *t, int id);  /* end-of-generation set (docs/engine-math.md §8) */
int tokenizer_token_type(const tokenizer *t, int id);
/* id of a token whose text is exactly s, or -1 */
int tokenizer_find(const tokenizer *t, const char *s);
/* raw vocabulary text of a token (as stored in the GGUF, not decoded) */
const char *tokenizer_token_text(const tokenizer *t, int id);

/* Encodes len bytes of text. add_special: prepend BOS (and append EOS) as the model
 * asks. parse_special: match special-token texts. Returns the number of tokens written
 * to *out (malloc'd, caller frees), or -1 on allocation failure. */
int tokenizer_encode(const tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
                     int **out);

/* tokenizer_encode for a text that begins like a text already encoded (known, its ids
 * encoded with the same flags): the raw fragments (the bytes between special tokens) the
 * two texts share, at the same place, keep the known tokens, and only the others are
 * encoded. The same tokens as tokenizer_encode, in a fraction of the time when two chat
 * prompts differ only near their end. known NULL: tokenizer_encode. */
int tokenizer_encode_like(const tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
                          const char *known, size_t known_len, const int *known_ids, int n_known, int **out);

/* Test and debugging aid: the words the pre-tokenizer cuts text into (no special-token
 * matching). Writes a malloc'd array of word end offsets in bytes of the text as
 * llama.cpp re-encodes it (the same offsets as in text when text is valid UTF-8; invalid
 * bytes become U+FFFD). SentencePiece has no pre-tokenizer: one word. Returns the word
 * count, or -1 on allocation failure. */
int tokenizer_pretokenize(const tokenizer *t, const char *text, size_t len, size_t **ends);

/* The bytes a token stands for (byte-level BPE decoded, SentencePiece '▁' -> ' ',
 * <0xXX> byte tokens -> that byte). CONTROL/UNKNOWN tokens give their text only when
 * render_special is set, else nothing. Returns the byte count; writes at most cap bytes. */
size_t tokenizer_token_bytes(const tokenizer *t, int id, int render_special, char *buf, size_t cap);

/* Decodes a whole sequence into a malloc'd NUL-terminated string. */
char *tokenizer_decode(const tokenizer *t, const int *ids, int n, int render_special);

/* Streaming detokenizer: tokens go in one at a time, and only whole UTF-8 characters
 * come out, so a reader never sees half a code point. */
typedef struct {
    unsigned char pending[8];
    int n_pending;
    int render_special;
} detok_stream;

void detok_init(detok_stream *s, int render_special);
/* Appends the text of token id; returns bytes written to out (cap >= 64 + longest token). */
size_t detok_push(const tokenizer *t, detok_stream *s, int id, char *out, size_t cap);
/* Emits whatever is pending at the end (invalid sequences as U+FFFD). */
size_t detok_flush(detok_stream *s, char *out, size_t cap);

#endif
