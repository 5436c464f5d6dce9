/**
 * A file mapped into memory MAP_SHARED through libc's mmap (opened with ffi/libc.ts's openLibc for
 * the mapping and the unmapping only): a store into `bytes` is a store into the page cache, which
 * every reader of the file sees at once and which outlives the process, with no system call.
 *
 * @module
 */
import { openLibc } from "./libc.ts";

const MMAP_SYMBOLS = {
  open: { parameters: ["buffer", "i32"], result: "i32" },
  close: { parameters: ["i32"], result: "i32" },
  mmap: { parameters: ["pointer", "usize", "i32", "i32", "i32", "i64"], result: "pointer" },
} as const satisfies Deno.ForeignLibraryInterface;

const MUNMAP_SYMBOLS = {
  munmap: { parameters: ["pointer", "usize"], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;

const O_RDWR = 2, O_CLOEXEC = 0o2000000;
const PROT_READ = 1, PROT_WRITE = 2, MAP_SHARED = 1;
/** mmap's MAP_FAILED, (void *)-1 */
const MAP_FAILED = 0xffff_ffff_ffff_ffffn;

/** A shared, writable mapping of a whole file of a fixed size. */
export class MappedFile {
  #pointer: Deno.PointerObject | null;
  /** The mapped bytes (empty once closed: a store after munmap would crash the process). */
  bytes: Uint8Array<ArrayBuffer>;

  private constructor(pointer: Deno.PointerObject, size: number) {
    this.#pointer = pointer;
    this.bytes = new Uint8Array(Deno.UnsafePointerView.getArrayBuffer(pointer, size));
  }

  /**
   * Creates `path` (replacing any file there) holding `contents`, mode 0600, and maps it whole; or
   * says why not. The file is written in full under a temporary name and renamed into place, so a
   * reader never finds it empty or half written, and no store into the mapping finds its page
   * missing.
   */
  static create(path: string, contents: Uint8Array): MappedFile | { error: string } {
    const size = contents.length;
    const tmp = `${path}.${Deno.pid}.tmp`;
    try {
      Deno.writeFileSync(tmp, contents, { mode: 0o600 });
      Deno.renameSync(tmp, path);
    } catch (e) {
      try {
        Deno.removeSync(tmp);
      } catch { /* never written */ }
      return { error: `cannot create ${path}: ${(e as Error).message}` };
    }
    const libc = openLibc(MMAP_SYMBOLS, "mmap");
    if ("error" in libc) return libc;
    try {
      const fd = libc.symbols.open(new TextEncoder().encode(path + "\0"), O_RDWR | O_CLOEXEC);
      if (fd < 0) return { error: `cannot open ${path} to map it` };
      const p = libc.symbols.mmap(null, BigInt(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0n);
      libc.symbols.close(fd); // the mapping keeps the file
      if (p === null || BigInt(Deno.UnsafePointer.value(p)) === MAP_FAILED) {
        return { error: `cannot map ${path} (mmap failed)` };
      }
      return new MappedFile(p, size);
    } finally {
      libc.close();
    }
  }

  /** Unmaps the file (it stays on disk with the bytes last stored); idempotent. */
  close(): void {
    const p = this.#pointer;
    if (p === null) return;
    this.#pointer = null;
    const size = this.bytes.length;
    this.bytes = new Uint8Array(0);
    const libc = openLibc(MUNMAP_SYMBOLS, "munmap");
    if ("error" in libc) return; // the mapping then lives until the process ends
    try {
      libc.symbols.munmap(p, BigInt(size));
    } finally {
      libc.close();
    }
  }
}
