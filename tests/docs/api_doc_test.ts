/**
 * The public API is documented: `deno doc --lint mod.ts` finds no export
 * reachable from mod.ts without JSDoc (class members included) and no public
 * signature referring to a type mod.ts does not export. On failure the test
 * lists each problem with its place, as deno doc reports it.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO } from "../launch/launch_helpers.ts";

/** One problem of deno doc's report: its kind, message and `file:line:col`. */
interface DocProblem {
  kind: string;
  message: string;
  at: string;
}

/** The problems in deno doc --lint's (uncoloured) output. */
export function docProblems(report: string): DocProblem[] {
  const out: DocProblem[] = [];
  const lines = report.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const m = /^error\[([a-z-]+)\]: (.*)$/.exec(lines[i]!);
    if (!m) continue;
    const at = /^\s*--> (.*)$/.exec(lines[i + 1] ?? "");
    out.push({
      kind: m[1]!,
      message: m[2]!,
      at: at ? at[1]!.replace(REPO.endsWith("/") ? REPO : REPO + "/", "") : "?",
    });
  }
  return out;
}

Deno.test("docProblems reads deno doc's report", () => {
  const report = [
    "error[missing-jsdoc]: exported symbol is missing JSDoc documentation",
    `  --> ${join(REPO, "tensor/tensor.ts")}:58:12`,
    "   | ",
    "error[private-type-ref]: public type 'backend' references private type 'Backend'",
    `  --> ${join(REPO, "tensor/backend.ts")}:54:1`,
    "error: Found 2 documentation lint errors.",
  ].join("\n");
  assert.deepEqual(docProblems(report), [
    {
      kind: "missing-jsdoc",
      message: "exported symbol is missing JSDoc documentation",
      at: "tensor/tensor.ts:58:12",
    },
    {
      kind: "private-type-ref",
      message: "public type 'backend' references private type 'Backend'",
      at: "tensor/backend.ts:54:1",
    },
  ]);
});

Deno.test("deno doc --lint mod.ts: every public export documented, every type it uses exported", async () => {
  const r = await new Deno.Command(Deno.execPath(), {
    args: ["doc", "--lint", "mod.ts"],
    cwd: REPO,
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const report = new TextDecoder().decode(r.stdout) + new TextDecoder().decode(r.stderr);
  const problems = docProblems(report);
  const listed = problems.map((p) => `  ${p.at}: ${p.kind}: ${p.message}`).join("\n");
  assert.equal(
    problems.length,
    0,
    `deno doc --lint mod.ts found ${problems.length} problem(s) ` +
      `(document each export, or export the type a public signature uses):\n${listed}`,
  );
  assert.equal(r.code, 0, `deno doc --lint mod.ts exited ${r.code}:\n${report}`);
});

Deno.test("deno task docs writes the HTML reference of mod.ts", async () => {
  const tasks = JSON.parse(await Deno.readTextFile(join(REPO, "deno.json"))).tasks;
  assert.match(tasks.docs, /deno doc --html --name=dtrain --output=dist\/docs mod\.ts/);
  // the same command into a scratch folder (the task writes dist/docs)
  const out = await Deno.makeTempDir({ prefix: "dtrain-docs-" });
  try {
    const r = await new Deno.Command(Deno.execPath(), {
      args: ["doc", "--html", "--name=dtrain", `--output=${out}`, "mod.ts"],
      cwd: REPO,
      env: { NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(r.code, 0, new TextDecoder().decode(r.stderr));
    const index = await Deno.readTextFile(join(out, "index.html"));
    assert.match(index, /dtrain/);
    const adamw = await Deno.readTextFile(join(out, "~", "AdamW.html"));
    assert.match(adamw, /torch\.optim\.AdamW/);
  } finally {
    await Deno.remove(out, { recursive: true });
  }
});
