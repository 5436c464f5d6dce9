/**
 * docs/PYTORCH.md cannot drift: every dtrain snippet (a ```ts block) is
 * extracted from the page, type-checked, and run — as one process, or under
 * the launcher when its first line says `// ./dtrain --nproc N` — and must
 * exit 0 printing what its section says.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { REPO } from "../launch/launch_helpers.ts";

const PAGE = join(REPO, "docs", "PYTORCH.md");
const CONFIG = join(REPO, "deno.json");
const CLI = join(REPO, "cli.ts");

interface Snippet {
  section: string;
  code: string;
  nproc: number | null;
}

/** The ```ts blocks of the page with the heading of their section. */
function snippets(markdown: string): Snippet[] {
  const out: Snippet[] = [];
  let section = "";
  const lines = markdown.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (line.startsWith("## ")) section = line.slice(3);
    if (line.trim() !== "```ts") continue;
    const body: string[] = [];
    for (i++; i < lines.length && lines[i]!.trim() !== "```"; i++) body.push(lines[i]!);
    const code = body.join("\n") + "\n";
    const m = /^\/\/ \.\/dtrain --nproc (\d+)/.exec(body[0] ?? "");
    out.push({ section, code, nproc: m ? Number(m[1]) : null });
  }
  return out;
}

/** What each section's program must print (stdout), besides exiting 0. */
const EXPECT: Record<string, RegExp> = {
  "Training and evaluation mode":
    /tensor\(\[\[.*shape=\[2, 2\], dtype=f32, device=cpu, gradFn=\w+/s,
  "Custom modules: layers as fields":
    /\[ 3, 2 \] \[ 0\.9, 0\.95 \]\ngain fc1\.weight fc1\.bias blocks\.0\.weight blocks\.0\.bias blocks\.1\.weight blocks\.1\.bias fc2\.weight fc2\.bias\n/,
  "No gradients: `torch.no_grad()`": /correct: \d+ true tensor\(\[1\., 2\.\], shape=\[2\]/,
  "Memory: scope and dispose": /^2 \d\.\d{4}\n.*no leak$/ms,
  "Parameter groups": /0\.5\n/,
  "Checkpoints and resuming": /resumed at step 100, epoch 2/,
  "Stopping gracefully: Ctrl-C and preemption": /rank 0: ran every step/,
  "DistributedDataParallel": /weights in sync: tensor\(/,
  "DistributedSampler": /rank 0 epoch 1: /,
  "Mixed precision: autocast and GradScaler": /f32 65536/,
  "SyncBatchNorm": /running means equal on every rank: true/,
  "Exact mode: the same bits at any world size": /exact mode, 8 shards: [0-9a-f]{16}\n/,
  "Optimizers and learning-rate schedulers": /lr after 10 steps: 0\.007500 .*"_schedulers"/s,
  "Losses": /0\.9974 0\.9391 3\.5150 0\.9167 1\.2762 \[ 3 \]/,
  "Everyday tensor ops": /^\d \[ 4, 1 \] \[ 4 \] i32 \[ 4, 1 \] \[ 2 \]$/m,
  "Data: `len(loader)` and normalisation": /len\(loader\) = 4/,
};

Deno.test("every dtrain snippet of docs/PYTORCH.md type-checks and runs as its section says", async () => {
  const list = snippets(Deno.readTextFileSync(PAGE));
  assert.deepEqual(list.map((s) => s.section), Object.keys(EXPECT), "one snippet per section");
  const dir = Deno.makeTempDirSync({ prefix: "dtrain-pytorch-md-" });
  try {
    const files = list.map((s, i) => {
      const path = join(dir, `snippet_${i}.ts`);
      Deno.writeTextFileSync(path, s.code);
      return path;
    });
    const check = await new Deno.Command(Deno.execPath(), {
      args: ["check", "--config", CONFIG, ...files],
      env: { NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.ok(check.success, new TextDecoder().decode(check.stderr));
    for (const [i, s] of list.entries()) {
      const args = s.nproc === null ? ["run", "-A", "--config", CONFIG, files[i]!] : [
        "run",
        "-A",
        "--config",
        CONFIG,
        CLI,
        "--nproc",
        String(s.nproc),
        "--no-check",
        "--run-dir",
        join(dir, `run_${i}`),
        files[i]!,
      ];
      const out = await new Deno.Command(Deno.execPath(), {
        args,
        cwd: dir,
        env: { NO_COLOR: "1" },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stdout = new TextDecoder().decode(out.stdout).replace(/^\[r\d\] /gm, "");
      const stderr = new TextDecoder().decode(out.stderr);
      assert.equal(out.code, 0, `${s.section}:\n${stdout}\n${stderr}`);
      assert.match(stdout, EXPECT[s.section]!, `${s.section}:\n${stdout}`);
    }
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});
