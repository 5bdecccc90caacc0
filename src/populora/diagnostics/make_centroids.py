"""Generate the shipped CVT centroids: `python -m populora.diagnostics.make_centroids [--out PATH]`.

Run once; the result is committed as `cvt_centroids_4096x4.npy` (float32, 4096 x 4, 64 KB) so that every
run, on every machine, tiles the feature space identically. The centroids are a centroidal Voronoi
tessellation of the normalised feature cube [0, 1]^4 (see `features.normalise`), approximated as in
Vassiliades et al. (2018): k-means (Lloyd, 20 iterations, initialised at random sample points) over
100,000 points drawn uniformly from the cube with a fixed seed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

N_CELLS = 4096
N_SAMPLES = 100_000
SEED = 0
DEFAULT_PATH = Path(__file__).with_name("cvt_centroids_4096x4.npy")


def make_centroids(n_cells: int = N_CELLS, n_samples: int = N_SAMPLES, seed: int = SEED) -> np.ndarray:
    """Return (n_cells, 4) float32 CVT centroids of the unit cube, deterministic for a seed."""
    from scipy.cluster.vq import kmeans2

    rng = np.random.default_rng(seed)
    samples = rng.random((n_samples, 4))
    centroids, _ = kmeans2(samples, n_cells, iter=20, minit="points", seed=np.random.default_rng(seed + 1))
    # kmeans2 can leave a cluster empty; it then keeps its initial point, which is still inside the cube.
    return np.clip(centroids, 0.0, 1.0).astype(np.float32)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_PATH)
    parser.add_argument("--cells", type=int, default=N_CELLS)
    parser.add_argument("--samples", type=int, default=N_SAMPLES)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    cents = make_centroids(args.cells, args.samples, args.seed)
    np.save(args.out, cents)
    print(f"wrote {args.out} {cents.shape} {cents.dtype}")


if __name__ == "__main__":
    main()
