"""The seed of the generator dtrain's RandomWindows draws step `step`'s windows
of rank `rank` from (data/token_windows.ts windowSeed): SplitMix64's mix
applied as mix(mix(mix(seed) ^ rank) ^ step). With it a PyTorch run draws the
same windows: torch.randint(len(data) - T, (B,), generator=torch.Generator()
.manual_seed(window_seed(seed, rank, step)))."""

MASK64 = (1 << 64) - 1


def mix64(z):
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def window_seed(seed, rank, step):
    return mix64(mix64(mix64(seed) ^ rank) ^ step)
