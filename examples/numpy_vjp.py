"""Reverse mode with NumPy only: chain spatialgrad's vjp pullbacks through a small pipeline and check the
result with finite differences.

pipeline: image -> avg_pool2d -> upsample_bilinear2d -> grid_sample (a rotation) -> roi_align -> loss
plus a deformable-attention step whose location and weight gradients are checked the same way.

    python examples/numpy_vjp.py
"""
import numpy as np

import spatialgrad as sg
from spatialgrad.autograd import vjp

rng = np.random.default_rng(0)
image = rng.random((1, 3, 16, 16))
angle = 0.3
boxes = np.array([[0, 2.3, 3.1, 11.7, 9.4], [0, 5.2, 6.6, 14.1, 13.8]])
weights = rng.standard_normal((2, 3, 3, 3))


def rotation_grid(angle, h, w):
    """Sampling grid (1, h, w, 2) in [-1, 1] coordinates for a rotation about the centre."""
    ys, xs = np.meshgrid(np.linspace(-1, 1, h), np.linspace(-1, 1, w), indexing="ij")
    c, s = np.cos(angle), np.sin(angle)
    return np.stack([c * xs - s * ys, s * xs + c * ys], axis=-1)[None]


def forward(image, angle, keep_pullbacks=False):
    pooled, pb_pool = vjp(sg.avg_pool2d, image, 2)
    upsampled, pb_up = vjp(sg.upsample_bilinear2d, pooled, output_size=(16, 16))
    grid = rotation_grid(angle, 16, 16)
    warped, pb_warp = vjp(sg.grid_sample, upsampled, grid, mode="bilinear", padding_mode="border")
    rois, pb_roi = vjp(sg.roi_align, warped, boxes, (3, 3), sampling_ratio=2)
    loss = float(np.sum(weights * rois))
    return (loss, (pb_pool, pb_up, pb_warp, pb_roi)) if keep_pullbacks else loss


loss, (pb_pool, pb_up, pb_warp, pb_roi) = forward(image, angle, keep_pullbacks=True)

# Backward: feed d loss / d rois = weights through the pullbacks in reverse order.
grad_warped, _ = pb_roi(weights)
grad_upsampled, grad_grid = pb_warp(grad_warped)
(grad_pooled,) = pb_up(grad_upsampled)
(grad_image,) = pb_pool(grad_pooled)

# The angle enters through the grid: chain rule by hand, d grid / d angle.
ys, xs = np.meshgrid(np.linspace(-1, 1, 16), np.linspace(-1, 1, 16), indexing="ij")
c, s = np.cos(angle), np.sin(angle)
dgrid = np.stack([-s * xs - c * ys, c * xs - s * ys], axis=-1)[None]
grad_angle = float(np.sum(grad_grid * dgrid))

eps = 1e-6
print(f"loss = {loss:.6f}\n")
print(f"{'quantity':<30} {'analytic':>12} {'numeric':>12} {'abs error':>10}")
worst = 0.0
numeric = (forward(image, angle + eps) - forward(image, angle - eps)) / (2 * eps)
worst = max(worst, abs(numeric - grad_angle))
print(f"{'d loss / d angle':<30} {grad_angle:12.8f} {numeric:12.8f} {abs(numeric - grad_angle):10.2e}")
for index in [(0, 0, 4, 5), (0, 1, 8, 8), (0, 2, 12, 3)]:
    bumped = image.copy()
    bumped[index] += eps
    plus = forward(bumped, angle)
    bumped[index] -= 2 * eps
    numeric = (plus - forward(bumped, angle)) / (2 * eps)
    worst = max(worst, abs(numeric - grad_image[index]))
    print(f"{'d loss / d image' + str(index[1:]):<30} {grad_image[index]:12.8f} {numeric:12.8f} "
          f"{abs(numeric - grad_image[index]):10.2e}")

# Deformable attention: gradients with respect to sampling locations and attention weights.
shapes = np.array([[6, 7], [3, 4]])
starts = np.array([0, 42])
value = rng.standard_normal((1, 54, 2, 4))
locations = rng.uniform(0.1, 0.9, size=(1, 5, 2, 2, 3, 2))
attention = rng.uniform(0.1, 1.0, size=(1, 5, 2, 2, 3))
out, pullback = vjp(sg.ms_deform_attn, value, shapes, starts, locations, attention)
g = rng.standard_normal(out.shape)
grad_value, _, _, grad_loc, grad_attn = pullback(g)
for name, array, grad, index in [("locations", locations, grad_loc, (0, 1, 0, 1, 2, 0)),
                                 ("attention weights", attention, grad_attn, (0, 3, 1, 0, 1))]:
    bumped = array.copy()
    bumped[index] += eps
    args = [value, shapes, starts, locations, attention]
    args[3 if name == "locations" else 4] = bumped
    plus = float(np.vdot(g, sg.ms_deform_attn(*args)))
    bumped[index] -= 2 * eps
    numeric = (plus - float(np.vdot(g, sg.ms_deform_attn(*args)))) / (2 * eps)
    worst = max(worst, abs(numeric - grad[index]))
    print(f"{'msda d / d ' + name:<30} {grad[index]:12.8f} {numeric:12.8f} {abs(numeric - grad[index]):10.2e}")

print(f"\nlargest error {worst:.2e}: {'OK' if worst < 1e-6 else 'MISMATCH'}")
raise SystemExit(0 if worst < 1e-6 else 1)
