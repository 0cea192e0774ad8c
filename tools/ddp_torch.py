#!/usr/bin/env python3
"""ddp_torch.py - ddp.cpp training checkpoints <-> PyTorch, for the reference models mlp, cnn and gpt.

  ddp_torch.py to-torch   CKPT.safetensors OUT.pt     ddp.cpp checkpoint -> torch.save'd dict (see below)
  ddp_torch.py from-torch IN.pt OUT.safetensors       the reverse: a checkpoint train --resume / checkpoint_loss load
  ddp_torch.py loss FILE BATCH [--steps N] [--save-after-step K OUT]
                                                      loss of one batch in PyTorch (FILE: .safetensors or .pt);
                                                      --steps: optimizer steps on the batch, each followed by the
                                                      loss; --save-after-step: the state after step K to OUT
                                                      (.pt, or .safetensors: a ddp.cpp checkpoint)
  ddp_torch.py batch --model M [--rows N] [--context T] [--seed S] OUT.safetensors
                                                      a fixed batch file (the format tools/checkpoint_loss reads)

The .pt file is a dict: model (the twin's state_dict), optimizer (torch.optim's state_dict or None), config
(the training options ddp.cpp recorded), metadata (step, epoch, ... as strings), ddp_extra (ddp.cpp buffers
PyTorch has no place for, e.g. a dropout generator). Build a twin with model_from_config(config).

What the mapping does (docs/pytorch.md): tensor names lose the "model." prefix; "optim.<param>.<state>" become
torch.optim's per-parameter state in parameter order (AdamW "step" int64 <-> float tensor); GELU is the tanh
approximation; mlp/cnn inputs are Fashion-MNIST bytes normalised exactly as ddp.cpp does (in float32).
Needs PyTorch (Debian: apt-get install python3-torch); the safetensors format is read and written here.
"""
import argparse
import json
import math
import struct
import sys
import zlib

from python_deps import require

require("torch", "python3-torch", "ddp_torch.py")  # the message a user needs (which python3 has it), not a traceback
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# v3: a CRC-32 of the header's content ("header_crc32"); v2: a CRC-32 per tensor ("crc32:<name>") and the optimizer
# kind. ddp.cpp reads all three.
FORMAT = "ddp.cpp training checkpoint v3"
READABLE_FORMATS = (FORMAT, "ddp.cpp training checkpoint v2", "ddp.cpp training checkpoint v1")
HEADER_CHECKSUM_KEY = "header_crc32"
DTYPES = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16, "I32": torch.int32,
          "I64": torch.int64, "U8": torch.uint8}
NAMES = {v: k for k, v in DTYPES.items()}
FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530  # runtime/data/fashion_mnist.h


# ---- safetensors ----------------------------------------------------------------------------------------
def safetensors_header(data, path):
    """The JSON header of a safetensors file's bytes, or one clear line (SystemExit) naming what is wrong."""
    not_it = f"{path}: not a safetensors file"
    if len(data) < 8:
        raise SystemExit(f"{not_it} ({len(data)} bytes, less than the 8-byte header length)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise SystemExit(f"{not_it} (its first 8 bytes give a header of {n} bytes, the file has {len(data) - 8} "
                         f"after them): was it written by ddp.cpp, tools/ddp_torch.py or safetensors?")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SystemExit(f"{not_it} (its {n}-byte header is not JSON: {e})") from None
    if not isinstance(header, dict):
        raise SystemExit(f"{not_it} (its header is JSON but not an object)")
    for name, e in header.items():
        if name != "__metadata__" and not (isinstance(e, dict) and {"dtype", "shape", "data_offsets"} <= e.keys()):
            raise SystemExit(f"{not_it} (header entry {name!r} lacks dtype, shape or data_offsets)")
    return header


def read_safetensors(path):
    """-> (dict name -> tensor, metadata dict)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SystemExit(f"{path}: cannot read it: {e.strerror}") from None
    header = safetensors_header(data, path)
    n = struct.unpack("<Q", data[:8])[0]
    meta = header.pop("__metadata__", {})
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        dtype = DTYPES.get(e["dtype"])
        if dtype is None:
            raise SystemExit(f"{path}: tensor {name} has dtype {e['dtype']}, which ddp.cpp does not write")
        t = torch.frombuffer(bytearray(body[begin:end]), dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(e["shape"]).clone()
    return tensors, meta


def tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def header_crc32(metadata, entries):
    """runtime/checkpoint/checksum.h's header_crc32_of: the CRC-32 (8 hex digits) of every metadata entry but
    HEADER_CHECKSUM_KEY, sorted by key, then every tensor's name, dtype code and shape (entries: (name, code,
    shape)), sorted by name; each field length-prefixed (u64 little-endian), strings as UTF-8."""
    out = bytearray(b"ddp.cpp header content v3")

    def u64(v):
        out.extend(struct.pack("<Q", v))

    def text(b):
        u64(len(b))
        out.extend(b)

    items = sorted((k.encode(), str(v).encode()) for k, v in metadata.items() if k != HEADER_CHECKSUM_KEY)
    u64(len(items))
    for k, v in items:
        text(k)
        text(v)
    u64(len(entries))
    for name, code, shape in sorted(entries, key=lambda e: e[0].encode()):
        text(name.encode())
        text(code.encode())
        u64(len(shape))
        for d in shape:
            u64(int(d))
    return "%08x" % zlib.crc32(bytes(out))


def write_safetensors(path, tensors, metadata):
    """Writes the layout ddp.cpp writes: 8-byte aligned data, tensors by descending element size, then name."""
    order = sorted(tensors, key=lambda k: (-tensors[k].element_size(), k))
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for k in order:
        t = tensors[k].detach().cpu().contiguous()
        raw = tensor_bytes(t)
        header[k] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---- the PyTorch twins of models/mlp.h, cnn.h, gpt.h -------------------------------------------------------
class MLP(nn.Module):
    def __init__(self, hidden, depth, dtype, inputs=784, classes=10):
        super().__init__()
        layers, width = [], inputs
        for _ in range(depth):
            layers += [nn.Linear(width, hidden, dtype=dtype), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, classes, dtype=dtype))
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x.flatten(1))


class CNN(nn.Module):
    def __init__(self, dtype, channels1=16, channels2=32, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels1, 3, 1, 1, dtype=dtype), nn.BatchNorm2d(channels1, 1e-5, 0.1, dtype=dtype),
            nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(channels1, channels2, 3, 1, 1, dtype=dtype), nn.BatchNorm2d(channels2, 1e-5, 0.1, dtype=dtype),
            nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(channels2 * 7 * 7, classes, dtype=dtype)

    def forward(self, x):
        return self.head(self.features(x.reshape(x.shape[0], 1, 28, 28)).flatten(1))


class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head, dtype):
        super().__init__()
        self.qkv, self.proj, self.n_head = nn.Linear(d, 3 * d, dtype=dtype), nn.Linear(d, d, dtype=dtype), n_head

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, C))


class MLPBlock(nn.Module):
    def __init__(self, d, dtype):
        super().__init__()
        self.fc, self.proj = nn.Linear(d, 4 * d, dtype=dtype), nn.Linear(4 * d, d, dtype=dtype)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))  # ddp.cpp's GELU is the tanh form


class Block(nn.Module):
    def __init__(self, d, n_head, dropout, dtype):
        super().__init__()
        self.ln1 = nn.LayerNorm(d, eps=1e-5, dtype=dtype)
        self.attn = CausalSelfAttention(d, n_head, dtype)
        self.ln2 = nn.LayerNorm(d, eps=1e-5, dtype=dtype)
        self.mlp = MLPBlock(d, dtype)
        self.drop = nn.Dropout(dropout) if dropout > 0 else None  # same draws as ddp.cpp's: no

    def forward(self, x):
        a = self.attn(self.ln1(x))
        h = x + (self.drop(a) if self.drop else a)
        m = self.mlp(self.ln2(h))
        return h + (self.drop(m) if self.drop else m)


class GPT(nn.Module):
    def __init__(self, context, d_model, n_head, n_layer, dropout, dtype, vocab=256):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model, dtype=dtype)
        self.wpe = nn.Embedding(context, d_model, dtype=dtype)
        self.blocks = nn.ModuleList(Block(d_model, n_head, dropout, dtype) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model, eps=1e-5, dtype=dtype)
        self.head = nn.Linear(d_model, vocab, bias=False, dtype=dtype)

    def forward(self, idx):
        h = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            h = b(h)
        return self.head(self.ln_f(h))


def model_from_config(cfg):
    """The twin of the model the ddp.cpp configuration (checkpoint metadata 'config') describes."""
    dtype = {"float32": torch.float32, "float64": torch.float64}[cfg.get("dtype", "float32")]
    kind = cfg.get("model", "gpt")
    if kind == "mlp":
        return MLP(cfg.get("hidden", 1024), cfg.get("depth", 2), dtype)
    if kind == "cnn":
        return CNN(dtype)
    if kind == "gpt":
        return GPT(cfg.get("context", 64), cfg.get("d_model", 128), cfg.get("n_head", 4), cfg.get("n_layer", 2),
                   cfg.get("dropout", 0.0), dtype)
    raise SystemExit(f"model '{kind}': ddp_torch.py has PyTorch twins of mlp, cnn and gpt only")


def optimizer_for(cfg, model):
    """torch.optim with the settings ddp.cpp's train uses for this configuration (base learning rate)."""
    lr, wd = cfg.get("lr", 3e-3), cfg.get("weight_decay", 0.0)
    if cfg.get("optimizer", "adamw") == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=cfg.get("momentum", 0.9), weight_decay=wd)
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)


# ---- the mapping --------------------------------------------------------------------------------------------
def ddp_to_torch(tensors, meta):
    if meta.get("format") not in READABLE_FORMATS:
        raise SystemExit(f"not a ddp.cpp training checkpoint (metadata format is {meta.get('format')!r})")
    cfg = json.loads(meta.get("config", "{}"))
    model = model_from_config(cfg)
    sd, extra = {}, {}
    own = model.state_dict()
    for name, t in tensors.items():
        if not name.startswith("model."):
            continue
        key = name[len("model."):]
        if key in own:
            if tuple(own[key].shape) != tuple(t.shape):
                raise SystemExit(f"tensor {name}: shape {list(t.shape)}, the twin has {list(own[key].shape)}")
            sd[key] = t
        else:
            extra[key] = t
    steps = int(meta.get("optimizer_steps", "0"))
    for key in own:  # BatchNorm's counter: ddp.cpp has none (its momentum is fixed), PyTorch wants one
        if key.endswith("num_batches_tracked") and key not in sd:
            sd[key] = torch.tensor(steps * int(cfg.get("grad_accum", 1)), dtype=torch.int64)
    missing = [k for k in own if k not in sd]
    if missing:
        raise SystemExit(f"the checkpoint lacks {', '.join('model.' + k for k in missing)}")
    model.load_state_dict(sd)
    opt = optimizer_for(cfg, model)
    names = [n for n, _ in model.named_parameters()]
    state = {}
    for i, n in enumerate(names):
        s = {}
        for field in ("momentum_buffer", "exp_avg", "exp_avg_sq"):
            if f"optim.{n}.{field}" in tensors:
                s[field] = tensors[f"optim.{n}.{field}"]
        if f"optim.{n}.step" in tensors:
            s["step"] = torch.tensor(float(tensors[f"optim.{n}.step"].item()))  # torch keeps a float tensor
        if s:
            state[i] = s
    osd = None
    if state:
        osd = opt.state_dict()
        osd["state"] = state
        opt.load_state_dict(osd)
        osd = opt.state_dict()
    return {"model": model.state_dict(), "optimizer": osd, "config": cfg, "metadata": dict(meta),
            "ddp_extra": extra}


def torch_to_ddp(ckpt):
    cfg, meta = ckpt["config"], dict(ckpt.get("metadata", {}))
    model = model_from_config(cfg)
    model.load_state_dict(ckpt["model"])
    tensors = {}
    for key, t in model.state_dict().items():
        if not key.endswith("num_batches_tracked"):
            tensors["model." + key] = t
    for key, t in ckpt.get("ddp_extra", {}).items():
        tensors["model." + key] = t
    for i, b in enumerate(model.blocks if isinstance(model, GPT) else []):
        if b.drop is not None and f"model.blocks.{i}.drop.rng" not in tensors:  # a fresh generator: seed, offset
            tensors[f"model.blocks.{i}.drop.rng"] = torch.tensor([int(cfg.get("seed", 0)) + i, 0], dtype=torch.int64)
    names = [n for n, _ in model.named_parameters()]
    if ckpt.get("optimizer"):
        for i, s in ckpt["optimizer"]["state"].items():
            n = names[int(i)]
            for field in ("momentum_buffer", "exp_avg", "exp_avg_sq"):
                if s.get(field) is not None:
                    tensors[f"optim.{n}.{field}"] = s[field]
            if "step" in s:
                tensors[f"optim.{n}.step"] = torch.tensor(int(float(s["step"])), dtype=torch.int64)
    meta.setdefault("step", "0")
    meta.setdefault("epoch", "0")
    meta.setdefault("batches_in_epoch", "0")
    meta.setdefault("seed", str(cfg.get("seed", 0)))
    meta = {k: v for k, v in meta.items() if not k.startswith("crc32:")}  # recomputed below
    meta["format"] = FORMAT
    meta["config"] = json.dumps(cfg, separators=(",", ":"))
    meta["optimizer"] = cfg.get("optimizer", "adamw") if ckpt.get("optimizer") else ""
    for name, t in tensors.items():  # what ddp.cpp checks on load (runtime/checkpoint/checksum.h)
        meta["crc32:" + name] = "%08x" % zlib.crc32(tensor_bytes(t))
    # AdamW's per-parameter "step" counts the optimizer's steps; SGD keeps none (only momentum buffers), so the
    # metadata's count stands (taking 0 from a state without "step" lost it on a .pt round trip).
    steps = max((int(float(s["step"])) for s in (ckpt.get("optimizer") or {}).get("state", {}).values()
                 if "step" in s), default=int(meta.get("optimizer_steps", "0")))
    meta["optimizer_steps"] = str(steps)
    meta[HEADER_CHECKSUM_KEY] = header_crc32(meta, [(n, NAMES[t.dtype], list(t.shape)) for n, t in tensors.items()])
    return tensors, meta


def load_any(path):
    """A .safetensors (ddp.cpp) or .pt (this script's) checkpoint -> the .pt dict."""
    if path.endswith(".safetensors"):
        return ddp_to_torch(*read_safetensors(path))
    return torch.load(path)


# ---- batches and losses ---------------------------------------------------------------------------------------
def normalize_fashion_mnist(pixels):
    """Bytes -> float32 exactly as ddp.cpp computes it: p * (1 / (255 * std)) - mean / std, in float32."""
    f32 = lambda v: torch.tensor(v, dtype=torch.float32)
    std, mean = f32(FASHION_MNIST_STD), f32(FASHION_MNIST_MEAN)
    scale, shift = f32(1.0) / (f32(255.0) * std), mean / std
    return pixels.to(torch.float32) * scale - shift


def batch_inputs(batch, cfg):
    dtype = {"float32": torch.float32, "float64": torch.float64}[cfg.get("dtype", "float32")]
    if cfg.get("model") == "gpt":
        t = batch["tokens"]
        return t[:, :-1], t[:, 1:]
    return normalize_fashion_mnist(batch["pixels"]).to(dtype), batch["labels"]


def loss_of(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def cmd_loss(args):
    ckpt = load_any(args.file)
    cfg = ckpt["config"]
    model = model_from_config(cfg)
    model.load_state_dict(ckpt["model"])
    batch, _ = read_safetensors(args.batch)
    x, y = batch_inputs(batch, cfg)

    def eval_loss():
        model.eval()
        with torch.no_grad():
            return loss_of(model, x, y).item()

    print(f"loss {eval_loss():.17g}")
    steps = max(args.steps, 1 if args.step else 0)
    if steps == 0:
        return
    opt = optimizer_for(cfg, model)
    if ckpt["optimizer"]:
        opt.load_state_dict(ckpt["optimizer"])
    meta = dict(ckpt["metadata"])
    for k in range(1, steps + 1):
        model.train()
        opt.zero_grad()
        loss_of(model, x, y).backward()
        opt.step()
        print(f"loss_after_step{'' if k == 1 else k} {eval_loss():.17g}")
        meta["step"] = str(int(meta.get("step", "0")) + 1)
        meta["optimizer_steps"] = str(int(meta.get("optimizer_steps", "0")) + 1)
        if args.save_after_step and k == int(args.save_after_step[0]):
            out = {"model": model.state_dict(), "optimizer": opt.state_dict(), "config": cfg, "metadata": dict(meta),
                   "ddp_extra": ckpt.get("ddp_extra", {})}
            path = args.save_after_step[1]
            if path.endswith(".safetensors"):
                write_safetensors(path, *torch_to_ddp(out))
            else:
                torch.save(out, path)


def cmd_batch(args):
    g = torch.Generator().manual_seed(args.seed)
    if args.model == "gpt":
        tensors = {"tokens": torch.randint(0, 256, (args.rows, args.context + 1), generator=g, dtype=torch.int64)}
    else:
        tensors = {"pixels": torch.randint(0, 256, (args.rows, 1, 28, 28), generator=g, dtype=torch.uint8),
                   "labels": torch.randint(0, 10, (args.rows,), generator=g, dtype=torch.int64)}
    write_safetensors(args.out, tensors, {})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("to-torch", help="ddp.cpp checkpoint -> .pt")
    a.add_argument("ckpt")
    a.add_argument("out")
    a = sub.add_parser("from-torch", help=".pt -> ddp.cpp checkpoint")
    a.add_argument("pt")
    a.add_argument("out")
    a = sub.add_parser("loss", help="loss of one batch in PyTorch")
    a.add_argument("file")
    a.add_argument("batch")
    a.add_argument("--step", action="store_true", help="one optimizer step (as --steps 1)")
    a.add_argument("--steps", type=int, default=0, help="optimizer steps on the batch, each followed by the loss")
    a.add_argument("--save-after-step", nargs=2, metavar=("K", "OUT"), default=None,
                   help="after step K save model and optimizer to OUT (.pt, or .safetensors for ddp.cpp)")
    a = sub.add_parser("batch", help="write a fixed batch file")
    a.add_argument("--model", required=True, choices=["mlp", "cnn", "gpt"])
    a.add_argument("--rows", type=int, default=8)
    a.add_argument("--context", type=int, default=16)
    a.add_argument("--seed", type=int, default=1)
    a.add_argument("out")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.cmd == "to-torch":
        torch.save(ddp_to_torch(*read_safetensors(args.ckpt)), args.out)
    elif args.cmd == "from-torch":
        write_safetensors(args.out, *torch_to_ddp(torch.load(args.pt)))
    elif args.cmd == "loss":
        cmd_loss(args)
    else:
        cmd_batch(args)


if __name__ == "__main__":
    main()
