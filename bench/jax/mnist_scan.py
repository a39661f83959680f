#!/usr/bin/env python3
"""The JAX baseline of `host mnist`: the training of bench/pytorch/mnist_mlp.py (same data,
model, init family, SGD with momentum, softmax cross-entropy, batch 128, a shuffle on the GPU
every epoch, the last partial batch dropped) with each epoch ONE jitted `jax.lax.scan` over its
steps:

    python3 bench/jax/mnist_scan.py --hidden 128 --unroll 1,4 --epochs 10 --csv out.csv
    python3 bench/jax/mnist_scan.py --hidden 512,256 1024,1024 --epochs 10

The data set is on the GPU in fp16; the parameters' master copies and SGD's momentum are fp32.
Every matmul, forward and backward, takes fp16 operands and accumulates in fp32
(`preferred_element_type=jnp.float32`); biases, the loss and the update are fp32.

--hidden takes one or more models, each a comma list of hidden widths (any depth); --unroll a
comma list of scan unroll factors: every model is trained once per factor, from the same initial
weights. An epoch's time is the scan alone (the permutation is drawn before it), measured with
block_until_ready; the first epoch's includes the compilation, so the summary line of each run
gives the median of epochs 2+ in ms, as the other baselines do. The CSV has the columns of
mnist_mlp.py's (mode,hidden,epoch,step,loss,accuracy,time_s,epoch_time_s) with mode `scan-uN`
(N the unroll) and hidden the widths joined by `-`.
"""
import argparse, gzip, statistics, struct, time
from functools import partial
from pathlib import Path
import sys
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for curves.py
import curves

import numpy as np
import jax
import jax.numpy as jnp

MEAN, STD = 0.1307, 0.3081
f16, f32 = jnp.float16, jnp.float32


def idx(path):
    """An IDX file (raw or .gz) as a numpy array."""
    p = Path(path)
    if not p.exists() and p.suffix == ".gz":
        p = p.with_suffix("")
    raw = gzip.open(p).read() if p.suffix == ".gz" else p.read_bytes()
    dims = raw[3]
    sizes = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(sizes)


def load(data):
    """MNIST on the GPU: images normalised as mnist_mlp.py does them, then fp16; labels int32."""
    d = Path(data)

    def images(name):
        x = idx(d / name).reshape(-1, 28 * 28).astype(np.float32) / 255
        return jnp.asarray((x - MEAN) / STD, dtype=f16)

    def labels(name):
        return jnp.asarray(idx(d / name).astype(np.int32))

    return (images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz"),
            images("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz"))


def init_params(key, sizes, init):
    """[(W [in, out], b [out])] in fp32, as mnist_mlp.py's Mlp draws them: kaiming_normal_
    (fan in, ReLU gain), xavier_uniform_ or normal_(0, 1), biases zero."""
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, k = jax.random.split(key)
        if init == "kaiming":
            w = jax.random.normal(k, (fan_in, fan_out), f32) * np.sqrt(2.0 / fan_in)
        elif init == "xavier":
            a = np.sqrt(6.0 / (fan_in + fan_out))
            w = jax.random.uniform(k, (fan_in, fan_out), f32, -a, a)
        else:
            w = jax.random.normal(k, (fan_in, fan_out), f32)
        params.append((w, jnp.zeros((fan_out,), f32)))
    return params


@jax.custom_vjp
def matmul(x16, w):
    """x16 @ w with fp16 operands (w: the fp32 master, cast here) and fp32 accumulation."""
    return jnp.dot(x16, w.astype(f16), preferred_element_type=f32)


def _matmul_fwd(x16, w):
    w16 = w.astype(f16)
    return jnp.dot(x16, w16, preferred_element_type=f32), (x16, w16)


def _matmul_bwd(res, g):
    # Both gradients' products in fp16 with fp32 accumulation too (without this rule JAX would
    # multiply the fp32 cotangent by an upcast operand in fp32). dx goes back in fp16, the
    # activations' type; dW stays fp32, the master's.
    x16, w16 = res
    g16 = g.astype(f16)
    dx = jnp.dot(g16, w16.T, preferred_element_type=f32).astype(f16)
    dw = jnp.dot(x16.T, g16, preferred_element_type=f32)
    return dx, dw


matmul.defvjp(_matmul_fwd, _matmul_bwd)


def logits(params, x16):
    h = x16
    for i, (w, b) in enumerate(params):
        z = matmul(h, w) + b
        if i + 1 == len(params):
            return z
        h = jax.nn.relu(z).astype(f16)


def loss_fn(params, x16, y):
    """Mean softmax cross-entropy over the batch, in fp32."""
    z = logits(params, x16)
    logp = z - jax.nn.logsumexp(z, axis=1, keepdims=True)
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


@partial(jax.jit, static_argnames=("batch", "lr", "momentum", "unroll"), donate_argnums=(0,))
def train_epoch(state, perm, x, y, *, batch, lr, momentum, unroll):
    """One epoch: every step of the permutation in one scan. SGD as torch.optim.SGD takes it
    (buf = momentum * buf + g; p -= lr * buf; buf starts at zero, so its first value is g)."""
    steps = perm.shape[0] // batch
    order = perm[:steps * batch].reshape(steps, batch)

    def step(state, rows):
        params, bufs = state
        loss, grads = jax.value_and_grad(loss_fn)(params, x[rows], y[rows])
        bufs = jax.tree_util.tree_map(lambda b, g: momentum * b + g, bufs, grads)
        params = jax.tree_util.tree_map(lambda p, b: p - lr * b, params, bufs)
        return (params, bufs), loss

    return jax.lax.scan(step, state, order, unroll=unroll)


@jax.jit
def accuracy(params, x, y):
    return jnp.mean(jnp.argmax(logits(params, x), axis=1) == y)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="data/mnist", help="folder of the MNIST IDX files (raw or .gz)")
    ap.add_argument("--hidden", nargs="+", default=["128"],
                    help="one or more models, each its hidden widths as a comma list (128; 512,256)")
    ap.add_argument("--unroll", default="1", help="scan unroll factors, a comma list (1,4): one run each")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--init", default="kaiming", choices=["kaiming", "xavier", "normal"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--csv", help="write per-step losses and per-epoch accuracy and time here")
    a = ap.parse_args()
    unrolls = [int(u) for u in a.unroll.split(",")]

    x, y, xt, yt = load(a.data)
    steps = x.shape[0] // a.batch
    dev = jax.devices()[0]
    print(f"JAX {jax.__version__} on {dev.device_kind} ({dev.platform}): {x.shape[0]} train / {xt.shape[0]} test "
          f"examples, batch {a.batch}, {steps} steps/epoch, lr {a.lr} momentum {a.momentum}, init {a.init}, "
          "fp16 matmuls with f32 accumulation, one jitted lax.scan per epoch", flush=True)
    rows = [curves.HEADER]
    key = jax.random.PRNGKey(a.seed)
    for hidden in a.hidden:
        widths = [int(h) for h in hidden.split(",")]
        sizes = [x.shape[1], *widths, int(y.max()) + 1]
        name = "-".join(map(str, widths))
        for unroll in unrolls:
            mode = f"scan-u{unroll}"
            params = init_params(key, sizes, a.init)
            state = (params, jax.tree_util.tree_map(jnp.zeros_like, params))
            times, t_all = [], 0.0
            for epoch in range(1, a.epochs + 1):
                perm = jax.random.permutation(jax.random.fold_in(key, epoch), x.shape[0]).astype(jnp.int32)
                perm.block_until_ready()
                t0 = time.perf_counter()
                state, losses = train_epoch(state, perm, x, y, batch=a.batch, lr=a.lr,
                                            momentum=a.momentum, unroll=unroll)
                jax.block_until_ready((state, losses))
                dt = time.perf_counter() - t0
                times.append(dt)
                t_all += dt
                acc = round(float(accuracy(state[0], xt, yt)), 6)
                ls = np.asarray(losses).tolist()
                curves.record_epoch(rows, mode, name, epoch, ls, acc, t_all, dt)
            later = times[1:]
            med = f"{1000 * statistics.median(later):.3f} ms/epoch (median of epochs 2+)" if later else "no epoch 2+"
            print(f"{mode} hidden {name}: {med}, first epoch with compilation {1000 * times[0]:.0f} ms, "
                  f"final test accuracy {100 * acc:.2f}%", flush=True)
    curves.write(a.csv, rows)


if __name__ == "__main__":
    main()
