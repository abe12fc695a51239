"""attnlab from Python: the engine's passes as numpy arrays, and attention from anywhere in attnlab's views.

    import attnlab
    m = attnlab.Model("all-MiniLM-L6-v2")            # any folder attnlab opens
    r = m.forward("The cat sat on the mat.")
    r.tokens, r.ids, r.attentions                     # [layers, heads, T, T]
    attnlab.figure(r, r.tokens, layer=2, path="l2.png")

    # attention your own code produced (transformers, TransformerLens, any module):
    attnlab.show(outputs.attentions, tokens)          # the desktop app, one window reused
    attnlab.head_view(outputs.attentions, tokens)     # BertViz's signature

docs/python.md walks through it.
"""

from ._engine import Error, Model, Result, backends, default_model_dir, load_attention
from ._engine import __version__
from ._views import Figure, as_attention, figure, head_view, save_attention, show



def _cache(self, text=None, names=("*",), **kwargs):
    """The named activations of one pass ({name: array}), TransformerLens's run_with_cache:
    names are hook names or globs ("blocks.*.attn.hook_pattern"); Model.hook_names lists them."""
    return self.forward(text, cache=[names] if isinstance(names, str) else list(names), **kwargs).cache


def _patch(self, text=None, values=None, **kwargs):
    """One pass with activations replaced ({name: array, or (array, positions)}), TransformerLens's
    run_with_hooks for the common case: a patched activation's later layers see the new values."""
    return self.forward(text, patch=dict(values or {}), **kwargs)


Model.cache = _cache
Model.patch = _patch

__all__ = [
    "Error",
    "Figure",
    "Model",
    "Result",
    "as_attention",
    "backends",
    "default_model_dir",
    "figure",
    "head_view",
    "load_attention",
    "save_attention",
    "show",
    "__version__",
]
