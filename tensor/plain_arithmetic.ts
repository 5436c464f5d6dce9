/**
 * Plain arithmetic: a process-wide setting that turns the optional numerics
 * off — autocast computes in f32, a GradScaler does not scale, clipGradNorm
 * measures the norm without clipping — so that a tool can compare runs in
 * plain f32. `dtrain check` sets it from above (its probe); nothing in the
 * library reads it from the environment. Off unless set.
 */

let plain = false;

/** Whether plain arithmetic is on. */
export function plainArithmetic(): boolean {
  return plain;
}

/**
 * Turns plain arithmetic on or off for this process (a Trainer's config
 * should say the same: precision.autocast "f32", precision.gradScaler false,
 * clipGradNorm null).
 */
export function setPlainArithmetic(on: boolean): void {
  plain = on;
}
