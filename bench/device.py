"""The learner's step and the actor's forward pass on each backend and device there is.

    .venv/bin/python -m bench.device [--backends jax,torch,tensorflow] [--quick]

For every backend importable here, one child process per device (the GPU when the backend
sees one, and the CPU), each building the library's own models (`streamlearn.nn.networks`) and
timing, on the same data:

- `train_on_batch` samples/s per batch size (the learner's step; each size warmed up first,
  so no trace is timed), for the demo MLP, a wide MLP and an LSTM over a window of 16;
- the actor's forward pass (`streamlearn.online.forward.Forward`, what serving calls) in ms per call
  per batch size, median of repeated calls.

Ratios are within one run and one machine: GPU against CPU of the same backend, and batch
size against batch 1. Writes bench/results/device.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from bench._report import report

MODELS = {
    "mlp 9-64-64-1": {"inputs": 9, "architecture": "mlp", "hidden": (64, 64)},
    "mlp 64-512-512-1": {"inputs": 64, "architecture": "mlp", "hidden": (512, 512)},
    "lstm w16 9-64-64": {"inputs": 9, "architecture": "lstm", "hidden": (64, 64), "window": 16},
}
TRAIN_SIZES = (1, 16, 256, 1024, 4096, 16384)
SERVE_SIZES = (1, 16, 64, 256)


def child(device: str, quick: bool) -> dict:
    """Runs in a process whose backend and visible devices are already set."""
    import keras
    import numpy as np

    from streamlearn.config import LearnerConfig, ModelConfig
    from streamlearn.nn import networks
    from streamlearn.online.forward import Forward

    rng = np.random.default_rng(0)
    out: dict = {"backend": keras.backend.backend(), "device": device, "models": {}}
    budget_s = 0.4 if quick else 1.5
    for name, spec in MODELS.items():
        cfg = ModelConfig(
            name="bench", task="binary", learner=LearnerConfig(max_batch=16384), **spec
        )
        model = networks.build_model(cfg)
        shape = cfg.sample_shape
        train, serve = {}, {}
        for size in TRAIN_SIZES:
            x = rng.normal(size=(size, *shape)).astype(np.float32)
            y = (rng.random((size, 1)) > 0.5).astype(np.float32)
            for _ in range(3):
                model.train_on_batch(x, y)  # trace + warm up this shape
            steps, start = 0, time.perf_counter()
            while time.perf_counter() - start < budget_s:
                model.train_on_batch(x, y)
                steps += 1
            elapsed = time.perf_counter() - start
            train[size] = {
                "samples_per_s": steps * size / elapsed,
                "ms_per_step": 1000 * elapsed / steps,
            }
        forward = Forward(model, shape)
        for size in SERVE_SIZES:
            x = rng.normal(size=(size, *shape)).astype(np.float32)
            for _ in range(5):
                forward(x)
            times, start = [], time.perf_counter()
            while time.perf_counter() - start < budget_s and len(times) < 2000:
                t = time.perf_counter()
                forward(x)
                times.append(time.perf_counter() - t)
            serve[size] = {"ms_per_call": 1000 * statistics.median(times), "calls": len(times)}
        out["models"][name] = {"train": train, "serve": serve}
    return out


def run_child(backend: str, device: str, quick: bool) -> dict | None:
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    if device == "cpu":
        env.update(CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
    argv = [sys.executable, "-m", "bench.device", "--child", device]
    argv += ["--quick"] if quick else []
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        print(f"{backend}/{device}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def gpu_visible(backend: str) -> bool:
    probe = {
        "jax": "import jax; print(any(d.platform == 'gpu' for d in jax.devices()))",
        "torch": "import torch; print(torch.cuda.is_available())",
        "tensorflow": "import tensorflow as tf; "
        "print(bool(tf.config.list_physical_devices('GPU')))",
    }[backend]
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    return proc.returncode == 0 and proc.stdout.strip().endswith("True")


def importable(backend: str) -> bool:
    proc = subprocess.run([sys.executable, "-c", f"import {backend}"], capture_output=True)
    return proc.returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="jax,torch,tensorflow")
    parser.add_argument("--quick", action="store_true", help="shorter timings")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.quick)))
        return
    runs = []
    for backend in args.backends.split(","):
        if not importable(backend):
            print(f"{backend}: not installed, skipped")
            continue
        devices = (["gpu"] if gpu_visible(backend) else []) + ["cpu"]
        for device in devices:
            result = run_child(backend, device, args.quick)
            if result is not None:
                runs.append(result)
    rows = []
    for run in runs:
        cpu = next(
            (r for r in runs if r["backend"] == run["backend"] and r["device"] == "cpu"), None
        )
        cpu = None if run["device"] == "cpu" else cpu
        for name, figures in run["models"].items():
            for size, t in figures["train"].items():
                base = cpu["models"][name]["train"][size]["samples_per_s"] if cpu else None
                rows.append(
                    {
                        "backend": run["backend"],
                        "device": run["device"],
                        "model": name,
                        "what": f"train batch {size}",
                        "figure": f"{t['samples_per_s']:,.0f}/s, {t['ms_per_step']:.2f} ms/step",
                        "vs cpu": f"{t['samples_per_s'] / base:.2f}x" if base else "",
                    }
                )
            for size, t in figures["serve"].items():
                base = cpu["models"][name]["serve"][size]["ms_per_call"] if cpu else None
                rows.append(
                    {
                        "backend": run["backend"],
                        "device": run["device"],
                        "model": name,
                        "what": f"forward batch {size}",
                        "figure": f"{t['ms_per_call']:.3f} ms/call",
                        "vs cpu": f"{base / t['ms_per_call']:.2f}x" if base else "",
                    }
                )
    report("device", rows, runs=runs)


if __name__ == "__main__":
    main()
