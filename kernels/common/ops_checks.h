/* ops_checks.h — the argument checks of the convolutional-network and
 * everyday-op kernels (unary, where, strided copy, reductions and softmax
 * along a dim, gathers, im2col/col2im and direct convolution, pooling, batch
 * norm), written once for both kernel libraries as dt_checks.h's are (that
 * file's rules hold here: dt_check_<symbol>() returns DT_OK when the call may
 * go ahead, an empty call as soon as the checks before its shortcut pass;
 * tests/cuda/arg_checks_test.ts holds both libraries to the same status and
 * text). Nothing here reads the data: indices and the batch-norm element
 * count are data, checked by the CPU loops during the call and by the CUDA
 * kernels on the device, both worded by dt_checks.h's dt_fail_*_. Host code
 * only. */
#pragma once
#include "batchnorm.h"
#include "bn_relu_pool.h"
#include "conv.h"
#include "dt_checks.h"
#include "pool.h"
#include "reduce_dim.h"
#include "strided.h"
#include "unary.h"
#include "winograd.h"

/* ---- unary, where ---------------------------------------------------------------------- */

static inline dt_status dt_check_unary_(const char* name, int32_t op, int64_t n, int pointers_ok) {
  DT_REQUIRE_(dt_unary_op_valid(op), "%s: unknown op %d (expected DT_UN_EXP..DT_UN_CLAMP, 0..6)", name, op);
  DT_REQUIRE_(n >= 0, "%s: negative size n=%lld", name, (long long)n);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(pointers_ok, "%s: null pointer", name);
  return DT_OK;
}

static inline dt_status dt_check_unary_fwd(int32_t op, const float* out, const float* inp, int64_t n) {
  return dt_check_unary_("dt_unary_fwd", op, n, out && inp);
}

static inline dt_status dt_check_unary_bwd(int32_t op, const float* dinp, const float* dout, const float* inp,
                                           const float* out, int64_t n) {
  return dt_check_unary_("dt_unary_bwd", op, n, dinp && dout && inp && out);
}

static inline dt_status dt_check_where(const float* out, const uint8_t* cond, int64_t n) {
  DT_REQUIRE_(n >= 0, "dt_where: negative size n=%lld", (long long)n);
  if (n == 0) return DT_OK;
  DT_REQUIRE_(out && cond, "dt_where: null pointer (out=%p cond=%p)", (const void*)out, (const void*)cond);
  return DT_OK;
}

/* ---- strided copy ------------------------------------------------------------------------- */

/* Checks the box and fills it; *total gets its element count. */
static inline dt_status dt_check_strided_copy(const void* out, const void* inp, int32_t ndim, const int64_t* sizes,
                                              const int64_t* out_strides, const int64_t* inp_strides,
                                              int64_t elem_bytes, dt_strided_box* box, int64_t* total) {
  DT_REQUIRE_(ndim >= 0 && ndim <= DT_MAX_DIMS, "dt_strided_copy: ndim=%d must be in [0, %d]", ndim, DT_MAX_DIMS);
  DT_REQUIRE_(elem_bytes >= 1 && elem_bytes <= 64, "dt_strided_copy: elem_bytes=%lld must be in [1, 64]",
              (long long)elem_bytes);
  DT_REQUIRE_(ndim == 0 || (sizes && out_strides && inp_strides), "dt_strided_copy: null sizes or strides");
  box->ndim = ndim;
  int64_t n = 1, out_span = 1, inp_span = 1;
  for (int32_t d = 0; d < ndim; d++) {
    DT_REQUIRE_(sizes[d] >= 0, "dt_strided_copy: size %lld of dim %d is negative", (long long)sizes[d], d);
    DT_REQUIRE_(out_strides[d] >= 0 && inp_strides[d] >= 0,
                "dt_strided_copy: negative stride in dim %d (out %lld, inp %lld)", d, (long long)out_strides[d],
                (long long)inp_strides[d]);
    DT_REQUIRE_(dt_mul_ok_(n, sizes[d], &n), "dt_strided_copy: element count overflows at dim %d", d);
    box->sizes[d] = sizes[d];
    box->out_strides[d] = out_strides[d];
    box->inp_strides[d] = inp_strides[d];
  }
  *total = n;
  if (n == 0) return DT_OK;
  for (int32_t d = 0; d < ndim; d++) { /* the last element's offsets must be addressable */
    int64_t step;
    DT_REQUIRE_(dt_mul_ok_(sizes[d] - 1, out_strides[d], &step) && !__builtin_add_overflow(out_span, step, &out_span) &&
                    dt_mul_ok_(sizes[d] - 1, inp_strides[d], &step) && !__builtin_add_overflow(inp_span, step, &inp_span),
                "dt_strided_copy: offsets overflow at dim %d", d);
  }
  DT_REQUIRE_(dt_mul_ok_(out_span, elem_bytes, &out_span) && dt_mul_ok_(inp_span, elem_bytes, &inp_span),
              "dt_strided_copy: byte offsets overflow");
  DT_REQUIRE_(out && inp, "dt_strided_copy: null pointer (out=%p inp=%p)", out, inp);
  return DT_OK;
}

/* ---- reductions and softmax along a dim -------------------------------------------------------- */

/* *rows gets outer * inner (0: an empty call). */
static inline dt_status dt_check_reduce_dim(int32_t op, const float* out, const int32_t* idx, const float* inp,
                                            int64_t outer, int64_t D, int64_t inner, int64_t* rows) {
  DT_REQUIRE_(dt_reduce_op_valid(op), "dt_reduce_dim: unknown op %d (expected DT_RED_SUM..DT_RED_MIN, 0..3)", op);
  DT_REQUIRE_(outer >= 0 && D >= 0 && inner >= 0, "dt_reduce_dim: negative size (outer=%lld D=%lld inner=%lld)",
              (long long)outer, (long long)D, (long long)inner);
  int64_t total;
  DT_REQUIRE_(dt_mul_ok_(outer, inner, rows) && dt_mul_ok_(*rows, D, &total),
              "dt_reduce_dim: size overflows (outer=%lld D=%lld inner=%lld)", (long long)outer, (long long)D,
              (long long)inner);
  int extreme = op == DT_RED_MAX || op == DT_RED_MIN;
  DT_REQUIRE_(!extreme || D >= 1 || *rows == 0,
              "dt_reduce_dim: max/min of an empty dimension (D=0) has no value: expected D >= 1");
  DT_REQUIRE_(D <= INT32_MAX || !extreme, "dt_reduce_dim: D=%lld does not fit the i32 indices", (long long)D);
  if (*rows == 0) return DT_OK;
  DT_REQUIRE_(out || (extreme && idx), "dt_reduce_dim: null out%s", extreme ? " and idx" : "");
  DT_REQUIRE_(idx == NULL || extreme, "dt_reduce_dim: idx is only written by max and min (op=%d)", op);
  DT_REQUIRE_(inp || D == 0, "dt_reduce_dim: null inp");
  return DT_OK;
}

static inline dt_status dt_check_softmax_dim_(const char* name, int pointers_ok, int64_t outer, int64_t D,
                                              int64_t inner, int32_t is_log) {
  DT_REQUIRE_(outer >= 0 && D >= 0 && inner >= 0, "%s: negative size (outer=%lld D=%lld inner=%lld)", name,
              (long long)outer, (long long)D, (long long)inner);
  int64_t t;
  DT_REQUIRE_(dt_mul_ok_(outer, D, &t) && dt_mul_ok_(t, inner, &t),
              "%s: size overflows (outer=%lld D=%lld inner=%lld)", name, (long long)outer, (long long)D,
              (long long)inner);
  DT_REQUIRE_(is_log == 0 || is_log == 1, "%s: is_log=%d must be 0 or 1", name, is_log);
  if (outer == 0 || D == 0 || inner == 0) return DT_OK;
  DT_REQUIRE_(pointers_ok, "%s: null pointer", name);
  return DT_OK;
}

static inline dt_status dt_check_softmax_dim_fwd(const float* out, const float* inp, int64_t outer, int64_t D,
                                                 int64_t inner, int32_t is_log) {
  return dt_check_softmax_dim_("dt_softmax_dim_fwd", out && inp, outer, D, inner, is_log);
}

static inline dt_status dt_check_softmax_dim_bwd(const float* dinp, const float* dout, const float* out,
                                                 int64_t outer, int64_t D, int64_t inner, int32_t is_log) {
  return dt_check_softmax_dim_("dt_softmax_dim_bwd", dinp && dout && out, outer, D, inner, is_log);
}

/* ---- gathers along a dim ---------------------------------------------------------------------- */

static inline dt_status dt_check_index_sizes_(const char* name, int64_t outer, int64_t D, int64_t J, int64_t inner,
                                              int64_t elem) {
  DT_REQUIRE_(outer >= 0 && D >= 0 && J >= 0 && inner >= 0,
              "%s: negative size (outer=%lld D=%lld J=%lld inner=%lld)", name, (long long)outer, (long long)D,
              (long long)J, (long long)inner);
  DT_REQUIRE_(elem >= 1 && elem <= 64, "%s: elem_bytes=%lld must be in [1, 64]", name, (long long)elem);
  int64_t a, b;
  DT_REQUIRE_(dt_mul_ok_(outer, inner, &a) && dt_mul_ok_(a, D > J ? D : J, &b) && dt_mul_ok_(b, elem, &b),
              "%s: size overflows (outer=%lld D=%lld J=%lld inner=%lld)", name, (long long)outer, (long long)D,
              (long long)J, (long long)inner);
  return DT_OK;
}

/* dt_gather_dim (one index per output) and dt_index_select (one per j); the
 * indices are checked after this (outer * J * inner of them, or J). */
static inline dt_status dt_check_gather_(const char* name, const void* out, const void* inp, const int32_t* idx,
                                         int64_t outer, int64_t D, int64_t J, int64_t inner, int64_t elem_bytes) {
  DT_TRY_(dt_check_index_sizes_(name, outer, D, J, inner, elem_bytes));
  if (outer * J * inner == 0) return DT_OK;
  DT_REQUIRE_(idx, "%s: null idx", name);
  DT_REQUIRE_(out && inp, "%s: null pointer (out=%p inp=%p)", name, out, inp);
  return DT_OK;
}

static inline dt_status dt_check_gather_dim(const void* out, const void* inp, const int32_t* idx, int64_t outer,
                                            int64_t D, int64_t J, int64_t inner, int64_t elem_bytes) {
  return dt_check_gather_("dt_gather_dim", out, inp, idx, outer, D, J, inner, elem_bytes);
}

static inline dt_status dt_check_index_select(const void* out, const void* inp, const int32_t* idx, int64_t outer,
                                              int64_t D, int64_t J, int64_t inner, int64_t elem_bytes) {
  return dt_check_gather_("dt_index_select", out, inp, idx, outer, D, J, inner, elem_bytes);
}

/* The backwards dt_scatter_add_dim and dt_index_add: an empty call is one
 * with no dinp element (its indices are not checked); otherwise the indices
 * are checked after this. */
static inline dt_status dt_check_scatter_(const char* name, const float* dinp, const float* dout, const int32_t* idx,
                                          int64_t outer, int64_t D, int64_t J, int64_t inner) {
  DT_TRY_(dt_check_index_sizes_(name, outer, D, J, inner, 4));
  if (outer * D * inner == 0) {
    DT_REQUIRE_(D > 0 || J == 0 || outer * inner == 0, "%s: %lld indices into an empty dimension (D=0)", name,
                (long long)J);
    return DT_OK;
  }
  DT_REQUIRE_(idx || J == 0, "%s: null idx", name);
  DT_REQUIRE_(dinp && (dout || J == 0), "%s: null pointer (dinp=%p dout=%p)", name, (const void*)dinp,
              (const void*)dout);
  return DT_OK;
}

static inline dt_status dt_check_scatter_add_dim(const float* dinp, const float* dout, const int32_t* idx,
                                                 int64_t outer, int64_t D, int64_t J, int64_t inner) {
  return dt_check_scatter_("dt_scatter_add_dim", dinp, dout, idx, outer, D, J, inner);
}

static inline dt_status dt_check_index_add(const float* dinp, const float* dout, const int32_t* idx, int64_t outer,
                                           int64_t D, int64_t J, int64_t inner) {
  return dt_check_scatter_("dt_index_add", dinp, dout, idx, outer, D, J, inner);
}

/* ---- convolution ------------------------------------------------------------------------------- */

/* Reads and checks a convolution geometry: positive kernel, stride and
 * dilation, non-negative sizes and padding, products that fit int64. */
static inline dt_status dt_check_conv_geom_(const char* name, const int64_t* a, dt_conv_geom* g) {
  DT_REQUIRE_(a, "%s: null geometry", name);
  *g = (dt_conv_geom){a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13]};
  DT_REQUIRE_(g->N >= 0 && g->C >= 0 && g->H >= 0 && g->W >= 0 && g->OH >= 0 && g->OW >= 0,
              "%s: negative size (N=%lld C=%lld H=%lld W=%lld OH=%lld OW=%lld)", name, (long long)g->N,
              (long long)g->C, (long long)g->H, (long long)g->W, (long long)g->OH, (long long)g->OW);
  DT_REQUIRE_(g->KH >= 1 && g->KW >= 1 && g->SH >= 1 && g->SW >= 1 && g->DH >= 1 && g->DW >= 1,
              "%s: kernel (%lld, %lld), stride (%lld, %lld) and dilation (%lld, %lld) must be >= 1", name,
              (long long)g->KH, (long long)g->KW, (long long)g->SH, (long long)g->SW, (long long)g->DH,
              (long long)g->DW);
  DT_REQUIRE_(g->PH >= 0 && g->PW >= 0, "%s: negative padding (%lld, %lld)", name, (long long)g->PH,
              (long long)g->PW);
  int64_t t, rows, cols;
  DT_REQUIRE_(dt_mul_ok_(g->C, g->KH, &rows) && dt_mul_ok_(rows, g->KW, &rows) && dt_mul_ok_(g->N, g->OH, &cols) &&
                  dt_mul_ok_(cols, g->OW, &cols) && dt_mul_ok_(rows, cols, &t) && dt_mul_ok_(t, 4, &t) &&
                  dt_mul_ok_(g->N, g->C, &t) && dt_mul_ok_(t, g->H + 2 * g->PH, &t) &&
                  dt_mul_ok_(t, g->W + 2 * g->PW, &t) && dt_mul_ok_(t, 4, &t),
              "%s: sizes overflow (N=%lld C=%lld H=%lld W=%lld, kernel %lldx%lld, output %lldx%lld)", name,
              (long long)g->N, (long long)g->C, (long long)g->H, (long long)g->W, (long long)g->KH, (long long)g->KW,
              (long long)g->OH, (long long)g->OW);
  /* taps and output positions index with these products; keep them far from overflow */
  DT_REQUIRE_(g->OH <= (INT64_MAX / 4) / g->SH && g->OW <= (INT64_MAX / 4) / g->SW &&
                  g->KH <= (INT64_MAX / 4) / g->DH && g->KW <= (INT64_MAX / 4) / g->DW,
              "%s: stride or dilation too large", name);
  return DT_OK;
}

static inline dt_status dt_check_im2col(const float* col, const float* inp, const int64_t* geom, dt_conv_geom* g) {
  DT_TRY_(dt_check_conv_geom_("dt_im2col", geom, g));
  if (g->C * g->KH * g->KW * g->N == 0 || g->OH * g->OW == 0) return DT_OK;
  DT_REQUIRE_(col && (inp || g->H * g->W == 0), "dt_im2col: null pointer (col=%p inp=%p)", (const void*)col,
              (const void*)inp);
  return DT_OK;
}

static inline dt_status dt_check_col2im(const float* dinp, const float* col, const int64_t* geom, dt_conv_geom* g) {
  DT_TRY_(dt_check_conv_geom_("dt_col2im", geom, g));
  if (g->N * g->C == 0 || g->H * g->W == 0) return DT_OK;
  DT_REQUIRE_(dinp && (col || g->OH * g->OW == 0), "dt_col2im: null pointer (dinp=%p col=%p)", (const void*)dinp,
              (const void*)col);
  return DT_OK;
}

/* The direct kernels: the geometry, Cout and groups, and the tap count. */
static inline dt_status dt_check_conv_direct_(const char* name, const int64_t* geom, int64_t Cout, int64_t groups,
                                              dt_conv_geom* g) {
  DT_TRY_(dt_check_conv_geom_(name, geom, g));
  DT_REQUIRE_(groups >= 1 && Cout >= 1 && g->C % groups == 0 && Cout % groups == 0,
              "%s: groups=%lld must divide C=%lld and Cout=%lld (both >= 1)", name, (long long)groups,
              (long long)g->C, (long long)Cout);
  int64_t taps = g->C / groups * g->KH * g->KW, t;
  DT_REQUIRE_(taps <= DT_CONV_DIRECT_MAX_TAPS, "%s: %lld taps per output (C/groups x KH x KW) exceed %d", name,
              (long long)taps, DT_CONV_DIRECT_MAX_TAPS);
  DT_REQUIRE_(dt_mul_ok_(g->N, Cout, &t) && dt_mul_ok_(t, g->OH * g->OW, &t) && dt_mul_ok_(t, 4, &t),
              "%s: output size overflows", name);
  return DT_OK;
}

static inline dt_status dt_check_conv2d_direct_fwd(const float* out, const float* inp, const float* weight,
                                                   const int64_t* geom, int64_t Cout, int64_t groups,
                                                   dt_conv_geom* g) {
  DT_TRY_(dt_check_conv_direct_("dt_conv2d_direct_fwd", geom, Cout, groups, g));
  if (g->N * Cout * g->OH * g->OW == 0) return DT_OK;
  DT_REQUIRE_(out && weight && (inp || g->H * g->W == 0 || g->C == 0),
              "dt_conv2d_direct_fwd: null pointer (out=%p inp=%p weight=%p)", (const void*)out, (const void*)inp,
              (const void*)weight);
  return DT_OK;
}

static inline dt_status dt_check_conv2d_direct_bwd_weight(const float* dweight, const float* dout, const float* inp,
                                                          const int64_t* geom, int64_t Cout, int64_t groups,
                                                          dt_conv_geom* g) {
  DT_TRY_(dt_check_conv_direct_("dt_conv2d_direct_bwd_weight", geom, Cout, groups, g));
  DT_REQUIRE_(dweight && (dout || g->N * g->OH * g->OW == 0) && (inp || g->N * g->H * g->W == 0),
              "dt_conv2d_direct_bwd_weight: null pointer (dweight=%p dout=%p inp=%p)", (const void*)dweight,
              (const void*)dout, (const void*)inp);
  return DT_OK;
}

static inline dt_status dt_check_conv2d_direct_bwd_input(const float* dinp, const float* dout, const float* weight,
                                                         const int64_t* geom, int64_t Cout, int64_t groups,
                                                         dt_conv_geom* g) {
  DT_TRY_(dt_check_conv_direct_("dt_conv2d_direct_bwd_input", geom, Cout, groups, g));
  if (g->N * g->C * g->H * g->W == 0) return DT_OK;
  DT_REQUIRE_(dinp && weight && (dout || g->OH * g->OW == 0),
              "dt_conv2d_direct_bwd_input: null pointer (dinp=%p dout=%p weight=%p)", (const void*)dinp,
              (const void*)dout, (const void*)weight);
  return DT_OK;
}

/* ---- Winograd F(2x2, 3x3) convolution ------------------------------------------------------------ */

/* A conv geometry that Winograd F(2x2, 3x3) computes: 3x3 kernel, stride and
 * dilation 1, the output size the padding gives; *w gets its tile grid. */
static inline dt_status dt_check_wino_geom_(const char* name, const int64_t* geom, dt_wino_geom* w) {
  dt_conv_geom g = {0};
  DT_TRY_(dt_check_conv_geom_(name, geom, &g));
  DT_REQUIRE_(g.KH == 3 && g.KW == 3 && g.SH == 1 && g.SW == 1 && g.DH == 1 && g.DW == 1,
              "%s: Winograd F(2x2, 3x3) needs a 3x3 kernel at stride 1 and dilation 1, got kernel (%lld, %lld), "
              "stride (%lld, %lld), dilation (%lld, %lld)",
              name, (long long)g.KH, (long long)g.KW, (long long)g.SH, (long long)g.SW, (long long)g.DH,
              (long long)g.DW);
  DT_REQUIRE_(g.OH == (g.H + 2 * g.PH - 2 > 0 ? g.H + 2 * g.PH - 2 : 0) &&
                  g.OW == (g.W + 2 * g.PW - 2 > 0 ? g.W + 2 * g.PW - 2 : 0),
              "%s: output %lldx%lld does not match input %lldx%lld padded by (%lld, %lld)", name, (long long)g.OH,
              (long long)g.OW, (long long)g.H, (long long)g.W, (long long)g.PH, (long long)g.PW);
  *w = (dt_wino_geom){g.N, g.C, g.H, g.W, g.PH, g.PW, g.OH, g.OW, (g.OH + 1) / 2, (g.OW + 1) / 2};
  return DT_OK;
}

/* Tiles [t0, t0 + nt) of the grid, stored for `channels` channels at leading dimension ld. */
static inline dt_status dt_check_wino_block_(const char* name, const dt_wino_geom* w, int64_t channels, int64_t t0,
                                             int64_t nt, int64_t ld) {
  int64_t tiles, t;
  DT_REQUIRE_(dt_mul_ok_(w->N, w->TH, &tiles) && dt_mul_ok_(tiles, w->TW, &tiles), "%s: the tile count overflows",
              name);
  DT_REQUIRE_(t0 >= 0 && nt >= 0 && t0 <= tiles && nt <= tiles - t0,
              "%s: tiles [%lld, %lld + %lld) are not within the %lld tiles of the output", name, (long long)t0,
              (long long)t0, (long long)nt, (long long)tiles);
  DT_REQUIRE_(ld >= nt && ld >= 1, "%s: ld=%lld must be >= max(nt=%lld, 1)", name, (long long)ld, (long long)nt);
  DT_REQUIRE_(channels >= 0 && dt_mul_ok_(channels, 16, &t) && dt_mul_ok_(t, ld, &t) && dt_mul_ok_(t, 4, &t),
              "%s: the transformed block overflows (channels=%lld ld=%lld)", name, (long long)channels,
              (long long)ld);
  return DT_OK;
}

static inline dt_status dt_check_wino_kernel_(const char* name, int pointers_ok, int64_t Cout, int64_t C) {
  int64_t t;
  DT_REQUIRE_(Cout >= 0 && C >= 0, "%s: negative size (Cout=%lld C=%lld)", name, (long long)Cout, (long long)C);
  DT_REQUIRE_(dt_mul_ok_(Cout, C, &t) && dt_mul_ok_(t, 16 * 4, &t), "%s: size overflows (Cout=%lld C=%lld)", name,
              (long long)Cout, (long long)C);
  if (Cout * C == 0) return DT_OK;
  DT_REQUIRE_(pointers_ok, "%s: null pointer", name);
  return DT_OK;
}

static inline dt_status dt_check_winograd_weight(const float* u, const float* w, int64_t Cout, int64_t C) {
  return dt_check_wino_kernel_("dt_winograd_weight", u && w, Cout, C);
}

static inline dt_status dt_check_winograd_weight_grad(const float* dw, const float* m, int64_t Cout, int64_t C) {
  return dt_check_wino_kernel_("dt_winograd_weight_grad", dw && m, Cout, C);
}

static inline dt_status dt_check_winograd_input(const float* v, const float* x, const int64_t* geom, int64_t t0,
                                                int64_t nt, int64_t ld, dt_wino_geom* w) {
  DT_TRY_(dt_check_wino_geom_("dt_winograd_input", geom, w));
  DT_TRY_(dt_check_wino_block_("dt_winograd_input", w, w->C, t0, nt, ld));
  if (nt * w->C == 0) return DT_OK;
  DT_REQUIRE_(v && (x || w->H * w->W == 0), "dt_winograd_input: null pointer (v=%p x=%p)", (const void*)v,
              (const void*)x);
  return DT_OK;
}

static inline dt_status dt_check_winograd_input_grad(const float* dx, const float* dv, const int64_t* geom,
                                                     int64_t t0, int64_t nt, int64_t ld, dt_wino_geom* w) {
  DT_TRY_(dt_check_wino_geom_("dt_winograd_input_grad", geom, w));
  DT_TRY_(dt_check_wino_block_("dt_winograd_input_grad", w, w->C, t0, nt, ld));
  if (nt * w->C * w->H * w->W == 0) return DT_OK;
  DT_REQUIRE_(dx && dv, "dt_winograd_input_grad: null pointer (dx=%p dv=%p)", (const void*)dx, (const void*)dv);
  return DT_OK;
}

static inline dt_status dt_check_winograd_output(const float* y, const float* m, const int64_t* geom, int64_t Cout,
                                                 int64_t t0, int64_t nt, int64_t ld, dt_wino_geom* w) {
  DT_TRY_(dt_check_wino_geom_("dt_winograd_output", geom, w));
  DT_REQUIRE_(Cout >= 0, "dt_winograd_output: negative Cout=%lld", (long long)Cout);
  DT_TRY_(dt_check_wino_block_("dt_winograd_output", w, Cout, t0, nt, ld));
  int64_t t;
  DT_REQUIRE_(dt_mul_ok_(w->N * w->OH * w->OW, Cout, &t) && dt_mul_ok_(t, 4, &t),
              "dt_winograd_output: output size overflows");
  if (nt * Cout == 0) return DT_OK;
  DT_REQUIRE_(y && m, "dt_winograd_output: null pointer (y=%p m=%p)", (const void*)y, (const void*)m);
  return DT_OK;
}

static inline dt_status dt_check_winograd_output_grad(const float* p, const float* dy, const int64_t* geom,
                                                      int64_t Cout, int64_t t0, int64_t nt, int64_t ld,
                                                      dt_wino_geom* w) {
  DT_TRY_(dt_check_wino_geom_("dt_winograd_output_grad", geom, w));
  DT_REQUIRE_(Cout >= 0, "dt_winograd_output_grad: negative Cout=%lld", (long long)Cout);
  DT_TRY_(dt_check_wino_block_("dt_winograd_output_grad", w, Cout, t0, nt, ld));
  int64_t t;
  DT_REQUIRE_(dt_mul_ok_(w->N * w->OH * w->OW, Cout, &t) && dt_mul_ok_(t, 4, &t),
              "dt_winograd_output_grad: output size overflows");
  if (nt * Cout == 0) return DT_OK;
  DT_REQUIRE_(p && dy, "dt_winograd_output_grad: null pointer (p=%p dy=%p)", (const void*)p, (const void*)dy);
  return DT_OK;
}

/* ---- pooling ---------------------------------------------------------------------------------- */

/* Reads and checks a pooling geometry; only max pooling (`max`) may dilate. */
static inline dt_status dt_check_pool_geom_(const char* name, const int64_t* a, dt_pool_geom* g, int max) {
  DT_REQUIRE_(a, "%s: null geometry", name);
  *g = (dt_pool_geom){a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12]};
  DT_REQUIRE_(g->P >= 0 && g->H >= 0 && g->W >= 0 && g->OH >= 0 && g->OW >= 0,
              "%s: negative size (planes=%lld H=%lld W=%lld OH=%lld OW=%lld)", name, (long long)g->P,
              (long long)g->H, (long long)g->W, (long long)g->OH, (long long)g->OW);
  DT_REQUIRE_(g->KH >= 1 && g->KW >= 1 && g->SH >= 1 && g->SW >= 1 && g->DH >= 1 && g->DW >= 1,
              "%s: kernel (%lld, %lld), stride (%lld, %lld) and dilation (%lld, %lld) must be >= 1", name,
              (long long)g->KH, (long long)g->KW, (long long)g->SH, (long long)g->SW, (long long)g->DH,
              (long long)g->DW);
  DT_REQUIRE_(max || (g->DH == 1 && g->DW == 1), "%s: dilation (%lld, %lld) must be 1", name, (long long)g->DH,
              (long long)g->DW);
  DT_REQUIRE_(g->PH >= 0 && g->PW >= 0 && g->PH <= g->KH / 2 && g->PW <= g->KW / 2,
              "%s: padding (%lld, %lld) must be in [0, kernel / 2] (kernel %lld x %lld)", name, (long long)g->PH,
              (long long)g->PW, (long long)g->KH, (long long)g->KW);
  int64_t hw, t;
  DT_REQUIRE_(dt_mul_ok_(g->H, g->W, &hw) && hw <= INT32_MAX && dt_mul_ok_(g->P, hw, &t) && dt_mul_ok_(t, 4, &t) &&
                  dt_mul_ok_(g->OH, g->OW, &t) && dt_mul_ok_(t, g->P, &t) && dt_mul_ok_(t, 4, &t),
              "%s: sizes overflow (planes=%lld H=%lld W=%lld OH=%lld OW=%lld; a plane must have < 2^31 elements)",
              name, (long long)g->P, (long long)g->H, (long long)g->W, (long long)g->OH, (long long)g->OW);
  DT_REQUIRE_(g->OH <= (INT64_MAX / 4) / g->SH && g->OW <= (INT64_MAX / 4) / g->SW &&
                  g->KH <= (INT64_MAX / 4) / g->DH && g->KW <= (INT64_MAX / 4) / g->DW,
              "%s: stride, kernel or dilation too large", name);
  return DT_OK;
}

static inline dt_status dt_check_maxpool2d_fwd(const float* out, const int32_t* idx, const float* inp,
                                               const int64_t* geom, dt_pool_geom* g) {
  DT_TRY_(dt_check_pool_geom_("dt_maxpool2d_fwd", geom, g, 1));
  if (g->P * g->OH * g->OW == 0) return DT_OK;
  DT_REQUIRE_(out && idx && inp, "dt_maxpool2d_fwd: null pointer (out=%p idx=%p inp=%p)", (const void*)out,
              (const void*)idx, (const void*)inp);
  return DT_OK;
}

/* The saved indices are checked after this (each in [-1, H*W): a stale one
 * must not write astray). */
static inline dt_status dt_check_maxpool2d_bwd(const float* dinp, const float* dout, const int32_t* idx,
                                               const int64_t* geom, dt_pool_geom* g) {
  DT_TRY_(dt_check_pool_geom_("dt_maxpool2d_bwd", geom, g, 1));
  if (g->P * g->H * g->W == 0) return DT_OK;
  int64_t n = g->P * g->OH * g->OW;
  DT_REQUIRE_(dinp && ((dout && idx) || n == 0), "dt_maxpool2d_bwd: null pointer (dinp=%p dout=%p idx=%p)",
              (const void*)dinp, (const void*)dout, (const void*)idx);
  return DT_OK;
}

static inline dt_status dt_check_avgpool2d_(const char* name, const int64_t* geom, int64_t divisor_override,
                                            dt_pool_geom* g) {
  DT_TRY_(dt_check_pool_geom_(name, geom, g, 0));
  DT_REQUIRE_(divisor_override >= 0, "%s: divisor_override=%lld must be >= 0 (0: none)", name,
              (long long)divisor_override);
  return DT_OK;
}

static inline dt_status dt_check_avgpool2d_fwd(const float* out, const float* inp, const int64_t* geom,
                                               int64_t divisor_override, dt_pool_geom* g) {
  DT_TRY_(dt_check_avgpool2d_("dt_avgpool2d_fwd", geom, divisor_override, g));
  if (g->P * g->OH * g->OW == 0) return DT_OK;
  DT_REQUIRE_(out && inp, "dt_avgpool2d_fwd: null pointer (out=%p inp=%p)", (const void*)out, (const void*)inp);
  return DT_OK;
}

static inline dt_status dt_check_avgpool2d_bwd(const float* dinp, const float* dout, const int64_t* geom,
                                               int64_t divisor_override, dt_pool_geom* g) {
  DT_TRY_(dt_check_avgpool2d_("dt_avgpool2d_bwd", geom, divisor_override, g));
  if (g->P * g->H * g->W == 0) return DT_OK;
  DT_REQUIRE_(dinp && (dout || g->OH * g->OW == 0), "dt_avgpool2d_bwd: null pointer (dinp=%p dout=%p)",
              (const void*)dinp, (const void*)dout);
  return DT_OK;
}

/* Adaptive pooling takes plain sizes; its windows follow from them. */
static inline dt_status dt_check_adaptive_(const char* name, int pointers_ok, int64_t P, int64_t H, int64_t W,
                                           int64_t OH, int64_t OW) {
  DT_REQUIRE_(P >= 0 && H >= 0 && W >= 0 && OH >= 0 && OW >= 0,
              "%s: negative size (planes=%lld H=%lld W=%lld OH=%lld OW=%lld)", name, (long long)P, (long long)H,
              (long long)W, (long long)OH, (long long)OW);
  DT_REQUIRE_((OH >= 1 && OW >= 1) || P == 0, "%s: output size (%lld, %lld) must be >= 1", name, (long long)OH,
              (long long)OW);
  DT_REQUIRE_((H >= 1 && W >= 1) || P == 0, "%s: input size (%lld, %lld) must be >= 1", name, (long long)H,
              (long long)W);
  int64_t t;
  DT_REQUIRE_(dt_mul_ok_(H, W, &t) && dt_mul_ok_(t, P, &t) && dt_mul_ok_(t, 4, &t) && dt_mul_ok_(OH, OW, &t) &&
                  dt_mul_ok_(t, P, &t) && dt_mul_ok_(t, 4, &t) && OH <= INT64_MAX / (H + 1) &&
                  OW <= INT64_MAX / (W + 1),
              "%s: sizes overflow (planes=%lld H=%lld W=%lld OH=%lld OW=%lld)", name, (long long)P, (long long)H,
              (long long)W, (long long)OH, (long long)OW);
  if (P == 0) return DT_OK;
  DT_REQUIRE_(pointers_ok, "%s: null pointer", name);
  return DT_OK;
}

static inline dt_status dt_check_adaptive_avgpool2d_fwd(const float* out, const float* inp, int64_t P, int64_t H,
                                                        int64_t W, int64_t OH, int64_t OW) {
  return dt_check_adaptive_("dt_adaptive_avgpool2d_fwd", out && inp, P, H, W, OH, OW);
}

static inline dt_status dt_check_adaptive_avgpool2d_bwd(const float* dinp, const float* dout, int64_t P, int64_t H,
                                                        int64_t W, int64_t OH, int64_t OW) {
  return dt_check_adaptive_("dt_adaptive_avgpool2d_bwd", dinp && dout, P, H, W, OH, OW);
}

/* ---- batch norm --------------------------------------------------------------------------------- */

static inline dt_status dt_check_bn_sizes_(const char* name, int64_t N, int64_t C, int64_t HW) {
  DT_REQUIRE_(N >= 0 && C >= 0 && HW >= 0, "%s: negative size (N=%lld C=%lld HW=%lld)", name, (long long)N,
              (long long)C, (long long)HW);
  int64_t t;
  DT_REQUIRE_(dt_mul_ok_(N, C, &t) && dt_mul_ok_(t, HW, &t) && dt_mul_ok_(t, 4, &t) && dt_mul_ok_(C, 16, &t),
              "%s: size overflows (N=%lld C=%lld HW=%lld)", name, (long long)N, (long long)C, (long long)HW);
  return DT_OK;
}

static inline dt_status dt_check_bn_sum(const double* acc, const float* inp, int64_t N, int64_t C, int64_t HW) {
  DT_TRY_(dt_check_bn_sizes_("dt_bn_sum", N, C, HW));
  DT_REQUIRE_(acc && (inp || N * C * HW == 0), "dt_bn_sum: null pointer (acc=%p inp=%p)", (const void*)acc,
              (const void*)inp);
  return DT_OK;
}

/* The element count acc[C] is data: checked after this, when C > 0. */
static inline dt_status dt_check_bn_sqdev(const double* sq, const float* inp, const double* acc, int64_t N, int64_t C,
                                          int64_t HW) {
  DT_TRY_(dt_check_bn_sizes_("dt_bn_sqdev", N, C, HW));
  if (C == 0) return DT_OK;
  DT_REQUIRE_(sq && acc && (inp || N * C * HW == 0), "dt_bn_sqdev: null pointer (sq=%p inp=%p acc=%p)",
              (const void*)sq, (const void*)inp, (const void*)acc);
  return DT_OK;
}

/* The element count acc[C] is checked after this. */
static inline dt_status dt_check_bn_finalize(const float* mean, const float* rstd, const double* acc, const double* sq,
                                             int64_t C, double eps, double momentum) {
  DT_REQUIRE_(C >= 0, "dt_bn_finalize: negative C=%lld", (long long)C);
  DT_REQUIRE_(eps >= 0.0, "dt_bn_finalize: eps=%g must be >= 0", eps);
  DT_REQUIRE_(momentum == -1.0 || (momentum >= 0.0 && momentum <= 1.0),
              "dt_bn_finalize: momentum=%g must be in [0, 1] (or -1: cumulative average)", momentum);
  DT_REQUIRE_(mean && rstd && acc && sq, "dt_bn_finalize: null pointer (mean=%p rstd=%p acc=%p sq=%p)",
              (const void*)mean, (const void*)rstd, (const void*)acc, (const void*)sq);
  return DT_OK;
}

static inline dt_status dt_check_bn_eval_stats(const float* mean, const float* rstd, const float* running_mean,
                                               const float* running_var, int64_t C, double eps) {
  DT_REQUIRE_(C >= 0, "dt_bn_eval_stats: negative C=%lld", (long long)C);
  DT_REQUIRE_(eps >= 0.0, "dt_bn_eval_stats: eps=%g must be >= 0", eps);
  if (C == 0) return DT_OK;
  DT_REQUIRE_(mean && rstd && running_mean && running_var, "dt_bn_eval_stats: null pointer");
  return DT_OK;
}

static inline dt_status dt_check_bn_apply(const float* out, const float* inp, const float* mean, const float* rstd,
                                          int64_t N, int64_t C, int64_t HW) {
  DT_TRY_(dt_check_bn_sizes_("dt_bn_apply", N, C, HW));
  if (N * C * HW == 0) return DT_OK;
  DT_REQUIRE_(out && inp && mean && rstd, "dt_bn_apply: null pointer (out=%p inp=%p mean=%p rstd=%p)",
              (const void*)out, (const void*)inp, (const void*)mean, (const void*)rstd);
  return DT_OK;
}

static inline dt_status dt_check_bn_bwd_reduce(const double* acc, const float* dout, const float* inp,
                                               const float* mean, const float* rstd, int64_t N, int64_t C,
                                               int64_t HW) {
  DT_TRY_(dt_check_bn_sizes_("dt_bn_bwd_reduce", N, C, HW));
  if (C == 0) return DT_OK;
  DT_REQUIRE_(acc && mean && rstd && ((dout && inp) || N * HW == 0),
              "dt_bn_bwd_reduce: null pointer (acc=%p dout=%p inp=%p mean=%p rstd=%p)", (const void*)acc,
              (const void*)dout, (const void*)inp, (const void*)mean, (const void*)rstd);
  return DT_OK;
}

/* With acc, the element count *count is checked after this. */
static inline dt_status dt_check_bn_bwd_apply(const float* dinp, const float* dout, const float* inp,
                                              const float* mean, const float* rstd, const double* acc,
                                              const double* count, int64_t N, int64_t C, int64_t HW) {
  DT_TRY_(dt_check_bn_sizes_("dt_bn_bwd_apply", N, C, HW));
  if (N * C * HW == 0) return DT_OK;
  DT_REQUIRE_(dinp && dout && inp && mean && rstd,
              "dt_bn_bwd_apply: null pointer (dinp=%p dout=%p inp=%p mean=%p rstd=%p)", (const void*)dinp,
              (const void*)dout, (const void*)inp, (const void*)mean, (const void*)rstd);
  DT_REQUIRE_(!acc || count, "dt_bn_bwd_apply: acc needs the element count (count is NULL)");
  return DT_OK;
}

/* The fused batch norm, ReLU and 2x2 max pooling of (N, C, H, W): output
 * (N, C, H/2, W/2); a plane's indices are int32. */
static inline dt_status dt_check_bn_relu_maxpool2x2_fwd(const float* out, const int32_t* idx, const float* inp,
                                                         const float* mean, const float* rstd, int64_t N, int64_t C,
                                                         int64_t H, int64_t W) {
  DT_REQUIRE_(H >= 0 && W >= 0, "dt_bn_relu_maxpool2x2_fwd: negative size (H=%lld W=%lld)", (long long)H,
              (long long)W);
  int64_t hw;
  DT_REQUIRE_(dt_mul_ok_(H, W, &hw) && hw <= INT32_MAX,
              "dt_bn_relu_maxpool2x2_fwd: a plane of %lld x %lld must have < 2^31 elements", (long long)H,
              (long long)W);
  DT_TRY_(dt_check_bn_sizes_("dt_bn_relu_maxpool2x2_fwd", N, C, hw));
  if (N * C * (H / 2) * (W / 2) == 0) return DT_OK;
  DT_REQUIRE_(out && idx && inp && mean && rstd,
              "dt_bn_relu_maxpool2x2_fwd: null pointer (out=%p idx=%p inp=%p mean=%p rstd=%p)", (const void*)out,
              (const void*)idx, (const void*)inp, (const void*)mean, (const void*)rstd);
  return DT_OK;
}
