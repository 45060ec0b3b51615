"""Real torchvision models, one training step with and without spatialgrad.torch.patch(): the same loss and
the same gradient for every parameter (small inputs, random weights, nothing downloaded)."""
import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

import spatialgrad.torch as sgt  # noqa: E402
from helpers import count_patch_calls  # noqa: E402


def one_step(build, run, patched):
    """Loss and parameter gradients of one step of a freshly built model, seeds fixed."""
    torch.manual_seed(0)
    model = build()
    model.train()
    torch.manual_seed(1)
    if patched:
        with sgt.patch():
            loss = run(model)
    else:
        loss = run(model)
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def assert_same_step(build, run):
    loss_ref, grads_ref = one_step(build, run, patched=False)
    loss, grads = one_step(build, run, patched=True)
    torch.testing.assert_close(loss, loss_ref, rtol=1e-4, atol=0)
    assert grads.keys() == grads_ref.keys()
    for name, g in grads.items():
        ref = grads_ref[name]
        scale = float(ref.abs().max())
        torch.testing.assert_close(g, ref, rtol=1e-3, atol=1e-3 * scale + 1e-7, msg=lambda m: f"{name}: {m}")


@pytest.fixture
def calls(monkeypatch):
    return count_patch_calls(monkeypatch, ("sg_upsample_bilinear2d", "sg_roi_align"))


def test_mask_rcnn_training_step(calls):
    # float64: in float32 the resize's bilinear sums (rounded in another order than PyTorch's, 1 ulp apart)
    # can flip which proposals a random-weight detector samples, which moves its classification loss by
    # ~1e-3; in float64 such flips do not happen and the comparison is about the operators.
    def build():
        return torchvision.models.detection.maskrcnn_resnet50_fpn(
            weights=None, weights_backbone=None, num_classes=3, min_size=128, max_size=160,
            rpn_batch_size_per_image=32, box_batch_size_per_image=16).double()

    data = torch.Generator().manual_seed(4)
    images = [torch.rand(3, 120, 150, dtype=torch.float64, generator=data),
              torch.rand(3, 140, 128, dtype=torch.float64, generator=data)]
    targets = []
    for image, boxes in zip(images, ([[10.0, 12.0, 60.0, 70.0], [40.0, 30.0, 110.0, 100.0]], [[5.0, 5.0, 90.0, 80.0]])):
        boxes = torch.tensor(boxes, dtype=torch.float64)
        masks = torch.zeros(len(boxes), *image.shape[1:], dtype=torch.uint8)
        for m, (x1, y1, x2, y2) in zip(masks, boxes.int().tolist()):
            m[y1:y2, x1:x2] = 1
        targets.append(dict(boxes=boxes, labels=torch.tensor([1, 2][:len(boxes)]), masks=masks))

    def run(model):
        losses = model(images, targets)
        return sum(losses.values())

    assert_same_step(build, run)
    assert calls["sg_roi_align"] >= 2 and calls["sg_upsample_bilinear2d"] >= 2  # box + mask heads, the resize


def test_deeplabv3_training_step(calls):
    def build():
        return torchvision.models.segmentation.deeplabv3_resnet50(weights=None, weights_backbone=None,
                                                                  num_classes=4, aux_loss=True)

    images = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(6))
    labels = torch.randint(0, 4, (2, 64, 64), generator=torch.Generator().manual_seed(5))

    def run(model):
        out = model(images)
        return torch.nn.functional.cross_entropy(out["out"], labels) + 0.5 * torch.nn.functional.cross_entropy(
            out["aux"], labels)

    assert_same_step(build, run)
    assert calls["sg_upsample_bilinear2d"] >= 3  # ASPP pooling branch, head and aux outputs
