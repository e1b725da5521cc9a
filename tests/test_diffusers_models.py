"""Every diffusers transformer with a rotary or sincos position embedding:
``from_diffusers_config`` reproduces the model's own ids, tables and apply function, or refuses
by name for a reason listed in ``NOT_REPRODUCED``.

The check is in ``tests/diffusers_models.py`` (also a survey script, whose table
``docs/diffusers.md`` holds); the references in ``tests/diffusers_references.py``. Default
configs, offline, no weights: the positional modules alone, on a few tokens.
"""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import arrpos

ROOT = pathlib.Path(__file__).resolve().parent.parent


# --- the models (need torch and the pinned diffusers) -----------------------------------------

def _classes():
    import importlib.util

    if importlib.util.find_spec("diffusers") is None or importlib.util.find_spec(
            "torch") is None:
        return []
    import diffusers_models

    return list(diffusers_models.model_names())  # read from the sources: no import here


CLASSES = _classes()
needs_diffusers = pytest.mark.skipif(not CLASSES, reason="needs torch and diffusers")


@pytest.fixture(scope="module")
def survey():
    import diffusers_models

    return {name: (status, detail) for name, status, detail in diffusers_models.survey()}


@needs_diffusers
@pytest.mark.parametrize("name", CLASSES)
def test_model(name, survey):
    """Reproduced, refused for the listed reason, or no encoding: never a silent mismatch, and
    the list of refusals never stale."""
    import diffusers_models

    status, detail = survey[name]
    assert status in ("reproduced", "refused", "none"), detail
    if status == "refused":
        assert name in diffusers_models.NOT_REPRODUCED, f"refused but not listed: {detail}"
    else:
        assert name not in diffusers_models.NOT_REPRODUCED, f"{name} is {status}: unlist it"


@needs_diffusers
def test_the_walk_finds_every_model():
    """The source walk that parametrises the tests finds what importing the package finds."""
    import diffusers_models

    found = {n: p for n, (_, p) in diffusers_models.model_classes().items()}
    assert found == {n: p for n, (_, p) in diffusers_models.model_names().items()}


@needs_diffusers
def test_enough_models_reproduced(survey):
    import diffusers
    import diffusers_models

    if not diffusers.__version__.startswith(diffusers_models.PINNED):
        pytest.skip(f"counted on diffusers {diffusers_models.PINNED}x")
    counted = [s for s, _ in survey.values() if s != "none"]
    assert counted.count("reproduced") >= 0.9 * len(counted), (counted.count("reproduced"),
                                                               len(counted))


@needs_diffusers
def test_docs_table_is_current(survey):
    """docs/diffusers.md's table is the survey's (regenerate: python tests/diffusers_models.py
    --markdown)."""
    import diffusers_models

    text = (ROOT / "docs" / "diffusers.md").read_text(encoding="utf-8")
    rows = [(n, s, diffusers_models.NOT_REPRODUCED.get(n) or d) for n, (s, d) in survey.items()]
    assert diffusers_models.markdown(rows) in text


# --- the object: backends, conventions, errors (NumPy; no diffusers needed) -------------------

FLUX = {"_class_name": "FluxTransformer2DModel"}


def test_position_ids_in_every_namespace(backend):
    wan = arrpos.from_diffusers_config({"_class_name": "WanTransformer3DModel"})
    ids = wan.position_ids(frames=2, height=3, width=4, xp=backend.module)
    assert backend.to_numpy(ids).tolist()[:2] == [[0, 0, 0], [0, 0, 1]]
    cos, sin = wan.cos_sin(ids)
    ref_cos, ref_sin = wan.cos_sin(np.asarray(backend.to_numpy(ids)), dtype=np.float64)
    atol = 1e-12 if backend.float64 else 1e-6
    np.testing.assert_allclose(backend.to_numpy(cos), ref_cos, atol=atol)
    np.testing.assert_allclose(backend.to_numpy(sin), ref_sin, atol=atol)
    q = backend.asarray(np.random.default_rng(0).normal(size=(1, 24, 2, 128)), "float32")
    got = backend.to_numpy(wan.apply(q, ids, heads_axis=-2))
    want = wan.apply(np.asarray(backend.to_numpy(q), np.float64), np.asarray(
        backend.to_numpy(ids)), heads_axis=-2)
    np.testing.assert_allclose(got, want, atol=2e-6)


def test_heads_axis_layouts_agree():
    flux = arrpos.from_diffusers_config(FLUX)
    ids = flux.position_ids(height=2, width=3, text_len=1)
    q = np.random.default_rng(1).normal(size=(7, 3, 128))
    a = flux.apply(q, ids, heads_axis=-2)
    b = flux.apply(np.swapaxes(q, 0, 1), ids, heads_axis=-3)
    np.testing.assert_allclose(a, np.swapaxes(b, 0, 1), atol=1e-12)
    np.testing.assert_allclose(flux.apply(a, ids, heads_axis=-2, inverse=True), q, atol=1e-12)


def test_fractional_ids_are_floats_and_exact():
    ltx = arrpos.from_diffusers_config({"_class_name": "LTXVideoTransformer3DModel"})
    ids = ltx.position_ids(frames=2, height=1, width=2)
    assert ids.dtype == np.float64
    np.testing.assert_array_equal(ids[-1], [8 / 25 / 20, 0.0, 32 / 2048])
    sd3 = arrpos.from_diffusers_config({"_class_name": "SD3Transformer2DModel"})
    table = sd3.table(sd3.position_ids(height=2, width=2))
    assert table.shape == (4, 1152)


def test_config_objects_and_defaults():
    class Frozen(dict):
        pass

    a = arrpos.from_diffusers_config(Frozen(FLUX))
    b = arrpos.from_diffusers_config({**FLUX, "axes_dims_rope": [16, 56, 56], "extra": 1})
    assert repr(a) == repr(b) == ("DiffusersPositions('FluxTransformer2DModel', kind='rope', "
                                  "head_dim=128, n_axes=3)")
    assert a.size_names == ("height", "width", "text_len")
    with pytest.raises(AttributeError):
        a.kind = "sincos"


@pytest.mark.parametrize("config, error, words", [
    ([("_class_name", "x")], TypeError, "config must be a mapping"),
    ({}, ValueError, "no _class_name"),
    ({"_class_name": 3}, TypeError, "_class_name"),
    ({"_class_name": "NoSuchModel"}, ValueError, "NoSuchModel is not a diffusers transformer"),
    ({"_class_name": "AuraFlowTransformer2DModel"}, ValueError, "learned"),
    ({"_class_name": "SanaTransformer2DModel"}, ValueError, "interpolation_scale is None"),
    ({**FLUX, "axes_dims_rope": [16, 56]}, ValueError, "must add up to"),
    ({**FLUX, "axes_dims_rope": "16,56,56"}, ValueError, "axes_dims_rope"),
    ({**FLUX, "attention_head_dim": 12.5}, ValueError, "attention_head_dim"),
    ({"_class_name": "OmniGenTransformer2DModel"}, ValueError, "rope_scaling"),
])
def test_bad_configs(config, error, words):
    with pytest.raises(error, match=re.escape(words)):
        arrpos.from_diffusers_config(config)


def test_bad_calls():
    flux = arrpos.from_diffusers_config(FLUX)
    sd3 = arrpos.from_diffusers_config({"_class_name": "SD3Transformer2DModel"})
    ids = flux.position_ids(height=2, width=2, text_len=0)
    with pytest.raises(TypeError, match="unexpected keyword 'frames'"):
        flux.position_ids(frames=1, height=2, width=2, text_len=0)
    with pytest.raises(TypeError, match="needs text_len"):
        flux.position_ids(height=2, width=2)
    with pytest.raises(TypeError, match="height must be an integer"):
        flux.position_ids(height=2.5, width=2, text_len=0)
    with pytest.raises(ValueError, match="width must be >= 1"):
        flux.position_ids(height=2, width=0, text_len=0)
    with pytest.raises(ValueError, match="trailing axis of 3 coordinates"):
        flux.cos_sin(ids[:, :2])
    with pytest.raises(TypeError, match="position_ids must be"):
        flux.cos_sin([[0, 0, 0]])
    with pytest.raises(ValueError, match="use .table()"):
        sd3.cos_sin(sd3.position_ids(height=2, width=2))
    with pytest.raises(ValueError, match="use .cos_sin()"):
        flux.table(ids)
    with pytest.raises(ValueError, match="at least 128 features"):
        flux.apply(np.ones((4, 2, 64)), ids, heads_axis=-2)
    with pytest.raises(TypeError, match="heads_axis"):
        flux.apply(np.ones((4, 2, 128)), ids)
    with pytest.raises(ValueError, match="pos_embed_max_size 96"):
        sd3.position_ids(height=97, width=2)


@needs_diffusers
def test_ltx2_split_rope():
    """LTX-2's ``rope_type="split"`` (not its default): each head its slice of the frequencies,
    paired half-wise, against diffusers' own rope and ``apply_split_rotary_emb``."""
    import torch
    from diffusers.models.transformers import transformer_ltx2 as m

    heads, head = 4, 32
    rope = m.LTX2AudioVideoRotaryPosEmbed(dim=heads * head, num_attention_heads=heads,
                                          rope_type="split", scale_factors=(8, 32, 32))
    coords = rope.prepare_video_coords(1, 2, 3, 4, "cpu", fps=24.0)
    cos, sin = rope(coords)  # (1, heads, N, head / 2)
    ours = arrpos.from_diffusers_config({"_class_name": "LTX2VideoTransformer3DModel",
                                         "rope_type": "split", "num_attention_heads": heads,
                                         "attention_head_dim": head})
    ids = ours.position_ids(frames=2, height=3, width=4)
    np.testing.assert_allclose(ids, coords[0].mean(-1).T.double().numpy(), atol=1e-5)
    c, s = ours.cos_sin(ids)  # (N, heads, head)
    np.testing.assert_allclose(c[..., :head // 2], cos[0].transpose(0, 1).numpy(), atol=5e-3)
    np.testing.assert_allclose(s[..., head // 2:], sin[0].transpose(0, 1).numpy(), atol=5e-3)
    x = torch.randn(1, ids.shape[0], heads * head)
    want = m.apply_split_rotary_emb(x, (cos, sin))
    got = ours.apply(x.reshape(1, -1, heads, head), torch.asarray(ids), heads_axis=-2)
    np.testing.assert_allclose(got.reshape(1, -1, heads * head).numpy(), want.numpy(), atol=2e-2)
