/**
 * The checkpoint manager's background thread: writes one encoded checkpoint
 * at a time by the protocol in manager.ts (every file fsynced, manifest last,
 * directory fsynced, pointer, renames, directory fsyncs), answers through
 * shared memory, then rotates once the manager's saved-hooks have run.
 */
import { parentPort } from "node:worker_threads";
import { denoCheckpointIO, describeError } from "./io.ts";
import { commitCheckpoint, type SaveContext } from "./save.ts";
import { rotateCheckpoints } from "./prune.ts";
import {
  type CommitFailure,
  type CommitJob,
  type RotateJob,
  STATE,
  writeAnswer,
} from "./commit_protocol.ts";

let committed: { job: CommitJob; ctx: SaveContext; warnings: string[] } | null = null;

function failure(e: unknown): CommitFailure {
  const cause = e instanceof Error ? e.cause : undefined;
  const out: CommitFailure = { message: describeError(e) };
  if (cause instanceof Error) {
    const code = (cause as { code?: unknown }).code;
    out.cause = { name: cause.name, message: cause.message };
    if (typeof code === "string") out.cause.code = code;
  }
  return out;
}

parentPort?.on("message", (msg: CommitJob | RotateJob) => {
  if (msg.kind === "commit") {
    const warnings: string[] = [];
    const ctx: SaveContext = {
      root: msg.root,
      io: denoCheckpointIO,
      fsync: msg.fsync,
      warn: (m) => warnings.push(m),
    };
    try {
      const dir = commitCheckpoint(ctx, { step: msg.step, files: msg.files });
      committed = { job: msg, ctx, warnings: [] };
      ctx.warn = (m) => committed!.warnings.push(m);
      writeAnswer(msg.sab, STATE.COMMITTED, { dir, warnings });
      parentPort?.postMessage("committed");
    } catch (e) {
      writeAnswer(msg.sab, STATE.FAILED, { warnings, error: failure(e) });
      parentPort?.postMessage("failed");
    }
  } else if (msg.kind === "rotate" && committed !== null) {
    const { job, ctx, warnings } = committed;
    committed = null;
    try {
      rotateCheckpoints(ctx, job.policy, job.step);
    } catch (e) {
      warnings.push(`Rotation after saving step ${job.step} failed: ${describeError(e)}`);
    }
    writeAnswer(job.sab, STATE.DONE, { warnings });
    parentPort?.postMessage("done");
  }
});
