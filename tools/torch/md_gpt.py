"""models/gpt.mdl's GPT in PyTorch, with md's parameter names and layouts.

state_dict() names are md's (wte.weight, wpe.weight, h.N.ln_1.{weight,bias},
h.N.attn.{q,k,v,proj}.{weight,bias}, h.N.ln_2.*, h.N.mlp.{fc,proj}.*,
ln_f.*), Linear weights are [out, in] like md's, and the output head is
wte.weight itself (tied, so it is not a parameter of its own). So md's full
checkpoints and --save-final files load with load_state_dict(strict=True),
and this module's state_dict() saved with safetensors.torch.save_file is
what `mdrun --init` reads. Used by test/torch/ and bench/torch/.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        B, T, C = x.shape

        def split(t):
            return t.view(B, T, self.heads, C // self.heads).transpose(1, 2)

        y = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)),
                                           split(self.v(x)), is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Mlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(d), Attention(d, heads)
        self.ln_2, self.mlp = nn.LayerNorm(d), Mlp(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """gpt(vocab, seq, d, heads, layers); forward(idx, targets) -> mean loss."""

    def __init__(self, vocab=50304, seq=1024, d=768, heads=12, layers=12,
                 checkpoint=False):
        super().__init__()
        self.vocab, self.checkpoint = vocab, checkpoint
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        # md's initialisation rule: normal(0.02) weights, zero biases, unit
        # norm weights (the values differ: md draws from its own generator).
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln_" in name:
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            if self.checkpoint:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().reshape(-1, self.vocab),
                               targets.reshape(-1))
