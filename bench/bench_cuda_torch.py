#!/usr/bin/env python3
"""PyTorch's figures on the same GPU as bench_cuda, and the table of both.

    bench_cuda --gpt-dir=DIR > metagrad.txt
    python3 bench_cuda_torch.py metagrad.txt DIR

Measures what bench_cuda measures, the same way (median of 5 repetitions of at least 0.2 s, each
ended by a synchronize; TF32 off): a device-to-device copy (the bandwidth W1 is held to), W1 a*b+c,
W4 torch.mm, W6 an eager 16-element add and the same add replayed from a CUDA graph, and the GPT
step of examples/gpt trained from metagrad's initial weights on its batches, whose losses it
compares with metagrad's. Prints one row per figure with metagrad's, PyTorch's and the ratio.
"""
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"


def per_call(f):
    f(), f(), torch.cuda.synchronize()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        torch.cuda.synchronize()
        if time.perf_counter() - t0 > 0.05:
            break
        n *= 2
    n *= 4
    reps = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        torch.cuda.synchronize()
        reps.append((time.perf_counter() - t0) / n)
    return statistics.median(reps)


def figures(gpt_dir):
    out = {}
    n = 1 << 26
    src, dst = torch.rand(n, device=dev), torch.empty(n, device=dev)
    out["copy"] = 8 * n / per_call(lambda: dst.copy_(src)) * 1e-9
    for lg in (24, 26):
        n = 1 << lg
        a, b, c = (torch.rand(n, device=dev) for _ in range(3))
        out[f"W1_{lg}"] = 16 * n / per_call(lambda: a * b + c) * 1e-9
    for n in (2048, 4096):
        a, b = torch.rand(n, n, device=dev), torch.rand(n, n, device=dev)
        out[f"W4_{n}"] = 2 * n**3 / per_call(lambda: torch.mm(a, b)) * 1e-9
    a, b = torch.rand(16, device=dev), torch.rand(16, device=dev)
    out["W6"] = per_call(lambda: a + b) * 1e6
    graph, static_out = torch.cuda.CUDAGraph(), None
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        a + b
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(graph):
        static_out = a + b
    out["W6r"] = per_call(graph.replay) * 1e6
    graph16 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph16):
        outs16 = [a + b * k for k in range(1, 17)]
    out["W6r16"] = per_call(graph16.replay) * 1e6 / 16
    if gpt_dir:
        out.update(gpt(gpt_dir))
    return out


B, T, C, H, N, V = 32, 64, 128, 4, 2, 96


def gpt(gpt_dir):
    from safetensors.torch import load_file

    p = {k: v.to(dev).requires_grad_(True) for k, v in load_file(f"{gpt_dir}/init.safetensors").items()}
    raw = torch.from_numpy(__import__("numpy").fromfile(f"{gpt_dir}/batches.bin", dtype="int64"))
    steps = raw.numel() // (2 * B * T)
    batches = raw.view(steps, 2, B, T).to(dev)
    ref = [float(x) for x in open(f"{gpt_dir}/losses.txt").read().split()]
    decay = [v for v in p.values() if v.dim() >= 2]
    no_decay = [v for v in p.values() if v.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99), eps=1e-8)
    mask = torch.ones(T, T, dtype=torch.bool, device=dev).triu(1)
    hd = C // H

    def forward(idx):
        x = p["wte.weight"][idx] + p["wpe.weight"][:T]
        for i in range(N):
            w = lambda k: p[f"blocks.{i}.{k}"]
            h = F.layer_norm(x, (C,), w("ln1.weight"), w("ln1.bias"), 1e-5)
            q, k, v = F.linear(h, w("attn.in_proj_weight"), w("attn.in_proj_bias")).chunk(3, -1)
            heads = lambda z: z.view(B, T, H, hd).transpose(1, 2)
            att = heads(q) @ heads(k).transpose(-2, -1) / math.sqrt(hd)
            y = (att.masked_fill(mask, -math.inf).softmax(-1) @ heads(v)).transpose(1, 2).reshape(B, T, C)
            x = x + F.linear(y, w("attn.out_proj.weight"), w("attn.out_proj.bias"))
            h = F.layer_norm(x, (C,), w("ln2.weight"), w("ln2.bias"), 1e-5)
            x = x + F.linear(F.gelu(F.linear(h, w("fc.weight"), w("fc.bias")), approximate="tanh"),
                             w("proj.weight"), w("proj.bias"))
        x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
        return F.linear(x, p["head.weight"])

    ms, losses = [], []
    for i in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(forward(batches[i, 0]).view(-1, V), batches[i, 1].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(p.values()), 1.0)
        opt.step()
        losses.append(loss.item())
        ms.append((time.perf_counter() - t0) * 1e3)
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses[:10], ref[:10]))
    print(f"GPT losses: torch {losses[0]:.5f} .. {losses[-1]:.5f}, metagrad {ref[0]:.5f} .. {ref[-1]:.5f}; "
          f"first 10 steps differ by at most {worst:.2g} relative")
    return {"GPT_eager": statistics.median(ms[3:]), "GPT_first_eager": ms[0]}


def main():
    mine = {}
    for line in open(sys.argv[1]):
        if line.startswith("R "):
            key, value = line.split()[1:3]
            mine[key] = float(value)
        elif not line.startswith("#"):
            print(line, end="")
    theirs = figures(sys.argv[2] if len(sys.argv) > 2 else None)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; device-to-device copy "
          f"{theirs['copy']:.0f} GB/s (bytes read and written)")
    units = {"W1": "GB/s", "W4": "GFLOP/s", "W6": "us", "GP": "ms"}
    print(f"{'figure':18} {'metagrad':>10} {'PyTorch':>10} {'ratio':>7}  target")
    targets = {"W1_24": ("copy", 0.8), "W1_26": ("copy", 0.8), "W4_2048": ("W4_2048", 0.5),
               "W4_4096": ("W4_4096", 0.5)}
    for key, value in mine.items():
        other = theirs.get(key)
        higher = not key.startswith(("W6", "GPT"))
        ratio = (value / other if higher else other / value) if other else float("nan")
        target = ""
        if key in targets:
            base, want = targets[key]
            got = value / theirs[base]
            target = f"{got:.2f} of {base} (want >= {want})"
        elif key == "W6":
            target = "want <= 10 us"
        elif key in ("W6r", "W6r16"):
            target = "want <= 3 us"
        unit = units[key[:2]]
        print(f"{key:18} {value:10.2f} {other if other else float('nan'):10.2f} {ratio:7.2f}  {unit} {target}")


if __name__ == "__main__":
    main()
