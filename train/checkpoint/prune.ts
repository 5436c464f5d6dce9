/**
 * Listing a checkpoint root's `step-*` directories and deleting the ones the
 * rotation policy drops (each renamed to a `.tmp-deleting-*` name first, crash
 * window 4 in manager.ts). Shared by the manager and the background committer.
 */
import { join } from "node:path";
import { describeError } from "./io.ts";
import { parseManifest, readManifestText } from "./format.ts";
import { parseStepDirName, readRoot, stepDirName, tempName } from "./layout.ts";
import { type RotationPolicy, stepsToDelete } from "./rotation.ts";
import { removeQuietly, type SaveContext } from "./save.ts";

/** The `step-*` directories of `ctx.root` by ascending step; `complete` when a valid manifest.json is in place. */
export function listCheckpoints(
  ctx: Pick<SaveContext, "io" | "root">,
): { dir: string; step: number; complete: boolean }[] {
  return readRoot(ctx.io, ctx.root)
    .flatMap((e) => {
      const step = e.isDirectory ? parseStepDirName(e.name) : null;
      return step === null ? [] : [{ dir: join(ctx.root, e.name), step }];
    })
    .sort((a, b) => a.step - b.step)
    .map(({ dir, step }) => ({ dir, step, complete: hasManifest(ctx, dir, step) }));
}

function hasManifest(ctx: Pick<SaveContext, "io">, dir: string, step: number): boolean {
  try {
    parseManifest(readManifestText(ctx.io, dir), step);
    return true;
  } catch {
    return false;
  }
}

/**
 * Deletes what `policy` drops after `justSaved` was saved; a failure is a
 * warning (the next rotation tries again), never an error: the save is done.
 */
export function rotateCheckpoints(
  ctx: SaveContext,
  policy: RotationPolicy,
  justSaved: number,
): void {
  let complete: number[];
  try {
    complete = listCheckpoints(ctx).filter((c) => c.complete).map((c) => c.step);
  } catch (e) {
    const dir = join(ctx.root, stepDirName(justSaved));
    ctx.warn(`Rotation after saving ${dir} failed: ${describeError(e)}`);
    return;
  }
  for (const step of stepsToDelete(complete, justSaved, policy)) {
    const name = stepDirName(step);
    const trash = join(ctx.root, tempName(`deleting-${name}`));
    try {
      ctx.io.rename(join(ctx.root, name), trash);
    } catch (e) {
      const path = join(ctx.root, name);
      ctx.warn(
        `Could not delete old checkpoint ${path}: ${describeError(e)}; ` +
          "the next rotation tries again",
      );
      continue;
    }
    removeQuietly(ctx, trash, `old checkpoint ${name}`);
  }
}
