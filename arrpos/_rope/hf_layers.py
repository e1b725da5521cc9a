"""Per-layer plans of transformers models: which rotary each decoder layer applies and which
position scale its queries get.

``hf_layer_ropes(config)`` lists, layer by layer, the :class:`RoPE` a model's attention applies
(``None`` on its NoPE layers); ``hf_layer_query_scales(config)`` the :class:`PositionScale` of
each layer's queries. Which model has NoPE layers or scales its queries is read off
transformers' modeling files (``tools/generate_hf_models.py`` records it per model type).
"""
from __future__ import annotations

from collections.abc import Mapping

from .._lib import check_positive_int
from .hf_config import Refusal, query_scale_of, resolve, standard_rope_parameters
from .hf_models import MODELS
from .layer import RoPE
from .position_scales import PositionScale
from ..typing import Config

__all__ = ["hf_layer_query_scales", "hf_layer_ropes"]

# --- what a config asks for ------------------------------------------------------------------

_MAX_LAYERS = 1 << 16  # more decoder layers than any model has: a malformed config


def _layer_types(model_type, config, n_layers):
    types = config.get("layer_types")
    if types is not None:
        if len(types) < n_layers:
            raise Refusal(f"layer_types lists {len(types)} layers, num_hidden_layers is "
                          f"{n_layers}")
        return list(types[:n_layers])
    rule = _DERIVED_LAYER_TYPES.get(model_type)
    if rule is None:
        return [None] * n_layers
    key, default, full_when = rule
    period = config.get(key, default) if key else default
    return ["full_attention" if full_when(i, period) else "sliding_attention"
            for i in range(n_layers)]


# config classes whose __post_init__ derives layer_types from a period when the file lists none:
# model type -> (the key of the period, its default, whether layer i is a full-attention layer)
def _every_nth(i, n):
    return (i + 1) % n == 0


_DERIVED_LAYER_TYPES = {
    **dict.fromkeys(("gemma3_text", "t5gemma2_text", "t5gemma2_encoder", "t5gemma2_decoder"),
                    ("sliding_window_pattern", 6, _every_nth)),
    "cohere2": ("sliding_window_pattern", 4, _every_nth),
    "gemma3n_text": (None, 5, _every_nth),
    "olmo3": (None, 4, _every_nth),
    "gpt_oss": (None, 2, _every_nth),
    "modernbert": ("global_attn_every_n_layers", 3, lambda i, n: i % n == 0),
}


def _rope_layers(model_type, config, n_layers):
    """Per layer: whether it applies a rotary (NoPE layers do not)."""
    if not MODELS.get(model_type, {}).get("nope_layers"):
        return [True] * n_layers
    flags = config.get("no_rope_layers")
    if flags is None:  # Llama 4, SmolLM3, Mistral Large 4: every n-th layer is NoPE
        interval = check_positive_int(config.get("no_rope_layer_interval", 4),
                                      "no_rope_layer_interval")
        flags = [int((i + 1) % interval != 0) for i in range(n_layers)]
    if len(flags) < n_layers:
        raise Refusal(f"no_rope_layers lists {len(flags)} layers, num_hidden_layers is "
                      f"{n_layers}")
    return [bool(f) for f in flags[:n_layers]]


def hf_layer_ropes(config: Config, /) -> list[RoPE | None]:
    """The rotary of every decoder layer of a transformers model, from its ``config.json``.

    Parameters
    ----------
    config : dict or transformers ``PretrainedConfig``
        The parsed ``config.json`` (a composite config's text model is used, as by
        :meth:`RoPE.from_hf_config`).

    Returns
    -------
    list
        ``num_hidden_layers`` entries: the :class:`RoPE` layer ``i`` applies (as
        ``RoPE.from_hf_config(config, layer_type=...)`` for its layer type; layers of one type
        share one object), or ``None`` for a layer that applies no rotary embedding (Llama 4's
        and SmolLM3's NoPE layers, ``no_rope_layers``). Each RoPE's ``query_scale`` and
        ``attention_scale`` are the layer's own (a NoPE layer's temperature tuning is
        :func:`hf_layer_query_scales`).

    Raises
    ------
    ValueError
        What ``RoPE.from_hf_config`` refuses; a config without ``num_hidden_layers``.

    Examples
    --------
    >>> import arrpos
    >>> cfg = {"model_type": "smollm3", "hidden_size": 256, "num_attention_heads": 4,
    ...        "num_hidden_layers": 8, "rope_theta": 2e6}
    >>> [r is None for r in arrpos.hf_layer_ropes(cfg)]
    [False, False, False, True, False, False, False, True]
    """
    model_type, resolved = resolve(config)
    name = model_type or "config without model_type"
    try:
        n_layers = check_positive_int(resolved.get("num_hidden_layers"), "num_hidden_layers",
                                      maximum=_MAX_LAYERS)
        uses_rope = _rope_layers(model_type, resolved, n_layers)
        nested = None not in standard_rope_parameters(model_type, resolved)
        types = _layer_types(model_type, resolved, n_layers) if nested else [None] * n_layers
    except (TypeError, ValueError) as e:
        raise Refusal(f"{name}: {e}") from None
    by_type = {}
    out: list[RoPE | None] = []
    for flag, layer_type in zip(uses_rope, types):
        if not flag:
            out.append(None)
            continue
        if nested and layer_type is None:
            raise Refusal(f"{name}: rope_parameters are per layer type but the config does not "
                          "say which layer is which (no layer_types)")
        if layer_type not in by_type:
            by_type[layer_type] = RoPE.from_hf_config(config, layer_type=layer_type)
        out.append(by_type[layer_type])
    return out


def hf_layer_query_scales(config: Config, /) -> list[PositionScale | None]:
    """Per decoder layer, the :class:`PositionScale` its queries get (None: none): Llama 4's
    temperature tuning on NoPE layers, Ministral 3 / Mistral 4's ``llama_4_scaling_beta`` on
    every layer. The rotary layers' entries are their ``RoPE.query_scale``.

    Examples
    --------
    >>> import arrpos
    >>> cfg = {"model_type": "llama4_text", "hidden_size": 256, "num_attention_heads": 4,
    ...        "num_hidden_layers": 4, "rope_theta": 5e5}
    >>> [s is not None for s in arrpos.hf_layer_query_scales(cfg)]
    [False, False, False, True]
    """
    model_type, resolved = resolve(config)
    name = model_type or "config without model_type"
    try:
        n_layers = check_positive_int(resolved.get("num_hidden_layers"), "num_hidden_layers",
                                      maximum=_MAX_LAYERS)
        uses_rope = _rope_layers(model_type, resolved, n_layers)
        layers = standard_rope_parameters(model_type, resolved)
        types = _layer_types(model_type, resolved, n_layers) if None not in layers else (
            [None] * n_layers)
        out = []
        for flag, layer_type in zip(uses_rope, types):
            params = layers.get(layer_type) if isinstance(layers, Mapping) else None
            out.append(query_scale_of(model_type, resolved, params, flag)[0])
        return out
    except (TypeError, KeyError, ValueError) as e:
        raise Refusal(f"{name}: {e}") from None
