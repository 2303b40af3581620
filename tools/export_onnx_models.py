#!/usr/bin/python3
"""Exports ResNet-18, MobileNet v2, a 2-layer nn.TransformerEncoder and the character GPT of examples/gpt
(random weights, fixed seed) to ONNX, each with one input and PyTorch's output, in the ONNX backend tests' layout:

    OUT/test_<name>/model.onnx
    OUT/test_<name>/test_data_set_0/{input_0.pb, output_0.pb}

so that metagrad's runner checks them as it checks Debian's backend tests (docs/onnx.md):

    /usr/bin/python3 tools/export_onnx_models.py /tmp/onnx_models
    ONNX_TESTDATA=/tmp/onnx_models ONNX_SET=. DEVICE=LLVM build/test/metagrad_onnx_tests "[onnx_folder]"

Needs torch and torchvision (Debian's python3-torch and python3-torchvision, or pip), and onnx.
"""
import os
import sys

import numpy as np
import onnx
import torch
import torchvision
from onnx import numpy_helper


def randomize_norms(model):
    """Random batch-norm statistics and affine terms: with the defaults (mean 0, variance 1, identity)
    the activations of a deep untrained network shrink towards 0 and any output would match."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.8, 1.6)
            m.bias.data.uniform_(-0.2, 0.2)


class GPT(torch.nn.Module):
    """examples/gpt_model.hpp's GPT in PyTorch, module for module: token and position embeddings, pre-LayerNorm
    blocks of causal self-attention (nn.MultiheadAttention, batch first) and a GELU MLP, a final LayerNorm
    and an unbiased head. idx (B, T) int64 -> logits (B, T, vocab)."""

    def __init__(self, context=64, width=128, heads=4, blocks=2, vocab=96):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(vocab, width), torch.nn.Embedding(context, width)
        self.blocks = torch.nn.ModuleList(GPTBlock(width, heads) for _ in range(blocks))
        self.ln_f, self.head = torch.nn.LayerNorm(width), torch.nn.Linear(width, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln_f(x))


class GPTBlock(torch.nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.attn = torch.nn.MultiheadAttention(width, heads, batch_first=True)
        self.fc, self.proj = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.proj(torch.nn.functional.gelu(self.fc(self.ln2(x))))


def save(out, name, model, example, dynamic, opset=13):
    folder = os.path.join(out, "test_" + name)
    os.makedirs(os.path.join(folder, "test_data_set_0"), exist_ok=True)
    randomize_norms(model)
    model.eval()
    with torch.no_grad():
        expected = model(example)
    path = os.path.join(folder, "model.onnx")
    torch.onnx.export(model, (example,), path, input_names=["input"], output_names=["output"],
                      dynamic_axes=dynamic, opset_version=opset, do_constant_folding=True)
    onnx.checker.check_model(onnx.load(path))
    for kind, value in (("input", example), ("output", expected)):
        array = value.numpy()
        tensor = numpy_helper.from_array(array if array.dtype == np.int64 else array.astype(np.float32))
        with open(os.path.join(folder, "test_data_set_0", kind + "_0.pb"), "wb") as f:
            f.write(tensor.SerializeToString())
    print("wrote", folder, tuple(example.shape), "->", tuple(expected.shape), "max |output| %.3g" % expected.abs().max())


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "onnx_models"
    torch.manual_seed(0)
    batch = {0: "batch"}
    save(out, "resnet18", torchvision.models.resnet18(), torch.randn(1, 3, 224, 224), {"input": batch, "output": batch})
    save(out, "mobilenet_v2", torchvision.models.mobilenet_v2(), torch.randn(1, 3, 224, 224),
         {"input": batch, "output": batch})
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0)
    encoder = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    seq = {0: "sequence", 1: "batch"}
    save(out, "transformer_encoder", encoder, torch.randn(10, 2, 64), {"input": seq, "output": seq})
    tokens = {0: "batch", 1: "sequence"}
    save(out, "gpt", GPT(), torch.randint(0, 96, (1, 64)), {"input": tokens, "output": tokens}, opset=14)


if __name__ == "__main__":
    main()
