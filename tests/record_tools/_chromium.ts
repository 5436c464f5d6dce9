/**
 * Renders a page in headless Chromium (Debian package chromium) for the
 * report tests: a fresh profile, no network or background services, the
 * DOM after the page's scripts ran, and a PNG screenshot.
 */
import { join } from "node:path";
import { pathToFileURL } from "node:url";

export const CHROMIUM = "/usr/bin/chromium";

/** Why Chromium cannot run here (printed when a test is skipped), or null when it can. */
export const chromiumMissing: string | null = (() => {
  try {
    return Deno.statSync(CHROMIUM).isFile ? null : `${CHROMIUM} is not a file`;
  } catch {
    return `${CHROMIUM} is absent (Debian package chromium)`;
  }
})();

/**
 * Opens `html` (a file) at `width`×`height` with `probe` (a `<script>`
 * element) inserted before `</body>`; returns the DOM after the scripts ran
 * and the path of the screenshot, both under `workDir`.
 */
export async function renderPage(
  html: string,
  probe: string,
  opts: { workDir: string; width: number; height: number },
): Promise<{ dom: string; png: string }> {
  // The page under test plus the probe script, which the report itself never contains.
  const probed = join(opts.workDir, "probed.html");
  Deno.writeTextFileSync(probed, Deno.readTextFileSync(html).replace("</body>", `${probe}</body>`));
  const png = join(opts.workDir, "shot.png");
  const profile = Deno.makeTempDirSync({ dir: opts.workDir, prefix: "chromium-" });
  const child = new Deno.Command(CHROMIUM, {
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      `--user-data-dir=${profile}`,
      `--window-size=${opts.width},${opts.height}`,
      "--virtual-time-budget=2000",
      `--screenshot=${png}`,
      "--dump-dom",
      pathToFileURL(probed).href,
    ],
    stdout: "piped",
    stderr: "piped",
    // Its own process group, so the browser's helper processes can be killed with it.
    detached: true,
  }).spawn();
  const killGroup = () => {
    try {
      Deno.kill(-child.pid, "SIGKILL");
    } catch { /* the group is already gone */ }
  };
  const timer = setTimeout(killGroup, 60_000);
  const { code, stdout, stderr } = await child.output().finally(() => {
    clearTimeout(timer);
    killGroup();
  });
  if (code !== 0) {
    throw new Error(`chromium exited ${code}: ${new TextDecoder().decode(stderr).slice(-2000)}`);
  }
  return { dom: new TextDecoder().decode(stdout), png };
}

/** The JSON a probe wrote into `<pre id="probe">`, read back from the dumped DOM. */
export function probeResult<T>(dom: string): T {
  const probe = /<pre id="probe">(.*?)<\/pre>/s.exec(dom);
  if (!probe) throw new Error(`the probe did not run: ${dom.slice(-500)}`);
  return JSON.parse(
    probe[1]!.replace(/&quot;/g, '"').replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(
      /&amp;/g,
      "&",
    ),
  );
}

/** A pixel test for colours within `tol` (sum of absolute channel differences) of `hex`. */
export function near(hex: string, tol = 60): (r: number, g: number, b: number) => boolean {
  const [R, G, B] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  return (r, g, b) => Math.abs(r - R!) + Math.abs(g - G!) + Math.abs(b - B!) < tol;
}
