"""spatialgrad.torch.nn modules, FX tracing of the adapters and mmcv's dtype casting."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

import spatialgrad.torch as sgt  # noqa: E402
from spatialgrad.torch.nn import MultiScaleDeformableAttention, RoIAlign  # noqa: E402

MMCV_KEYS = {"sampling_offsets.weight", "sampling_offsets.bias", "attention_weights.weight", "attention_weights.bias",
             "value_proj.weight", "value_proj.bias", "output_proj.weight", "output_proj.bias"}


def test_roi_align_module_equals_torchvisions():
    torch.manual_seed(0)
    x = torch.rand(2, 3, 10, 12, dtype=torch.float64)
    boxes = [torch.tensor([[1.0, 2.0, 8.0, 9.0]], dtype=torch.float64),
             torch.tensor([[0.5, 0.5, 4.0, 3.0], [2.0, 2.0, 11.0, 7.0]], dtype=torch.float64)]
    for aligned in (False, True):
        ours, theirs = RoIAlign((3, 2), 0.5, -1, aligned), torchvision.ops.RoIAlign((3, 2), 0.5, -1, aligned)
        torch.testing.assert_close(ours(x, boxes), theirs(x, boxes))
        assert repr(ours).startswith("RoIAlign(output_size=(3, 2)")


def test_modules_are_saved_and_scripted_under_their_public_module():
    # The classes live in private per-operator modules; a pickled model (torch.save) and a scripted one name
    # them spatialgrad.torch.nn, so that renaming the private files never breaks a saved model.
    import io

    from spatialgrad.torch.nn import MultiScaleRoIAlign
    for layer in (RoIAlign, MultiScaleRoIAlign, MultiScaleDeformableAttention):
        assert layer.__module__ == "spatialgrad.torch.nn"
    buffer = io.BytesIO()
    torch.save(RoIAlign(7, 1.0, 2), buffer)
    assert b"spatialgrad.torch.nn" in buffer.getvalue() and b"_roi_align" not in buffer.getvalue()
    buffer.seek(0)
    # A whole pickled module loads only with weights_only=False (PyTorch 2.6's default is True; 1.13's False).
    assert type(torch.load(buffer, weights_only=False)) is RoIAlign
    assert str(torch.jit.script(RoIAlign(7, 1.0, 2))._c._type()) == "__torch__.spatialgrad.torch.nn.RoIAlign"


def test_state_dicts_load_with_weights_only():
    # What PyTorch 2.6 loads by default: tensors by name, no classes of ours in the file.
    import io

    torch.manual_seed(0)
    layer = MultiScaleDeformableAttention(embed_dims=16, num_heads=2, num_levels=2, num_points=2)
    buffer = io.BytesIO()
    torch.save(layer.state_dict(), buffer)
    buffer.seek(0)
    restored = MultiScaleDeformableAttention(embed_dims=16, num_heads=2, num_levels=2, num_points=2)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert all(torch.equal(a, b) for a, b in zip(restored.state_dict().values(), layer.state_dict().values()))


def mmcv_forward(module, query, value, reference_points, shapes, starts, identity=None):
    """mmcv's forward for the CPU (multi_scale_deformable_attn_pytorch), written out for the comparison."""
    if not module.batch_first:
        query, value = query.permute(1, 0, 2), value.permute(1, 0, 2)
    bs, nq, _ = query.shape
    v = module.value_proj(value).view(bs, value.shape[1], module.num_heads, -1)
    shape = (bs, nq, module.num_heads, module.num_levels, module.num_points)
    offsets = module.sampling_offsets(query).view(*shape, 2)
    weights = module.attention_weights(query).view(bs, nq, module.num_heads, -1).softmax(-1).view(*shape)
    if reference_points.shape[-1] == 2:
        normaliser = torch.stack([shapes[..., 1], shapes[..., 0]], -1)
        loc = reference_points[:, :, None, :, None, :] + offsets / normaliser[None, None, None, :, None, :]
    else:
        loc = (reference_points[:, :, None, :, None, :2]
               + offsets / module.num_points * reference_points[:, :, None, :, None, 2:] * 0.5)
    out = module.output_proj(sgt.ms_deform_attn_reference(v, shapes, loc, weights))
    if not module.batch_first:
        out = out.permute(1, 0, 2)
    base = query if identity is None else identity
    if not module.batch_first and identity is None:
        base = query.permute(1, 0, 2)
    return out + base


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("ref_dims", [2, 4])
def test_deformable_attention_loads_mmcv_weights_and_matches_its_forward(batch_first, ref_dims):
    torch.manual_seed(2)
    module = MultiScaleDeformableAttention(embed_dims=16, num_heads=4, num_levels=2, num_points=3, dropout=0.0,
                                           batch_first=batch_first).double()
    assert set(module.state_dict()) == MMCV_KEYS
    # a checkpoint with mmcv's keys (random values) loads strictly
    checkpoint = {k: torch.randn_like(v) for k, v in module.state_dict().items()}
    module.load_state_dict(checkpoint, strict=True)
    shapes = torch.tensor([[4, 5], [2, 3]])
    starts = torch.tensor([0, 20])
    bs, nq = 2, 7
    query = torch.randn(bs, nq, 16, dtype=torch.float64)
    value = torch.randn(bs, 26, 16, dtype=torch.float64)
    ref = torch.rand(bs, nq, 2, ref_dims, dtype=torch.float64)
    if not batch_first:
        query, value = query.transpose(0, 1), value.transpose(0, 1)
    out = module(query, value=value, reference_points=ref, spatial_shapes=shapes, level_start_index=starts)
    expected = mmcv_forward(module, query, value, ref, shapes, starts)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
    assert out.shape == query.shape


def test_deformable_attention_initialisation_is_mmcvs():
    module = MultiScaleDeformableAttention(embed_dims=32, num_heads=8, num_levels=2, num_points=3)
    assert module.attention_weights.weight.abs().sum() == 0 and module.attention_weights.bias.abs().sum() == 0
    assert module.sampling_offsets.weight.abs().sum() == 0
    bias = module.sampling_offsets.bias.view(8, 2, 3, 2)
    # head 1 points at 45 degrees, normalised onto the square (1, 1); point i at distance i + 1
    torch.testing.assert_close(bias[1, 0, 2], torch.tensor([3.0, 3.0]))
    torch.testing.assert_close(bias[0, 1, 0], torch.tensor([1.0, 0.0]))
    assert module.value_proj.bias.abs().sum() == 0
    limit = math.sqrt(6 / (32 + 32))  # xavier uniform
    assert module.value_proj.weight.abs().max() <= limit
    with pytest.raises(ValueError, match="embed_dims divisible by num_heads"):
        MultiScaleDeformableAttention(embed_dims=30, num_heads=8)


def test_a_deformable_detr_encoder_layer_trains():
    torch.manual_seed(3)
    attention = MultiScaleDeformableAttention(embed_dims=16, num_heads=2, num_levels=2, num_points=2, dropout=0.0,
                                              batch_first=True)
    head = torch.nn.Linear(16, 1)
    params = list(attention.parameters()) + list(head.parameters())
    optimiser = torch.optim.Adam(params, lr=1e-2)
    shapes, starts = torch.tensor([[4, 4], [2, 2]]), torch.tensor([0, 16])
    value = torch.randn(2, 20, 16)
    target = value[:, :, :1].mean(1, keepdim=True).expand(2, 20, 1)
    ref = torch.rand(2, 20, 2, 2)
    losses = []
    for _ in range(30):
        out = head(attention(value, value=value, reference_points=ref, spatial_shapes=shapes,
                             level_start_index=starts))
        loss = (out - target).square().mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_mmcv_casting_of_points_to_value_dtype():
    torch.manual_seed(4)
    shapes, starts = torch.tensor([[3, 4]]), torch.tensor([0])
    value = torch.randn(1, 12, 2, 4, dtype=torch.float16, requires_grad=True)
    loc = torch.rand(1, 5, 2, 1, 2, 2, dtype=torch.float32, requires_grad=True)
    attn = torch.rand(1, 5, 2, 1, 2, dtype=torch.float32, requires_grad=True)
    out = sgt.ms_deform_attn(value, shapes, starts, loc, attn)
    assert out.dtype == torch.float16
    out.float().sum().backward()
    assert value.grad.dtype == torch.float16 and loc.grad.dtype == torch.float32 and attn.grad.dtype == torch.float32
    expected = sgt.ms_deform_attn(value.detach(), shapes, starts, loc.detach().half(), attn.detach().half())
    torch.testing.assert_close(out.detach(), expected)


class UsesEveryAdapter(torch.nn.Module):
    def forward(self, x, boxes, grid):
        y = sgt.avg_pool2d(x, 2) + sgt.upsample_bilinear2d(sgt.avg_pool2d(x, 4), scale_factor=2)
        return sgt.roi_align(y, boxes, 2).sum() + sgt.grid_sample(y, grid, align_corners=False).sum()


@pytest.mark.skipif(sgt.native, reason="with the native operators fx records their torch.ops.spatialgrad calls "
                    "(test_torch_jit.py::test_fx_records_the_operators)")
def test_fx_traces_the_adapters_as_leaf_calls():
    module = UsesEveryAdapter()
    traced = torch.fx.symbolic_trace(module)
    targets = {node.target for node in traced.graph.nodes if node.op == "call_function"}
    assert {sgt.avg_pool2d, sgt.upsample_bilinear2d, sgt.roi_align, sgt.grid_sample} <= targets
    x = torch.rand(1, 2, 8, 8)
    boxes = torch.tensor([[0, 1.0, 1.0, 3.0, 3.0]])
    grid = torch.rand(1, 3, 3, 2) * 2 - 1
    torch.testing.assert_close(traced(x, boxes, grid), module(x, boxes, grid))


@torch.jit.script
def scripted_every_adapter(x: torch.Tensor, boxes: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    y = sgt.avg_pool2d(x, 2) + sgt.upsample_bilinear2d(sgt.avg_pool2d(x, [4, 4]), scale_factor=2.0)
    z = sgt.upsample_bilinear2d(x, size=(5, 6), align_corners=True)
    pooled = sgt.roi_align(y, boxes, (2, 2), 1.0, 2, True)
    return pooled.sum() + sgt.grid_sample(y, grid, "bicubic", "border", False).sum() + z.sum()


class DeformableHead(torch.nn.Module):
    def forward(self, value, shapes, starts, loc, attn):
        return sgt.ms_deform_attn(value, shapes, starts, loc, attn)


def test_torchscript_calls_the_adapters():
    """Scripted functions and modules work (in Python: TorchScript calls back into the eager adapters)."""
    torch.manual_seed(5)
    x = torch.rand(1, 2, 8, 8, dtype=torch.float64, requires_grad=True)
    boxes = torch.tensor([[0, 1.0, 1.0, 5.0, 5.0]], dtype=torch.float64)
    grid = torch.rand(1, 3, 3, 2, dtype=torch.float64) * 2 - 1
    out = scripted_every_adapter(x, boxes, grid)
    (grad,) = torch.autograd.grad(out, x)
    x2 = x.detach().clone().requires_grad_()
    y = sgt.avg_pool2d(x2, 2) + sgt.upsample_bilinear2d(sgt.avg_pool2d(x2, [4, 4]), scale_factor=2.0)
    z = sgt.upsample_bilinear2d(x2, size=(5, 6), align_corners=True)
    expected = (sgt.roi_align(y, boxes, (2, 2), 1.0, 2, True).sum()
                + sgt.grid_sample(y, grid, "bicubic", "border", False).sum() + z.sum())
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grad, torch.autograd.grad(expected, x2)[0])
    head = torch.jit.script(DeformableHead())
    args = (torch.rand(1, 12, 2, 4), torch.tensor([[3, 4]]), torch.tensor([0]), torch.rand(1, 5, 2, 1, 2, 2),
            torch.rand(1, 5, 2, 1, 2))
    torch.testing.assert_close(head(*args), DeformableHead()(*args))
