#!/usr/bin/env python3
"""The PyTorch baseline of `host iris`: `mnist_mlp.py --dataset iris` (same model, optimiser,
batch and epochs as `host iris`'s defaults; all its flags apply)."""
import sys
from pathlib import Path

sys.argv[1:1] = ["--dataset", "iris"]
sys.path.insert(0, str(Path(__file__).parent))
import mnist_mlp  # noqa: E402

mnist_mlp.main()
