"""Writes examples/chiller.csv: a made-up regression stream for the recipe
docs/recipes/regression.md.

Each row is one reading of a building's chiller (outdoor temperature in degrees C, relative
humidity in %, people in the building, the cooling setpoint in degrees C) and power_kw,
the electric power it drew: raw, unscaled numbers, as the building's meters send them.
The chiller works only when it is warmer outside than the setpoint, harder with humidity
and people. Fixed seed: the file is reproducible.

    python examples/make_chiller.py
"""

import csv
from pathlib import Path

import numpy as np

rng = np.random.default_rng(11)
n = 2000
outdoor = rng.normal(26, 6, n)
humidity = rng.uniform(30, 90, n)
occupancy = rng.integers(0, 400, n)
setpoint = rng.choice([21.0, 22.0, 23.0, 24.0], n)
load = np.maximum(0.0, outdoor - setpoint)
power = 12 + 4.0 * load + 0.08 * humidity * (load > 0) + 0.05 * occupancy + rng.normal(0, 1.5, n)
with open(Path(__file__).with_name("chiller.csv"), "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["outdoor_temp", "humidity", "occupancy", "setpoint", "power_kw"])
    for row in zip(outdoor, humidity, occupancy, setpoint, power, strict=True):
        out.writerow([f"{row[0]:.1f}", f"{row[1]:.0f}", row[2], f"{row[3]:.0f}", f"{row[4]:.1f}"])
