/**
 * README.md cannot drift: it stays short, its links and the files it names
 * exist, every `./dtrain …` and `deno task …` command it shows names a verb,
 * option and task that exist (asked of the verbs' own `--help` and of
 * deno.json), and the main job prints what its "What the main job prints"
 * block shows. docs/CLI.md must name every verb and every option.
 */
import assert from "node:assert/strict";
import { dirname, join, resolve } from "node:path";
import { REPO as REPO_URL_PATH } from "../launch/launch_helpers.ts";
import { VERBS } from "../../cli.ts";

/** The repository root, without a trailing slash. */
const REPO = resolve(REPO_URL_PATH);
const README = join(REPO, "README.md");
const CLI_PAGE = join(REPO, "docs", "CLI.md");
const CONFIG = join(REPO, "deno.json");
const CLI = join(REPO, "cli.ts");
const MAX_LINES = 300;

/** The two commands a newcomer runs first, exactly as the README must show them. */
const FIRST_COMMANDS = ["./dtrain --nproc 2 examples/toy_ddp.ts", "./scripts/test.sh"];

/** Top-level folders and files of the repository: a code span starting with one names a path. */
const TOP = new Set(
  [...Deno.readDirSync(REPO)].map((e) => e.name)
    .filter((n) => !["runs", "dist", "build", "node_modules"].includes(n)),
);

/** The lines of ``` blocks and the text of `code spans` outside them. */
export function codeOf(markdown: string): { blocks: string[][]; spans: string[] } {
  const blocks: string[][] = [];
  const spans: string[] = [];
  let block: string[] | null = null;
  for (const line of markdown.split("\n")) {
    if (line.trimStart().startsWith("```")) {
      if (block === null) block = [];
      else {
        blocks.push(block);
        block = null;
      }
      continue;
    }
    if (block !== null) block.push(line);
    else for (const m of line.matchAll(/`([^`]+)`/g)) spans.push(m[1]!);
  }
  return { blocks, spans };
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
export function anchorOf(heading: string): string {
  return heading.toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, "").replace(/ /g, "-");
}

/** Every relative link target of a page that does not resolve (file, then #anchor). */
export function brokenLinks(page: string, markdown: string): string[] {
  const bad: string[] = [];
  for (const m of markdown.matchAll(/\]\(([^)\s]+)\)/g)) {
    const target = m[1]!;
    if (/^[a-z]+:/.test(target)) continue; // https:, mailto:
    const [path, anchor] = target.split("#") as [string, string | undefined];
    const file = path === "" ? page : resolve(dirname(page), path);
    if (!file.startsWith(REPO + "/")) {
      bad.push(`${target}: outside the repository`);
      continue;
    }
    let text: string;
    try {
      text = Deno.statSync(file).isFile ? Deno.readTextFileSync(file) : "";
    } catch {
      bad.push(`${target}: no such file`);
      continue;
    }
    if (anchor === undefined) continue;
    const anchors = text.split("\n").filter((l) => /^#{1,6} /.test(l))
      .map((l) => anchorOf(l.replace(/^#+ /, "")));
    if (!anchors.includes(anchor)) bad.push(`${target}: no heading with that anchor`);
  }
  return bad;
}

/** Repository paths named in code spans and blocks (`examples/x.ts`, `docs/`, …) that do not exist. */
export function missingPaths(markdown: string): string[] {
  const { blocks, spans } = codeOf(markdown);
  const words = [...spans, ...blocks.flat()].flatMap((s) => s.split(/[\s(),;:]+/));
  const missing = new Set<string>();
  for (const raw of words) {
    const word = raw.replace(/^\.\//, "").replace(/[.,]+$/, "");
    const top = word.split("/")[0]!;
    if (!word.includes("/") || !TOP.has(top) || /[<>*…{}]/.test(word)) continue;
    try {
      Deno.statSync(join(REPO, word));
    } catch {
      missing.add(word);
    }
  }
  return [...missing];
}

/** A `dtrain` command shown on the page: its verb and the options it passes to the verb. */
export interface ShownCommand {
  text: string;
  verb: string;
  options: string[];
  /** the script path of a launch, when it names one */
  script: string | null;
}

/** The `./dtrain …` (or `dtrain …`) commands of the page, with any `VAR=value` prefix dropped. */
export function dtrainCommands(markdown: string, verbs: readonly string[]): ShownCommand[] {
  const { blocks, spans } = codeOf(markdown);
  const out: ShownCommand[] = [];
  for (const raw of [...blocks.flat(), ...spans]) {
    const text = raw.replace(/\s+#.*$/, "").trim();
    const words = text.split(/\s+/);
    while (words.length > 0 && /^[A-Z_]+=/.test(words[0]!)) words.shift();
    if (words[0] !== "./dtrain" && words[0] !== "dtrain") continue;
    const rest = words.slice(1).map((w) => w.replace(/^\[|\]$/g, "")); // `[run]`, `[--json]`
    const verb = verbs.includes(rest[0] ?? "") ? rest.shift()! : "run";
    const options: string[] = [];
    let script: string | null = null;
    for (const w of rest) {
      if (w === "--") break;
      if (w.startsWith("--")) options.push(w.split("=")[0]!);
      else if ((verb === "run" || verb === "exec") && /\.(ts|js)$/.test(w)) {
        script = w; // the verb's options stop at the script path; what follows is the script's
        break;
      }
    }
    out.push({ text, verb, options, script });
  }
  return out;
}

/** The `deno task X` names the page shows. */
export function denoTasks(markdown: string): string[] {
  return [...markdown.matchAll(/deno task ([\w-]+)/g)].map((m) => m[1]!);
}

/** The options a verb's `--help` prints (`--name` words). */
async function helpOptions(verb: string): Promise<Set<string>> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--config", CONFIG, CLI, verb, "--help"],
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  assert.equal(out.code, 0, `dtrain ${verb} --help: ${new TextDecoder().decode(out.stderr)}`);
  return new Set([...text.matchAll(/--[a-z][a-z-]*/g)].map((m) => m[0]).concat("--help"));
}

const readme = () => Deno.readTextFileSync(README);

Deno.test("README: at most 300 lines, the two first commands exactly, nothing outside the repository", () => {
  const text = readme();
  const lines = text.split("\n").length - (text.endsWith("\n") ? 1 : 0);
  assert.ok(lines <= MAX_LINES, `README.md has ${lines} lines, more than ${MAX_LINES}`);
  const { blocks } = codeOf(text);
  const shown = blocks.flat().map((l) => l.replace(/\s+#.*$/, "").trim());
  for (const c of FIRST_COMMANDS) assert.ok(shown.includes(c), `README.md does not show: ${c}`);
  assert.doesNotMatch(text, /\.\.\//, "README.md names a path outside the repository");
});

Deno.test("README and docs/: every relative link resolves to a file and heading", () => {
  const pages = [
    README,
    ...[...Deno.readDirSync(join(REPO, "docs"))].filter((e) => e.name.endsWith(".md"))
      .map((e) => join(REPO, "docs", e.name)),
  ];
  const bad = pages.flatMap((p) =>
    brokenLinks(p, Deno.readTextFileSync(p)).map((b) => `${p.slice(REPO.length + 1)}: ${b}`)
  );
  assert.deepEqual(bad, []);
});

Deno.test("README: every file and folder it names exists", () => {
  assert.deepEqual(missingPaths(readme()), []);
});

Deno.test("README: every dtrain command names a verb, options and script that exist; every deno task exists", async () => {
  const verbs = Object.keys(VERBS);
  const commands = dtrainCommands(readme(), verbs);
  assert.ok(commands.length >= 5, `found only ${commands.length} dtrain commands`);
  const help = new Map<string, Set<string>>();
  for (const c of commands) {
    if (!help.has(c.verb)) help.set(c.verb, await helpOptions(c.verb));
    for (const o of c.options) {
      assert.ok(help.get(c.verb)!.has(o), `\`${c.text}\`: dtrain ${c.verb} has no option ${o}`);
    }
    if (c.script?.includes("/")) {
      assert.ok(Deno.statSync(join(REPO, c.script)).isFile, `\`${c.text}\`: no ${c.script}`);
    }
  }
  // An option named on its own (`--log-ranks all`) must be one some verb takes.
  const all = new Set<string>();
  for (const v of verbs) {
    if (!help.has(v)) help.set(v, await helpOptions(v));
    for (const o of help.get(v)!) all.add(o);
  }
  for (const span of codeOf(readme()).spans.filter((s) => s.startsWith("--"))) {
    for (const m of span.matchAll(/(?<![\w-])--[a-z][a-z-]*/g)) {
      assert.ok(all.has(m[0]), `\`${span}\`: no verb has an option ${m[0]}`);
    }
  }
  const tasks = Object.keys(JSON.parse(Deno.readTextFileSync(CONFIG)).tasks);
  for (const t of denoTasks(readme())) assert.ok(tasks.includes(t), `no deno task ${t}`);
});

Deno.test("docs/CLI.md names every verb of cli.ts and every option of its --help", async () => {
  const page = Deno.readTextFileSync(CLI_PAGE);
  for (const verb of Object.keys(VERBS)) {
    assert.ok(page.includes(`dtrain ${verb}`), `docs/CLI.md does not name dtrain ${verb}`);
    for (const o of await helpOptions(verb)) {
      if (o === "--help") continue;
      // rerun's help names the launch options it repeats (--nproc, --nnodes) in its prose.
      if (verb === "rerun" && (o === "--nproc" || o === "--nnodes")) continue;
      assert.ok(page.includes("`" + o), `docs/CLI.md does not document dtrain ${verb} ${o}`);
    }
  }
});

/** The lines of the README's "What the main job prints" block. */
function shownOutput(): string[] {
  const section = readme().split("\n## What the main job prints")[1]!.split("\n## ")[0]!;
  return codeOf(section).blocks[0]!;
}

/** A pattern for a shown launcher line: numbers, run names and paths vary between runs. */
function linePattern(line: string): RegExp {
  const escaped = line.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
    .replace(/\d{8}-\d{6}-toy_ddp-[0-9a-f]{4}/g, "RUNNAME")
    .replace(/\/\S+/g, "PATH")
    .replace(/\d+/g, "NUM");
  return new RegExp(
    "^" + escaped.replace(/RUNNAME/g, "\\S+").replace(/PATH/g, "\\S+").replace(/NUM/g, "\\d+") +
      "$",
  );
}

Deno.test({
  name: "README: the main job prints the shown epoch losses and launcher lines",
  sanitizeResources: false,
  async fn() {
    const dir = Deno.makeTempDirSync({ prefix: "dtrain-readme-" });
    try {
      const out = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "-A",
          "--config",
          CONFIG,
          CLI,
          "--nproc",
          "2",
          "--device",
          "cpu",
          "--no-check",
          "--run-dir",
          join(dir, "run"),
          join(REPO, "examples", "toy_ddp.ts"),
        ],
        cwd: dir,
        env: { NO_COLOR: "1" },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const printed = (new TextDecoder().decode(out.stdout) + "\n" +
        new TextDecoder().decode(out.stderr)).split("\n");
      assert.equal(out.code, 0, printed.join("\n"));
      const shown = shownOutput();
      const epochs = (lines: string[]) =>
        lines.filter((l) => /^\[r0\] Epoch \d+: avg loss/.test(l))
          .map((l) => l.replace(/, time .*$/, ""));
      assert.deepEqual(epochs(printed), epochs(shown), printed.join("\n"));
      // The type-check line needs a check (the test skips it); the device line depends on the machine.
      const launcherLines = shown.filter((l) =>
        l.startsWith("[dtrain]") && !/type-checking|NVIDIA GPU/.test(l)
      );
      assert.ok(launcherLines.length >= 3);
      for (const l of launcherLines) {
        const p = linePattern(l);
        assert.ok(
          printed.some((x) => p.test(x)),
          `no printed line like: ${l}\n${printed.join("\n")}`,
        );
      }
    } finally {
      Deno.removeSync(dir, { recursive: true });
    }
  },
});

Deno.test("the README checks catch planted mistakes", () => {
  const page = "[a](docs/NO_SUCH.md) [b](docs/CLI.md#no-such-heading) [c](../outside.md) " +
    "[d](docs/CLI.md#the-command-line)";
  assert.deepEqual(brokenLinks(README, page), [
    "docs/NO_SUCH.md: no such file",
    "docs/CLI.md#no-such-heading: no heading with that anchor",
    "../outside.md: outside the repository",
  ]);
  assert.deepEqual(missingPaths("run `examples/no_such.ts`, see `docs/CLI.md`"), [
    "examples/no_such.ts",
  ]);
  const [c] = dtrainCommands(
    "```sh\nFOO=1 ./dtrain --nprocs 2 examples/toy_ddp.ts --lr 0.1\n```\n",
    Object.keys(VERBS),
  );
  assert.deepEqual([c!.verb, c!.options, c!.script], ["run", ["--nprocs"], "examples/toy_ddp.ts"]);
  assert.equal(anchorOf("No gradients: `torch.no_grad()`"), "no-gradients-torchno_grad");
  assert.deepEqual(denoTasks("`deno task no-such-task`"), ["no-such-task"]);
});
