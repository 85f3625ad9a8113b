"""Writes examples/machines.csv: a made-up machine-health stream for the README's quick start.

Each row is one reading of a machine (temperature in degrees C, vibration in mm/s, speed
in rpm, load as a fraction of rated) and y, whether it failed within the hour (1) or not
(0): raw, unscaled features, as sensors send them. Fixed seed: the file is reproducible.

    python examples/make_machines.py
"""

import csv
from pathlib import Path

import numpy as np

rng = np.random.default_rng(7)
n = 3000
temperature = rng.normal(70, 8, n)
vibration = rng.gamma(4, 0.8, n)
rpm = rng.normal(1500, 200, n)
load = rng.uniform(0.2, 1.0, n)
risk = (
    0.25 * (temperature - 70) + 1.2 * (vibration - 3.2) + 3.0 * (load - 0.6) - 0.002 * (rpm - 1500)
)
failed = (risk + rng.normal(0, 1.0, n) > 1.5).astype(int)
with open(Path(__file__).with_name("machines.csv"), "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["temperature", "vibration", "rpm", "load", "y"])
    for row in zip(temperature, vibration, rpm, load, failed, strict=True):
        out.writerow([f"{row[0]:.1f}", f"{row[1]:.2f}", f"{row[2]:.0f}", f"{row[3]:.2f}", row[4]])
