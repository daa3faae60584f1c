/* kernels_avxvnni.c - the AVX2 set (kernels_avx2.c) compiled with AVX-VNNI, for CPUs that
 * have VNNI without AVX-512: byte and word dot products in one instruction each, with the
 * same integers, so the same bits. */
#define AVX2_VNNI 1
#include "engine/kernels/kernels_avx2.c"
