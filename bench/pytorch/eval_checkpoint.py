#!/usr/bin/env python3
"""Evaluates a checkpoint of `host mnist --save` in PyTorch: builds the MLP of `--hidden` (any
depth, as `host mnist --hidden` takes it), loads the weights, and prints the test set's loss and
accuracy, computed in fp32.

    python3 bench/pytorch/eval_checkpoint.py w.safetensors --hidden 512,256
    python3 bench/pytorch/eval_checkpoint.py w.safetensors --hidden 512,256 --expect 98.30

With --expect (the accuracy `host mnist` printed, in %), exits 1 unless PyTorch's accuracy is
within --tolerance points of it: ours evaluates with fp16 weights and fp16 products, so a few of
the 10,000 test examples that lie on a decision boundary may fall the other way.
"""
import argparse, json, struct
from pathlib import Path
import sys
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mnist_mlp import Mlp, load  # noqa: E402

DTYPES = {"F32": torch.float32, "F16": torch.float16}


def safetensors(path):
    """The tensors of a safetensors file, by name (its format: a little-endian u64 header length, a
    JSON header of names, dtypes, shapes and byte ranges, then the data)."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        tensors[name] = torch.frombuffer(bytearray(data[a:b]), dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return tensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--hidden", default="128", help="hidden widths, comma-separated, as host mnist --hidden")
    ap.add_argument("--data", default="data/mnist")
    ap.add_argument("--expect", type=float, help="the test accuracy host mnist printed, in %%")
    ap.add_argument("--tolerance", type=float, default=0.1, help="points of accuracy allowed apart (default 0.1)")
    a = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sizes = [784, *(int(h) for h in a.hidden.split(",")), 10]
    model = Mlp(sizes, "kaiming").to(dev)
    # strict: every layer of --hidden must be in the file, at its shape, and nothing else.
    model.load_state_dict({k: v.float() for k, v in safetensors(a.checkpoint).items()}, strict=True)
    _, _, xt, yt = load(a.data, dev)
    with torch.no_grad():
        logits = model(xt)
        loss = F.cross_entropy(logits, yt).item()
        accuracy = 100 * (logits.argmax(1) == yt).float().mean().item()
    print(f"PyTorch, {'-'.join(map(str, sizes))} from {a.checkpoint}: test loss {loss:.4f}, "
          f"test accuracy {accuracy:.2f}%")
    if a.expect is not None and abs(accuracy - a.expect) > a.tolerance:
        sys.exit(f"accuracy {accuracy:.2f}% is not within {a.tolerance} points of {a.expect:.2f}%")


if __name__ == "__main__":
    main()
