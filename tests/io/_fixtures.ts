/**
 * Locates the PyTorch reference fixtures for the io tests:
 * the repository's `fixtures/pytorch`, or the folder in DTRAIN_FIXTURES.
 */
import { fileURLToPath } from "node:url";

/** The fixture folder (without a trailing slash). */
export function fixtureDir(): string {
  const override = Deno.env.get("DTRAIN_FIXTURES");
  if (override) return override.replace(/\/+$/, "");
  return fileURLToPath(new URL("../../fixtures/pytorch", import.meta.url));
}

/** The bytes of fixture file `name`. */
export function readFixture(name: string): Uint8Array<ArrayBuffer> {
  try {
    return Deno.readFileSync(fixturePath(name));
  } catch (e) {
    throw new Error(
      `Cannot read fixture ${name} in ${fixtureDir()}: the repository's fixtures/pytorch should hold it (or set DTRAIN_FIXTURES to another set)`,
      {
        cause: e,
      },
    );
  }
}

/** The path of fixture file `name`. */
export function fixturePath(name: string): string {
  return `${fixtureDir()}/${name}`;
}
