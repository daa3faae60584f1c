/* vision_ops.h - the element-wise steps of a vision encoder that a text model has not:
 * LayerNorm with a shift, GELU as ggml's CPU computes it, rotary positions in two
 * dimensions, bilinear resampling of a position grid. */
#ifndef CHATFS_VISION_OPS_H
#define CHATFS_VISION_OPS_H

/* y = (x - mean) / sqrt(var + eps) * w + b over n values (ggml_norm, then mul and add:
 * the mean summed in double, the variance of the centred values in ggml_vec_cvar_f32's
 * order). y may alias x. */
void layernorm(float *y, const float *x, const float *w, const float *b, int n, float eps);

/* GELU, tanh form, as ggml's CPU backend computes it (GGML_GELU_FP16): 0 below -10, x
 * above 10, else the value at x rounded to half precision, from a table of the function
 * at every half, itself rounded to half. */
void vec_gelu(float *y, const float *x, int n);

/* Rotates one head of d values (d a multiple of 4) in place by the 2-D positions of
 * GGML_ROPE_TYPE_VISION with four sections of d/4 pairs: pair (k, k + d/2), k < d/2, turns
 * by pos[k / (d/4)] * base^(-4 (k mod d/4) / d), pos = {row, column, row, column}; the
 * angles advance by repeated multiplication in floats, as ggml's cache does. */
void rope_vision(float *x, int d, const int pos[4], float base);

/* dst (w x h rows of n values) = src (g x g rows of n values) resized bilinearly with
 * aligned corners (ggml_interpolate, GGML_SCALE_MODE_BILINEAR | ALIGN_CORNERS): the
 * corners of the grid map to the corners of the image. */
void grid_resize_bilinear(float *dst, int w, int h, const float *src, int g, int n);

#endif
