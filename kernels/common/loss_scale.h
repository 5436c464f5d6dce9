/* loss_scale.h — one element of the mixed-precision gradient unscale:
 * multiply by 1/scale and report whether the original value was inf or NaN
 * (as torch's _amp_foreach_non_finite_check_and_unscale_). */
#pragma once
#include <math.h>
#include "dt_common.h"

/* Returns g * inv_scale (g itself when inv_scale == 1); sets *nonfinite when g is inf/NaN. */
DT_HD float dt_unscale_f(float g, float inv_scale, int* nonfinite) {
  if (!isfinite(g)) *nonfinite = 1;
  return inv_scale == 1.0f ? g : g * inv_scale;
}
