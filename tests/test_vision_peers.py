"""Issue 29, item 3: the vision encodings of timm and transformers, each against the peer's own
code (or, where that code cannot run here, a float64 restatement naming its file and line).

* Swin-V2 log-spaced continuous coordinates (``log_relative_coords``): timm 1.0.31
  ``layers/pos_embed_rel.py`` ``gen_relative_log_coords`` (run), transformers 5.24
  ``Swinv2SelfAttention.create_coords_table_and_index`` (run), timm's
  ``swin_transformer_v2.py`` ``WindowAttention._make_pair_wise_relative_positions``
  L188-205 (restated: the model file imports torchvision).
* Relative-bias table resize (``resize_relative_table``): timm ``resize_rel_pos_bias_table``,
  ``resize_rel_pos_bias_table_simple``, ``resize_rel_pos_bias_table_levit`` (run),
  transformers ``BeitRelativePositionBias.forward`` (run).
* ``resample(..., align_corners=True)``: ``torch.nn.functional.interpolate`` (run).
* Per-image interpolation (``resample_grids``): transformers
  ``vision_utils.get_vision_interpolation_indices_and_weights`` as Qwen3.5's vision tower
  calls it (run), timm NaFlex ``_apply_learned_naflex_pos_embed`` (``naflexvit.py``
  L642-696, restated with ``F.interpolate``).
* NaFlex patch coordinates (``patch_coords``): timm ``patchify_image`` (``naflex_transforms.py``
  L794-798) and the NaFlex collate (``naflex_dataset.py`` L135-144), restated.
* DINOv3 coordinate augmentation (``CoordAugmentation``, ``coord_augmentation``,
  ``augment_coords``): transformers ``dinov3_vit`` / ``eomt_dinov3``
  ``augment_patches_center_coordinates`` and timm ``_apply_coord_augs`` (run, their draws
  replayed).

timm imports torchvision at ``import timm``, which cannot be installed beside the CPU torch
here: its layer files that need nothing of it (``layers/pos_embed_rel.py``,
``layers/pos_embed_sincos.py``) are loaded from the installed package under a private name,
without running ``timm/__init__.py``. Without timm those tests skip.
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys
import types

import numpy as np
import pytest

import arrpos

# timm's RegularGridInterpolator (resize_rel_pos_bias_table) warns on torch 2.13
pytestmark = [
    pytest.mark.filterwarnings("ignore:torch.searchsorted.*non-contiguous:UserWarning"),
    pytest.mark.filterwarnings("ignore:Using a non-tuple sequence:UserWarning"),
]


def _timm_layer(name):
    """``timm.layers.<name>`` from the installed timm, loaded as ``_arrpos_timm.layers.<name>``
    (its relative imports resolve to sibling files; ``timm/__init__`` is not run)."""
    spec = importlib.util.find_spec("timm")
    if spec is None or spec.origin is None:
        pytest.skip("needs timm, not installed (pip install --no-deps timm)")
    root = os.path.dirname(spec.origin)
    for pkg, path in (("_arrpos_timm", root),
                      ("_arrpos_timm.layers", os.path.join(root, "layers"))):
        if pkg not in sys.modules:
            module = types.ModuleType(pkg)
            module.__path__ = [path]
            sys.modules[pkg] = module
    pytest.importorskip("torch")
    return importlib.import_module(f"_arrpos_timm.layers.{name}")


def _tol(backend, single=1e-6):
    return 1e-12 if backend.float64 else single


# --------------------------------------------------------------------- Swin-V2 log coordinates

def swin_v2_model_coords(window, pretrained=(0, 0)):
    """timm ``swin_transformer_v2.py`` L188-205 (``_make_pair_wise_relative_positions``), in
    float64: offsets divided by ``max(p - 1, 1)`` (``p`` the pretrained window when > 0),
    times 8, then ``sign(x) log2(|x| + 1) / log2(8)``."""
    h = np.arange(-(window[0] - 1), window[0], dtype=np.float64)
    w = np.arange(-(window[1] - 1), window[1], dtype=np.float64)
    table = np.stack(np.meshgrid(h, w, indexing="ij"), axis=-1)
    norm = pretrained if pretrained[0] > 0 else window
    table[..., 0] /= max(norm[0] - 1, 1)
    table[..., 1] /= max(norm[1] - 1, 1)
    table *= 8
    return np.sign(table) * np.log2(np.abs(table) + 1.0) / math.log2(8)


CASES = [((7, 7), None), ((8, 8), (12, 12)), ((3, 5), None), ((16, 16), (8, 8)), ((12, 6), (7, 7))]


@pytest.mark.parametrize("window, pretrained", CASES)
def test_log_coords_timm(backend, window, pretrained):
    rel = _timm_layer("pos_embed_rel")
    ref = rel.gen_relative_log_coords(window, pretrained or (0, 0), mode="swin").numpy()
    got = arrpos.log_relative_coords(window, pretrained_window=pretrained, dtype="float32",
                                     xp=backend.module)
    # timm rounds in float32 four times (divide, * 8, log2, / log2 8): within 2 float32 ulps
    np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=2.5e-7, atol=1e-7)
    ref = rel.gen_relative_log_coords(window, mode="cr").numpy()
    got = arrpos.log_relative_coords(window, mode="cr", dtype="float32", xp=backend.module)
    np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=2.5e-7, atol=1e-7)


@pytest.mark.parametrize("window, pretrained", CASES)
def test_log_coords_transformers(window, pretrained):
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.swinv2.modeling_swinv2 import Swinv2SelfAttention

    att = Swinv2SelfAttention(transformers.Swinv2Config(), 32, 2, window,
                              pretrained_window_size=list(pretrained or (0, 0)))
    ref = att.relative_coords_table[0].numpy()
    got = arrpos.log_relative_coords(window, pretrained_window=pretrained, dtype="float32")
    np.testing.assert_allclose(got, ref, rtol=2.5e-7, atol=1e-7)
    # the index the model gathers its MLP output with: relative_index_nd's rows
    np.testing.assert_array_equal(att.relative_position_index.numpy(),
                                  arrpos.relative_index_nd(window))


@pytest.mark.parametrize("window, pretrained", CASES + [((1, 1), None), ((1, 7), None),
                                                        ((5, 5), (1, 1))])
def test_log_coords_float64(backend, window, pretrained):
    """The float64 restatement of timm's model (``max(n - 1, 1)``: windows and pretrained
    windows of size 1 included)."""
    if not backend.float64:
        pytest.skip("no float64 on this backend")
    got = arrpos.log_relative_coords(window, pretrained_window=pretrained, dtype="float64",
                                     xp=backend.module)
    want = swin_v2_model_coords(window, pretrained or (0, 0))
    np.testing.assert_allclose(backend.to_numpy(got), want, rtol=1e-15, atol=1e-15)


def test_log_coords_rows_follow_relative_index():
    """Row ``relative_index_nd(w)[a, b]`` of the flattened table holds the coordinates of the
    offset ``c(a) - c(b)``, in any number of axes."""
    for window in [(3, 4), (2, 3, 2)]:
        table = arrpos.log_relative_coords(window, mode="cr").reshape(-1, len(window))
        index = arrpos.relative_index_nd(window)
        tokens = np.stack(np.unravel_index(np.arange(math.prod(window)), window), axis=-1)
        offsets = tokens[:, None, :] - tokens[None, :, :]
        np.testing.assert_allclose(table[index], np.sign(offsets) * np.log1p(abs(offsets)))


def test_log_coords_errors():
    with pytest.raises(TypeError, match="window"):
        arrpos.log_relative_coords(7)
    with pytest.raises(ValueError, match="window"):
        arrpos.log_relative_coords((0, 3))
    with pytest.raises(ValueError, match="pretrained_window"):
        arrpos.log_relative_coords((3, 3), pretrained_window=(4,))
    with pytest.raises(ValueError, match="pretrained_window"):
        arrpos.log_relative_coords((3, 3), pretrained_window=(4, 4), mode="cr")
    with pytest.raises(ValueError, match="mode"):
        arrpos.log_relative_coords((3, 3), mode="log")
    with pytest.raises(TypeError, match="dtype"):
        arrpos.log_relative_coords((3, 3), dtype="int32")


# --------------------------------------------------------------------- relative table resize

RESIZE = [((7, 7), (12, 12), 3), ((12, 12), (7, 7), 0), ((7, 7), (7, 9), 0),
          ((8, 8), (16, 16), 3), ((5, 3), (9, 6), 0)]


@pytest.mark.parametrize("old, new, extra", RESIZE)
def test_resize_geometric_timm(backend, old, new, extra):
    torch = pytest.importorskip("torch")
    rel = _timm_layer("pos_embed_rel")
    rows = (2 * old[0] - 1) * (2 * old[1] - 1) + extra
    table = np.random.default_rng(sum(old) + extra).normal(size=(rows, 4)).astype(np.float32)
    shape = ((2 * new[0] - 1) * (2 * new[1] - 1) + extra, 4)
    ref = rel.resize_rel_pos_bias_table(torch.from_numpy(table), new, shape,
                                        old_window_size=old).numpy()
    got = arrpos.resize_relative_table(backend.asarray(table), new, old_window=old,
                                       extra_tokens=extra, method="geometric")
    # timm weighs the corners with float32 distance products: within float32 rounding
    np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=0, atol=1e-6 * abs(table).max())


@pytest.mark.parametrize("old, new, extra", [c for c in RESIZE if c[0][0] == c[0][1]])
def test_resize_simple_timm(backend, old, new, extra):
    torch = pytest.importorskip("torch")
    rel = _timm_layer("pos_embed_rel")
    rows = (2 * old[0] - 1) ** 2 + extra
    for dt in (np.float32, np.float64):
        if dt == np.float64 and not backend.float64:
            continue
        table = np.random.default_rng(old[0]).normal(size=(rows, 3)).astype(dt)
        shape = ((2 * new[0] - 1) * (2 * new[1] - 1) + extra, 3)
        ref = rel.resize_rel_pos_bias_table_simple(torch.from_numpy(table), new, shape).numpy()
        got = arrpos.resize_relative_table(backend.asarray(table), new, extra_tokens=extra)
        tol = 1e-12 if dt == np.float64 else 1e-6
        np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=0,
                                   atol=tol * abs(table).max())


def test_resize_levit_timm(backend):
    """timm's levit variant: a square (L, heads) table through bicubic with antialias, which is
    ``resample(..., method="cubic", antialias=True)``."""
    torch = pytest.importorskip("torch")
    rel = _timm_layer("pos_embed_rel")
    for s1, s2 in [(7, 14), (14, 7), (16, 9)]:
        table = np.random.default_rng(s1).normal(size=(s1 * s1, 4)).astype(np.float32)
        ref = rel.resize_rel_pos_bias_table_levit(torch.from_numpy(table), (s2 * s2, 4)).numpy()
        got = arrpos.resample(backend.asarray(table), (s2, s2), method="cubic", antialias=True)
        np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=0, atol=1e-6 * 4)


@pytest.mark.parametrize("old, new", [((7, 7), (12, 12)), ((14, 14), (8, 8)), ((6, 6), (6, 6))])
def test_resize_beit_transformers(old, new):
    """transformers' BEiT: the (old) table resized to the new window's offsets by bilinear
    interpolation, its three class-token rows appended, gathered with BEiT's bordered index."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.beit.modeling_beit import BeitRelativePositionBias

    config = transformers.BeitConfig(image_size=old[0] * 16, patch_size=16, num_attention_heads=3)
    module = BeitRelativePositionBias(config)
    shape = tuple(module.relative_position_bias_table.shape)
    table = np.random.default_rng(old[0]).normal(size=shape)
    with torch.no_grad():
        module.relative_position_bias_table.copy_(torch.from_numpy(table))
        ref = module(new, interpolate_pos_encoding=False)[0].numpy()
    resized = arrpos.resize_relative_table(table.astype(np.float32), new, extra_tokens=3,
                                           method="linear")
    n = math.prod(new)
    rows = (2 * new[0] - 1) * (2 * new[1] - 1)
    index = np.zeros((n + 1, n + 1), dtype=np.int64)
    index[1:, 1:] = arrpos.relative_index_nd(new)
    index[0, :], index[:, 0], index[0, 0] = rows, rows + 1, rows + 2
    got = arrpos.relative_bias(resized, index)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6 * abs(table).max())


def test_resize_3d_and_identity(backend):
    """Any number of window axes (Video Swin); an unchanged window returns the table."""
    table = np.random.default_rng(0).normal(size=(5 * 5 * 5 + 2, 2))
    if not backend.float64:
        table = table.astype(np.float32)
    same = arrpos.resize_relative_table(backend.asarray(table), (3, 3, 3), extra_tokens=2)
    np.testing.assert_array_equal(backend.to_numpy(same), table)
    for method in ("linear", "cubic", "geometric"):
        out = arrpos.resize_relative_table(backend.asarray(table), (4, 2, 3), extra_tokens=2,
                                           method=method)
        assert tuple(out.shape) == (7 * 3 * 5 + 2, 2)
        np.testing.assert_array_equal(backend.to_numpy(out)[-2:], table[-2:])


def test_resize_errors():
    table = np.zeros((13 * 13, 2))
    with pytest.raises(TypeError, match="window"):
        arrpos.resize_relative_table(table, 12)
    with pytest.raises(ValueError, match="old_window"):
        arrpos.resize_relative_table(np.zeros((12 * 12, 2)), (5, 5))
    with pytest.raises(ValueError, match="old_window"):
        arrpos.resize_relative_table(table, (5, 5), old_window=(6, 6))
    with pytest.raises(ValueError, match="method"):
        arrpos.resize_relative_table(table, (5, 5), method="nearest")
    with pytest.raises(ValueError, match="antialias"):
        arrpos.resize_relative_table(table, (5, 5), method="geometric", antialias=True)
    with pytest.raises(ValueError, match="extra_tokens"):
        arrpos.resize_relative_table(table, (5, 5), extra_tokens=169)
    with pytest.raises(TypeError, match="table"):
        arrpos.resize_relative_table(np.zeros((169, 2), dtype=np.int64), (5, 5))


# --------------------------------------------------------------------- resample, align_corners

@pytest.mark.parametrize("old, new", [((6, 6), (4, 9)), ((5, 7), (13, 3)), ((8, 8), (1, 5)),
                                      ((16, 16), (37, 11))])
def test_resample_align_corners_torch(backend, old, new):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    for dt in (np.float32, np.float64):
        if dt == np.float64 and not backend.float64:
            continue
        table = np.random.default_rng(sum(old)).normal(size=(math.prod(old), 5)).astype(dt)
        img = torch.from_numpy(table.T.reshape(1, 5, *old).copy())
        for mode, method in (("bilinear", "linear"), ("bicubic", "cubic")):
            for antialias in (False, True):
                ref = F.interpolate(img, size=new, mode=mode, align_corners=True,
                                    antialias=antialias)[0].reshape(5, -1).T.numpy()
                got = arrpos.resample(backend.asarray(table), new, old_size=old, method=method,
                                      antialias=antialias, align_corners=True)
                tol = 1e-12 if dt == np.float64 else 1e-6
                np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=0,
                                           atol=tol * max(1.0, abs(ref).max()))


def test_resample_align_corners_1d(backend):
    torch = pytest.importorskip("torch")
    table = np.random.default_rng(3).normal(size=(9, 2))
    if not backend.float64:
        table = table.astype(np.float32)
    ref = torch.nn.functional.interpolate(torch.from_numpy(table.T[None].copy()), size=4,
                                          mode="linear", align_corners=True)[0].T.numpy()
    got = arrpos.resample(backend.asarray(table), 4, align_corners=True)
    np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=0, atol=_tol(backend))
    with pytest.raises(TypeError, match="align_corners"):
        arrpos.resample(backend.asarray(table), 4, align_corners=1)


# --------------------------------------------------------------------- per-image resampling

GRID_THW = [[1, 4, 6], [2, 8, 4], [1, 2, 2], [3, 10, 12], [1, 6, 6]]


@pytest.mark.parametrize("mode, method", [("bilinear", "linear"), ("bicubic", "cubic")])
@pytest.mark.parametrize("align_corners", [True, False])
def test_resample_grids_transformers(backend, mode, method, align_corners):
    """Qwen3.5's vision tower: ``get_vision_interpolation_indices_and_weights(grid_thw, side,
    mode="bilinear", align_corners=True, spatial_merge_size=2)`` then
    ``(pos_embed(indices) * weights[:, :, None]).sum(1)`` (``qwen3_5/modeling_qwen3_5.py``
    L1156-1177). transformers forms the weights in float32 (one rounding fewer than torch's
    ``interpolate``), so the two agree to float32 rounding."""
    torch = pytest.importorskip("torch")
    vision_utils = pytest.importorskip("transformers.vision_utils")
    side = 6
    table = np.random.default_rng(1).normal(size=(side * side, 4))
    grid = torch.tensor(GRID_THW)
    idx, w = vision_utils.get_vision_interpolation_indices_and_weights(
        grid, side, mode=mode, align_corners=align_corners, spatial_merge_size=2)
    ref = (torch.from_numpy(table)[idx] * w[:, :, None].double()).sum(1).numpy()
    t = table if backend.float64 else table.astype(np.float32)
    got = arrpos.resample_grids(backend.asarray(t), backend.asarray(np.array(GRID_THW)),
                                method=method, align_corners=align_corners, merge_size=2)
    assert tuple(got.shape) == ref.shape
    np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=0, atol=2e-6 * abs(table).max())


def naflex_learned_pos_embed(pos_embed, sizes, seq_len, *, ar_preserving, mode, align_corners,
                             antialias):
    """timm ``naflexvit.py`` L642-696 (``NaFlexEmbeds._apply_learned_naflex_pos_embed``), its
    embedding part: per grid size ``(h, w)`` the ``(H, W, C)`` table through ``F.interpolate``
    (to ``(max(h, w),) * 2`` when ``ar_preserving``), cropped to ``[:h, :w]``, flattened
    row-major and added to the first ``min(seq_len, h * w)`` patches; the rest get nothing."""
    import torch

    nchw = torch.from_numpy(pos_embed).permute(2, 0, 1)[None]
    out = torch.zeros(len(sizes), seq_len, pos_embed.shape[-1], dtype=nchw.dtype)
    for b, (h, w) in enumerate(sizes):
        if (h, w) == tuple(pos_embed.shape[:2]):
            flat = nchw[0].reshape(pos_embed.shape[-1], -1).T
        else:
            size = (max(h, w),) * 2 if ar_preserving else (h, w)
            flat = torch.nn.functional.interpolate(
                nchw, size=size, mode=mode, align_corners=align_corners,
                antialias=antialias)[:, :, :h, :w].flatten(2).transpose(1, 2)[0]
        n = min(seq_len, h * w)
        out[b, :n] = flat[:n]
    return out.numpy()


@pytest.mark.parametrize("ar_preserving", [False, True])
@pytest.mark.parametrize("mode, method", [("bilinear", "linear"), ("bicubic", "cubic")])
@pytest.mark.parametrize("align_corners, antialias", [(False, False), (False, True), (True, False)])
def test_resample_grids_naflex(backend, ar_preserving, mode, method, align_corners, antialias):
    pytest.importorskip("torch")
    H, W, C = 8, 8, 3
    pos_embed = np.random.default_rng(2).normal(size=(H, W, C))
    if not backend.float64:
        pos_embed = pos_embed.astype(np.float32)
    sizes = [(4, 9), (8, 8), (3, 3), (12, 5), (4, 9)]
    ref = naflex_learned_pos_embed(pos_embed, sizes, 64, ar_preserving=ar_preserving, mode=mode,
                                   align_corners=align_corners, antialias=antialias)
    got = arrpos.resample_grids(backend.asarray(pos_embed.reshape(H * W, C)), sizes, pad_to=64,
                                method=method, align_corners=align_corners,
                                antialias=antialias, preserve_aspect=ar_preserving)
    np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=0,
                               atol=_tol(backend, 2e-6) * abs(pos_embed).max())


def test_resample_grids_equals_resample(backend):
    """Each image's rows are ``resample(table, (h, w))`` (merge order: vision_position_ids'
    coordinates index them), frames repeated."""
    table = np.random.default_rng(4).normal(size=(5 * 7, 2))
    if not backend.float64:
        table = table.astype(np.float32)
    grids = np.array([[2, 4, 6], [1, 2, 2]])
    got = backend.to_numpy(arrpos.resample_grids(backend.asarray(table), backend.asarray(grids),
                                                 old_size=(5, 7), merge_size=2))
    coords = arrpos.vision_position_ids(grids, spatial_merge_size=2)
    start = 0
    for t, h, w in grids:
        full = backend.to_numpy(arrpos.resample(backend.asarray(table), (int(h), int(w)),
                                                old_size=(5, 7)))
        rows = coords[start:start + t * h * w]
        np.testing.assert_array_equal(got[start:start + t * h * w],
                                      full[rows[:, 0] * w + rows[:, 1]])
        start += t * h * w


def test_resample_grids_gradient():
    torch = pytest.importorskip("torch")
    table = torch.randn(16, 3, dtype=torch.float64, requires_grad=True)
    out = arrpos.resample_grids(table, torch.tensor([[3, 5], [2, 2]]), pad_to=15)
    out.sum().backward()
    assert table.grad is not None and table.grad.shape == (16, 3)


def test_resample_grids_errors():
    table = np.zeros((16, 2))
    with pytest.raises(TypeError, match="grids"):
        arrpos.resample_grids(table, np.array([[2.0, 2.0]]))
    with pytest.raises(ValueError, match="grids"):
        arrpos.resample_grids(table, np.array([[2, 2, 2, 2]]))
    with pytest.raises(ValueError, match="grids"):
        arrpos.resample_grids(table, np.array([[0, 2]]))
    with pytest.raises(ValueError, match="merge_size"):
        arrpos.resample_grids(table, np.array([[1, 3, 4]]), merge_size=2)
    with pytest.raises(ValueError, match="pad_to"):
        arrpos.resample_grids(table, np.array([[3, 3]]), pad_to=8)
    with pytest.raises(ValueError, match="old_size"):
        arrpos.resample_grids(np.zeros((15, 2)), np.array([[3, 3]]))
    with pytest.raises(ValueError, match="table"):
        arrpos.resample_grids(np.zeros((2, 16, 2)), np.array([[3, 3]]))
    with pytest.raises(TypeError, match="grids"):
        arrpos.resample_grids(table, 3)


# --------------------------------------------------------------------- NaFlex patch coordinates

def naflex_patch_batch(sizes, max_patches):
    """timm ``naflex_transforms.py`` L794-798 (``patchify_image``: ``(y, x)`` by
    ``meshgrid(arange(nh), arange(nw), indexing='ij')``, all valid) and the NaFlex collate,
    ``naflex_dataset.py`` L135-144 (zeros and False past each image's patches)."""
    coord = np.zeros((len(sizes), max_patches, 2), dtype=np.int64)
    valid = np.zeros((len(sizes), max_patches), dtype=bool)
    for i, (h, w) in enumerate(sizes):
        y, x = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        coord[i, :h * w] = np.stack([y.reshape(-1), x.reshape(-1)], axis=1)
        valid[i, :h * w] = True
    return coord, valid


def test_patch_coords_naflex(backend):
    sizes = [(4, 9), (2, 2), (7, 5)]
    coord, valid = naflex_patch_batch(sizes, 40)
    got, ok = arrpos.patch_coords(backend.asarray(np.array(sizes)), pad_to=40)
    np.testing.assert_array_equal(backend.to_numpy(got)[..., ::-1], coord)
    np.testing.assert_array_equal(backend.to_numpy(ok), valid)
    # timm's calculate_naflex_grid_sizes (naflexvit.py L218-222): max + 1 per axis
    sizes_back = backend.to_numpy(got).max(axis=1)[:, ::-1] + 1
    np.testing.assert_array_equal(sizes_back, np.array(sizes))


def test_patch_coords_modes(backend):
    sizes = [(3, 5), (1, 4)]
    got, ok = arrpos.patch_coords(sizes, mode="center", xp=backend.module)
    got = backend.to_numpy(got)
    for b, (h, w) in enumerate(sizes):
        ref = arrpos.grid_coords((h, w), mode="center").reshape(h * w, 2)
        np.testing.assert_allclose(got[b, :h * w], ref, rtol=0, atol=6e-8)  # torch: float32
        assert not got[b, h * w:].any()
    assert backend.to_numpy(ok).sum() == 15 + 4


@pytest.mark.parametrize("in_pixels, mode", [(False, "index"), (True, "linspace")])
def test_patch_coords_naflex_rope(backend, in_pixels, mode):
    """NaFlex's per-sample axial RoPE: timm ``RotaryEmbeddingCat.get_batch_embeds(shapes,
    seq_len)`` (``pos_embed_sincos.py``, padded ``[sin | cos]`` per grid: an index grid, or a
    ``linspace(-1, 1)`` pixel grid per sample) is ``rope_cos_sin`` of ``patch_coords``
    ((y, x): reversed) with timm's bands, y on the first half of the pairs, masked by
    ``valid``."""
    pytest.importorskip("torch")
    sincos = _timm_layer("pos_embed_sincos")
    dim, sizes, seq_len = 32, [(4, 9), (3, 3), (6, 5)], 40
    rope = sincos.RotaryEmbeddingCat(dim, in_pixels=in_pixels, max_res=64, temperature=100.0)
    ref = rope.get_batch_embeds(sizes, seq_len=seq_len).numpy()
    bands = rope.bands.double().numpy()
    n = len(bands)
    coords, valid = arrpos.patch_coords(sizes, pad_to=seq_len, mode=mode, xp=backend.module,
                                        dtype="float64" if backend.float64 else "float32")
    yx = backend.xp.stack([coords[..., 1], coords[..., 0]], axis=-1)
    cos, sin = arrpos.rope_cos_sin(yx, _floats(backend, np.concatenate([bands, bands])),
                                   axes=(0,) * n + (1,) * n, layout="interleaved")
    got = np.concatenate([backend.to_numpy(sin), backend.to_numpy(cos)], -1)
    got = got * backend.to_numpy(valid)[..., None]
    top = float(abs(bands).max()) * max(max(h, w) for h, w in sizes)   # timm: float32 angles
    np.testing.assert_allclose(got, ref, rtol=0, atol=1.2e-7 * top + 2e-7)


def _floats(backend, a):
    return backend.asarray(a if backend.float64 else np.asarray(a, dtype=np.float32))


def test_patch_coords_errors():
    with pytest.raises(ValueError, match="pad_to"):
        arrpos.patch_coords([(3, 3)], pad_to=8)
    with pytest.raises(ValueError, match="grids"):
        arrpos.patch_coords([(3, 3, 1)])
    with pytest.raises(ValueError, match="mode"):
        arrpos.patch_coords([(3, 3)], mode="pixel")
    with pytest.raises(TypeError, match="grids"):
        arrpos.patch_coords(np.array([[3.0, 3.0]]))


# --------------------------------------------------------------------- DINOv3 augmentation

def _torch_draws(torch, seed, dtype, n, shift, jitter, rescale):
    """The values ``augment_patches_center_coordinates`` draws after ``manual_seed(seed)``:
    the same calls on the same generator, in its order (dinov3_vit L130-148)."""
    torch.manual_seed(seed)
    out = {}
    if shift is not None:
        out["shift"] = tuple(torch.empty((1, n), dtype=dtype).uniform_(-shift, shift)[0].tolist())
    if jitter is not None:
        top = np.log(jitter)
        draw = torch.empty((1, n), dtype=dtype).uniform_(-top, top).exp()
        out["jitter"] = tuple(draw[0].tolist())
    if rescale is not None:
        top = np.log(rescale)
        out["rescale"] = torch.empty(1, dtype=dtype).uniform_(-top, top).exp().item()
    return out


@pytest.mark.parametrize("model", ["dinov3_vit", "eomt_dinov3"])
@pytest.mark.parametrize("shift, jitter, rescale", [(0.1, None, 2.0), (None, 1.5, None),
                                                    (0.3, 1.2, 1.7), (None, None, None)])
def test_augmentation_transformers(model, shift, jitter, rescale):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    peer = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    for dtype in (torch.float64, torch.float32):
        coords = peer.get_patches_center_coordinates(5, 7, dtype=dtype, device="cpu")
        torch.manual_seed(11)
        ref = peer.augment_patches_center_coordinates(coords, shift=shift, jitter=jitter,
                                                      rescale=rescale)
        aug = arrpos.CoordAugmentation(**_torch_draws(torch, 11, dtype, 2, shift, jitter,
                                                      rescale))
        got = aug(coords.numpy())
        if dtype == torch.float64:  # the same operations in the same order: bit for bit
            np.testing.assert_array_equal(got, ref.numpy())
        else:  # the peer rounds after each step, arrpos once
            np.testing.assert_allclose(got, ref.numpy(), rtol=4e-7, atol=1e-7)


def test_augmentation_timm(backend):
    torch = pytest.importorskip("torch")
    sincos = _timm_layer("pos_embed_sincos")
    coords = arrpos.grid_coords((4, 6), mode="center", dtype="float64").reshape(-1, 2)[:, ::-1]
    coords = np.ascontiguousarray(coords)
    torch.manual_seed(5)
    ref = sincos._apply_coord_augs(torch.from_numpy(coords), 0.2, 1.3, 2.0).numpy()
    aug = arrpos.CoordAugmentation(**_torch_draws(torch, 5, torch.float64, 2, 0.2, 1.3, 2.0))
    t = coords if backend.float64 else coords.astype(np.float32)
    got = backend.to_numpy(aug(backend.asarray(t)))
    np.testing.assert_allclose(got, ref, rtol=_tol(backend, 3e-7), atol=_tol(backend, 1e-7))


def test_augmentation_seeded(backend):
    """The same seed, the same augmentation on every backend; draws within their ranges; the
    draw order of DINOv3 (shift, jitter, rescale) read from one NumPy generator."""
    g = arrpos.grid_coords((3, 4), mode="center", xp=backend.module)
    a = backend.to_numpy(arrpos.augment_coords(g, shift=0.1, jitter=1.5, rescale=2.0, seed=3))
    b = backend.to_numpy(arrpos.augment_coords(g, shift=0.1, jitter=1.5, rescale=2.0, seed=3))
    np.testing.assert_array_equal(a, b)
    aug = arrpos.coord_augmentation(2, shift=0.1, jitter=1.5, rescale=2.0, seed=3)
    u = np.random.default_rng(3).random(5)
    np.testing.assert_allclose(aug.shift, -0.1 + 0.2 * u[:2], rtol=1e-15)
    np.testing.assert_allclose(np.log(aug.jitter), np.log(1.5) * (2 * u[2:4] - 1), rtol=1e-12)
    np.testing.assert_allclose(np.log(aug.rescale), np.log(2.0) * (2 * u[4] - 1), rtol=1e-12)
    host = arrpos.grid_coords((3, 4), mode="center")
    tol = 1e-12 if a.dtype == np.float64 else 3e-7  # torch's default float is float32
    np.testing.assert_allclose(a, (host + aug.shift) * aug.jitter * aug.rescale, rtol=tol,
                               atol=tol)
    np.testing.assert_array_equal(backend.to_numpy(arrpos.augment_coords(g, seed=1)),
                                  backend.to_numpy(g))


def test_augmentation_errors():
    g = np.zeros((4, 2))
    with pytest.raises(ValueError, match="shift"):
        arrpos.augment_coords(g, shift=-0.1)
    with pytest.raises(ValueError, match="jitter"):
        arrpos.augment_coords(g, jitter=0.5)
    with pytest.raises(ValueError, match="rescale"):
        arrpos.augment_coords(g, rescale=math.inf)
    with pytest.raises(TypeError, match="seed"):
        arrpos.augment_coords(g, rescale=2.0, seed=1.5)
    with pytest.raises(ValueError, match="coords"):
        arrpos.CoordAugmentation(shift=(0.1, 0.2, 0.3))(g)
    with pytest.raises(ValueError, match="shift and jitter"):
        arrpos.CoordAugmentation(shift=(0.1, 0.2), jitter=(1.0,))
    with pytest.raises(ValueError, match="jitter"):
        arrpos.CoordAugmentation(jitter=(0.0, 1.0))
    with pytest.raises(TypeError, match="coords"):
        arrpos.augment_coords([[0.0, 0.0]], rescale=2.0)
