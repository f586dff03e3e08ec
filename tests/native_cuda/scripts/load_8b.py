"""Load an 8B-parameter bf16 model (Llama-3-8B shapes) to `cuda` from a synthetic checkpoint; print peak RSS.

The checkpoint is a real safetensors file whose data section is a hole (a sparse file: the header, then
ftruncate), so nothing is downloaded and nothing is written to disk. The model is built on the meta device,
`to_empty(device="cuda")` allocates it through torch's caching allocator, and each tensor is copied from the
mmapped checkpoint, as a streaming loader does. Usage: load_8b.py CHECKPOINT_PATH
"""

import json
import mmap
import resource
import struct
import sys

import torch
from torch import nn

V, H, FF, L, KV = 128256, 4096, 14336, 32, 1024  # vocab, hidden, MLP, layers, grouped K/V width


def linear(i: int, o: int) -> nn.Linear:
    return nn.Linear(i, o, bias=False)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = linear(H, H), linear(H, KV), linear(H, KV), linear(H, H)
        self.gate, self.up, self.down = linear(H, FF), linear(H, FF), linear(FF, H)
        self.n1, self.n2 = nn.RMSNorm(H), nn.RMSNorm(H)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, H)
        self.layers = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.RMSNorm(H)
        self.head = linear(H, V)


with torch.device("meta"):
    model = Model().to(torch.bfloat16)

header, off = {}, 0
for name, p in model.state_dict().items():
    header[name] = {"dtype": "BF16", "shape": list(p.shape), "data_offsets": [off, off + p.numel() * 2]}
    off += p.numel() * 2
blob = json.dumps(header).encode()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(blob)) + blob)
    f.truncate(8 + len(blob) + off)

model.to_empty(device="cuda")
with open(sys.argv[1], "rb") as f:
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
base = 8 + len(blob)
with torch.no_grad():
    state = model.state_dict()
    for name, meta in header.items():
        a, b = meta["data_offsets"]
        src = torch.frombuffer(mm, dtype=torch.bfloat16, count=(b - a) // 2, offset=base + a)
        state[name].copy_(src.view(meta["shape"]))
torch.cuda.synchronize()
print("params", sum(p.numel() for p in model.parameters()))
print("allocated", torch.cuda.memory_allocated())
print("maxrss_kb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
print("readback", *torch.tensor([1.0, 2.0], device="cuda").cpu().tolist())
