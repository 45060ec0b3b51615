"""spatialgrad quick start: average pooling forward, its backward, and a finite-difference check.

Run with `make demo` (or any Python that has spatialgrad installed).
"""
import numpy as np

import spatialgrad as sg

rng = np.random.default_rng(0)

# A small "image": batch 1, 3 channels, 8x8, float64 so finite differences are accurate.
image = rng.random((1, 3, 8, 8))
params = dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)

pooled = sg.avg_pool2d(image, **params)
print(f"avg_pool2d: input {image.shape} -> output {pooled.shape} ({sg.get_num_threads()} threads)")
print("channel 0 of the output:")
print(np.array2string(pooled[0, 0], precision=3))

# Backward: the gradient of loss = sum(weights * pooled) with respect to the image.
weights = rng.standard_normal(pooled.shape)
grad_image = sg.avg_pool2d_backward(weights, image, **params)
print(f"\navg_pool2d_backward: grad_output {weights.shape} -> grad_input {grad_image.shape}")


def loss(x):
    return float(np.sum(weights * sg.avg_pool2d(x, **params)))


# Central differences at a few pixels, including corners and edges where windows are clipped.
eps = 1e-6
print("\nfinite-difference check of grad_input")
print(f"{'pixel (c, h, w)':>16} {'analytic':>12} {'numeric':>12} {'abs error':>10}")
worst = 0.0
for c, h, w in [(0, 0, 0), (0, 0, 7), (1, 3, 4), (1, 7, 7), (2, 4, 0), (2, 5, 6)]:
    bumped = image.copy()
    bumped[0, c, h, w] += eps
    plus = loss(bumped)
    bumped[0, c, h, w] -= 2 * eps
    minus = loss(bumped)
    numeric = (plus - minus) / (2 * eps)
    analytic = grad_image[0, c, h, w]
    worst = max(worst, abs(numeric - analytic))
    print(f"{str((c, h, w)):>16} {analytic:12.8f} {numeric:12.8f} {abs(numeric - analytic):10.2e}")

status = "OK" if worst < 1e-7 else "MISMATCH"
print(f"\nlargest error {worst:.2e}: {status}")
raise SystemExit(0 if status == "OK" else 1)
