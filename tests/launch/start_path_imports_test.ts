/**
 * What a launch loads before the first optimizer step, checked on the real import graph (`deno
 * info --json`): modules that cost start-up time and are needed only on some paths stay out of the
 * static graphs of the launcher (cli.ts) and of a rank (its bootstrap, then the library its script
 * imports); they load on first use instead (os/node_builtin.ts, dynamic imports). Each one kept
 * out here was measured (docs/BENCHMARKS.md, "Launch"): node:crypto ~15-20 ms of CPU per process,
 * zod ~20-30 ms.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { nodeCrypto, nodeWorkerThreads } from "../../os/node_builtin.ts";

const REPO = fileURLToPath(new URL("../../", import.meta.url));

interface InfoModule {
  specifier: string;
  dependencies?: { specifier: string; code?: { specifier?: string }; isDynamic?: boolean }[];
}

/**
 * The modules `entry` loads before any of its code runs: its imports that are neither dynamic nor
 * type-only, followed transitively; each mapped to the chain of importers that pulls it in.
 */
async function staticGraph(entry: string): Promise<Map<string, string[]>> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", "--config", join(REPO, "deno.json"), entry],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, `deno info ${entry} failed: ${new TextDecoder().decode(out.stderr)}`);
  const info = JSON.parse(new TextDecoder().decode(out.stdout)) as {
    roots: string[];
    modules: InfoModule[];
  };
  const bySpecifier = new Map(info.modules.map((m) => [m.specifier, m]));
  const short = (s: string) => s.replace(`file://${REPO}`, "");
  const chains = new Map<string, string[]>([[info.roots[0]!, [short(info.roots[0]!)]]]);
  const queue = [info.roots[0]!];
  while (queue.length > 0) {
    const from = queue.shift()!;
    for (const d of bySpecifier.get(from)?.dependencies ?? []) {
      const to = d.code?.specifier;
      if (d.isDynamic || to === undefined || chains.has(to)) continue;
      chains.set(to, [...chains.get(from)!, short(to)]);
      queue.push(to);
    }
  }
  return chains;
}

/** The modules of `graph` that match one of `banned`, each with the chain that loads it. */
function offenders(graph: Map<string, string[]>, banned: readonly RegExp[]): string[] {
  return [...graph].filter(([specifier]) => banned.some((b) => b.test(specifier)))
    .map(([, chain]) => [...chain].reverse().join(" <- "));
}

const CRYPTO = /^node:crypto$/;
const WORKER_THREADS = /^node:worker_threads$/;
const ZOD = /\/node_modules\/zod\//;

Deno.test("the checker finds a banned module imported statically, and lets a dynamic import pass", async () => {
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-start-path-" });
  try {
    Deno.writeTextFileSync(join(dir, "leaf.ts"), 'import "node:crypto";\nexport const x = 1;\n');
    Deno.writeTextFileSync(
      join(dir, "eager.ts"),
      'import { x } from "./leaf.ts";\nconsole.log(x);\n',
    );
    Deno.writeTextFileSync(
      join(dir, "lazy.ts"),
      'export const load = () => import("./leaf.ts");\nimport type { Hash } from "node:crypto";\nexport type H = Hash;\n',
    );
    const eager = offenders(await staticGraph(join(dir, "eager.ts")), [CRYPTO]);
    assert.equal(eager.length, 1);
    assert.match(eager[0]!, /node:crypto <- .*leaf\.ts <- .*eager\.ts$/);
    assert.deepEqual(offenders(await staticGraph(join(dir, "lazy.ts")), [CRYPTO]), []);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("a rank's start path (bootstrap, then the library) loads no node:crypto or node:worker_threads", async () => {
  for (const entry of ["launch/rank_main.ts", "launch/rank_bootstrap.ts", "mod.ts"]) {
    const found = offenders(await staticGraph(join(REPO, entry)), [CRYPTO, WORKER_THREADS]);
    assert.deepEqual(found, [], `${entry} loads at start-up what it needs only later:\n${found}`);
  }
});

Deno.test("the launcher (the dtrain command) loads no node:crypto, node:worker_threads or zod", async () => {
  const found = offenders(await staticGraph(join(REPO, "cli.ts")), [CRYPTO, WORKER_THREADS, ZOD]);
  assert.deepEqual(found, [], `cli.ts loads at start-up what it needs only later:\n${found}`);
});

Deno.test("the lazily loaded built-ins are the real ones", () => {
  assert.equal(
    nodeCrypto().createHash("sha256").update("abc").digest("hex"),
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
  );
  assert.equal(nodeCrypto(), nodeCrypto());
  assert.equal(typeof nodeWorkerThreads().Worker, "function");
});

Deno.test("node:crypto loads with rank 0's checkpoint manager (its saves hash), not with another rank's", async () => {
  // a fresh process: this one's test files may have hashed already
  const probe = `
    import { CheckpointManager } from "${join(REPO, "train/checkpoint/manager.ts")}";
    import { nodeBuiltinAskedFor } from "${join(REPO, "os/node_builtin.ts")}";
    const dir = Deno.makeTempDirSync();
    const seen = [nodeBuiltinAskedFor("node:crypto")];
    new CheckpointManager(dir, { rank: 1 });
    seen.push(nodeBuiltinAskedFor("node:crypto"));
    new CheckpointManager(dir, { rank: 0 });
    seen.push(nodeBuiltinAskedFor("node:crypto"));
    Deno.removeSync(dir, { recursive: true });
    console.log(JSON.stringify(seen));
  `;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--config", join(REPO, "deno.json"), probe],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  assert.deepEqual(JSON.parse(new TextDecoder().decode(out.stdout)), [false, false, true]);
});
