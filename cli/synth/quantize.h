/* quantize.h - weight quantizers: float rows to ggml's weight block formats
 * (engine/kernels/quant.h), with llama.cpp's reference algorithms (ggml-quants.c
 * quantize_row_*_ref), so that chatfs synth writes the files llama-quantize would. The
 * engine never quantizes weights; chatfs synth and the tests do. */
#ifndef CHATFS_QUANTIZE_H
#define CHATFS_QUANTIZE_H

#include <stdint.h>

#include "engine/kernels/quant.h"

/* Converts a float row of n elements (a multiple of the block size) to a weight type;
 * returns -1 for a type it cannot produce. */
int quantize_row_weight(uint32_t type, const float *x, void *dst, int64_t n);

#endif
