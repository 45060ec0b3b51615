"""Writes the seed corpus of tests/fuzz/aclnn_fuzz.cpp: eight inputs per operator (the first byte picks
the operator), the rest fixed pseudo-random bytes; most of them decode to valid calls, the others to
the perturbations the harness makes. Run from the repository root: python3 tests/fuzz/make_corpus.py"""
import random
from pathlib import Path

OPERATORS = ["avg_pool2d", "roi_align", "upsample_bilinear2d", "grid_sampler_2d", "ms_deform_attn"]


def main() -> None:
    out = Path(__file__).resolve().parent / "corpus"
    out.mkdir(exist_ok=True)
    rng = random.Random(20261124)
    for index, name in enumerate(OPERATORS):
        for seed in range(8):
            body = bytes(rng.randrange(256) for _ in range(384))
            (out / f"{name}_{seed}").write_bytes(bytes([index]) + body)


if __name__ == "__main__":
    main()
