/**
 * Child process of the kill tests: resumes from the latest checkpoint in
 * --dir, then saves payloadForStep(step) for step = resumed+1, +2, ... and
 * prints "ready <step>", "begin <step>", "end <step>" as it goes, so the parent
 * knows what was committed when it SIGKILLs this process. With --async the
 * saves are asynchronous, overlapping the next payload's making as training
 * would, and "end <step>" is printed once wait() says that step is durable.
 *
 *   deno run -A checkpoint_writer.ts --dir D [--saves N] [--scale K] [--keep-last L] [--keep-every E] [--async]
 */
import { parseArgs } from "node:util";
import { CheckpointManager } from "../../../train/checkpoint/manager.ts";
import { payloadForStep } from "./checkpoint_payloads.ts";

const encoder = new TextEncoder();
/** Writes one line straight to the pipe (no buffering), so it is there even if the next instant kills us. */
function say(line: string): void {
  const bytes = encoder.encode(`${line}\n`);
  for (let done = 0; done < bytes.length;) done += Deno.stdout.writeSync(bytes.subarray(done));
}

const { values } = parseArgs({
  args: Deno.args,
  options: {
    dir: { type: "string" },
    saves: { type: "string", default: "1000000" },
    scale: { type: "string", default: "1" },
    "keep-last": { type: "string", default: "2" },
    "keep-every": { type: "string" },
    async: { type: "boolean", default: false },
  },
});
if (values.dir === undefined) {
  throw new Error("checkpoint_writer.ts needs --dir <checkpoint directory>");
}

const manager = new CheckpointManager(values.dir, {
  rank: 0,
  keepLast: Number(values["keep-last"]),
  ...(values["keep-every"] === undefined ? {} : { keepEvery: Number(values["keep-every"]) }),
  onWarning: (message) => console.error(`warning: ${message}`),
  async: values.async,
});
const resumed = manager.loadLatest()?.step ?? 0;
say(`ready ${resumed}`);
const scale = Number(values.scale);
let inFlight: number | null = null;
for (let step = resumed + 1; step <= resumed + Number(values.saves); step++) {
  const payload = payloadForStep(step, { scale }); // the "training" between saves
  if (inFlight !== null) {
    await manager.wait();
    say(`end ${inFlight}`);
  }
  say(`begin ${step}`);
  manager.save(payload);
  if (values.async) inFlight = step;
  else say(`end ${step}`);
}
if (inFlight !== null) {
  await manager.wait();
  say(`end ${inFlight}`);
}
say("done");
