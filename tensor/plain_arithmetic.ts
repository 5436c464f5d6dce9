/**
 * Plain arithmetic: a process-wide setting that turns the optional numerics
 * off — autocast computes in f32, a GradScaler does not scale, clipGradNorm
 * measures the norm without clipping, Dropout passes its input through — so
 * that a tool can compare runs in plain f32 (dropout masks cannot match
 * between one process and N ranks: each draws from its own position in the
 * mask stream). `dtrain check` sets it from above (its probe); nothing in the
 * library reads it from the environment. Off unless set. What it turned off
 * at least once is kept, so the tool can say so.
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

const bypassed = new Set<string>();

/** Called by a part that skipped its work because plain arithmetic is on ("dropout", …). */
export function notePlainBypass(what: string): void {
  bypassed.add(what);
}

/** What plain arithmetic turned off so far in this process, sorted. */
export function plainBypassed(): string[] {
  return [...bypassed].sort();
}
