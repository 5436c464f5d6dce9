/**
 * `dtrain doctor`: what a cluster operator needs to know before a run —
 * versions, native libraries, CPU, memory, /dev/shm against the chosen ranks,
 * GPUs and NCCL, limits — and an exit code: 0 when the run can start, 1 with
 * `- fix:` advice when something it needs is missing.
 */
import { parseArgs } from "node:util";
import { type DoctorRequest, gatherFacts } from "./facts.ts";
import { renderReport } from "./render.ts";
import { judge } from "./verdict.ts";

/** `dtrain doctor --help`. */
export function doctorHelp(): string {
  return [
    "Usage: dtrain doctor [--nproc N] [--device auto|cpu|cuda] [--nnodes N --master-addr A] [--params N] [--json]",
    "",
    "Checks this machine for a run of N ranks and prints what it found.",
    "Exits 0 when the run can start, 1 with `- fix:` lines when it cannot.",
    "",
    "  --nproc N      ranks the run will start on this machine (default: the cores, " +
    `${navigator.hardwareConcurrency || 1})`,
    "  --device D     auto (GPU when usable), cpu or cuda (default: auto)",
    "  --nnodes N     machines in the run (default 1); CPU ranks across machines use Gloo",
    "  --master-addr A  node 0's address: Gloo binds the interface that reaches it unless",
    "                 GLOO_SOCKET_IFNAME names one (default: this machine's host name)",
    "  --params N     f32 parameters of the model: whether /dev/shm has room for DDP's gradient",
    "                 buckets in shared memory on every rank (else DDP falls back to slower ones)",
    "  --json         print the facts and the verdict as JSON",
  ].join("\n");
}

function parseDoctorArgs(args: string[]): (DoctorRequest & { json: boolean }) | "help" {
  const { values } = parseArgs({
    args,
    options: {
      nproc: { type: "string" },
      device: { type: "string", default: "auto" },
      nnodes: { type: "string", default: "1" },
      "master-addr": { type: "string" },
      params: { type: "string" },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) return "help";
  const nproc = values.nproc === undefined
    ? navigator.hardwareConcurrency || 1
    : Number(values.nproc);
  if (!Number.isInteger(nproc) || nproc < 1) {
    throw new RangeError(`--nproc ${values.nproc}: expected a whole number >= 1`);
  }
  const device = values.device;
  if (device !== "auto" && device !== "cpu" && device !== "cuda") {
    throw new RangeError(`--device ${device}: expected auto, cpu or cuda`);
  }
  const nnodes = Number(values.nnodes);
  if (!Number.isInteger(nnodes) || nnodes < 1) {
    throw new RangeError(`--nnodes ${values.nnodes}: expected a whole number >= 1`);
  }
  const params = values.params === undefined ? null : Number(values.params);
  if (params !== null && (!Number.isSafeInteger(params) || params < 1)) {
    throw new RangeError(`--params ${values.params}: expected a whole number >= 1`);
  }
  return {
    nproc,
    device,
    nnodes,
    masterAddr: values["master-addr"] ?? null,
    params,
    json: values.json,
  };
}

/**
 * Runs `dtrain doctor` with the arguments after the verb; resolves to the
 * exit code (2 for a usage error).
 *
 * @example
 * ```ts
 * Deno.exit(await doctorMain(["--nproc", "8"]));
 * ```
 */
export function doctorMain(args: string[]): Promise<number> {
  let opts;
  try {
    opts = parseDoctorArgs(args);
  } catch (e) {
    console.error(`dtrain doctor: ${(e as Error).message}\n\n${doctorHelp()}`);
    return Promise.resolve(2);
  }
  if (opts === "help") {
    console.log(doctorHelp());
    return Promise.resolve(0);
  }
  const facts = gatherFacts({
    nproc: opts.nproc,
    device: opts.device,
    nnodes: opts.nnodes,
    masterAddr: opts.masterAddr,
    params: opts.params,
  });
  const verdict = judge(facts);
  console.log(
    opts.json ? JSON.stringify({ ...verdict, facts }, null, 2) : renderReport(facts, verdict),
  );
  return Promise.resolve(verdict.ready ? 0 : 1);
}
