# PyTorch 1.13's side of bench_decode: the same GPT-2-small-shaped decoder (random weights), a
# 512-token prompt as one pass, then greedy decoding one token at a time over a key/value cache;
# fp32 and torch.ao.quantization.quantize_dynamic int8 on the Linear layers, at each thread count.
# Prints `torch fp32 1t: 12.3 tok/s` lines; bench_decode runs it as a child process.
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

LAYERS, WIDTH, HEADS, VOCAB, CTX = 12, 768, 12, 50257, 1024


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.out = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.fc, self.proj = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x, cache, start):
        n, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(n, t, 3, HEADS, WIDTH // HEADS).permute(2, 0, 3, 1, 4)
        cache[0][:, :, start:start + t] = k
        cache[1][:, :, start:start + t] = v
        k, v = cache[0][:, :, :start + t], cache[1][:, :, :start + t]
        s = q @ k.transpose(-2, -1) / (WIDTH // HEADS) ** 0.5
        mask = torch.ones(t, start + t, dtype=torch.bool).tril(start)
        o = s.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + self.out(o.transpose(1, 2).reshape(n, t, WIDTH))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, WIDTH), nn.Embedding(CTX, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, idx, caches, start):
        x = self.wte(idx) + self.wpe(torch.arange(start, start + idx.shape[1]))
        for b, c in zip(self.blocks, caches):
            x = b(x, c, start)
        return self.head(self.ln_f(x[:, -1:]))


def tokens_per_second(model, prompt, generate):
    caches = [(torch.zeros(1, HEADS, CTX, WIDTH // HEADS), torch.zeros(1, HEADS, CTX, WIDTH // HEADS))
              for _ in range(LAYERS)]
    idx = torch.randint(0, VOCAB, (1, prompt))
    nxt = model(idx, caches, 0).argmax(-1)
    t0 = time.perf_counter()
    for i in range(generate):
        nxt = model(nxt, caches, prompt + i).argmax(-1)
    return generate / (time.perf_counter() - t0)


def main():
    prompt, generate = int(sys.argv[1]), int(sys.argv[2])
    threads = [int(t) for t in sys.argv[3].split(",")]
    torch.manual_seed(0)
    fp32 = GPT().eval()
    int8 = torch.ao.quantization.quantize_dynamic(fp32, {nn.Linear}, dtype=torch.qint8)
    with torch.inference_mode():
        for name, model in (("fp32", fp32), ("int8", int8)):
            for t in threads:
                torch.set_num_threads(t)
                best = max(tokens_per_second(model, prompt, generate) for _ in range(2))
                print(f"torch {name} {t}t: {best:.2f} tok/s", flush=True)


if __name__ == "__main__":
    main()
