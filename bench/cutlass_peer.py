"""CUTLASS's Hopper attention example (examples/88_hopper_fmha, built by
scripts/build-cutlass-fmha.sh) as a peer of the side-by-side benchmark: runs it and reads its
timings. Apart from compare_sdpa.py so that it is tested without a GPU or PyTorch."""
import re
import statistics
import subprocess


def cutlass_fmha_ms(binary, batch, heads, seq_len, head_dim, causal, iterations, runs):
    """Median over `runs` runs of CUTLASS's example of its fastest variant's mean ms per call, and
    that variant's name. The example prints, per variant, a result line then a `t=<ms>ms` line."""
    per_variant = {}
    for _ in range(runs):
        cmd = [binary, f"--b={batch}", f"--h={heads}", f"--q={seq_len}", f"--k={seq_len}",
               f"--d={head_dim}", f"--mask={'causal' if causal else 'no'}",
               f"--iterations={iterations}", "--verbose"]
        text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        name = None
        for line in text.splitlines():
            result = re.match(r"\s*\[(OK|--|FAIL)\]\s+(.*?)\s+:", line)
            if result:
                name = result.group(2) if result.group(1) != "FAIL" else None
            timing = re.match(r"\s*t=([0-9.eE+-]+)ms", line)
            if timing and name:
                per_variant.setdefault(name, []).append(float(timing.group(1)))
    if not per_variant:
        raise RuntimeError(f"{binary} reported no successful variant for L={seq_len}")
    name, times = min(per_variant.items(), key=lambda kv: statistics.median(kv[1]))
    return statistics.median(times), name
