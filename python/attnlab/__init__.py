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
