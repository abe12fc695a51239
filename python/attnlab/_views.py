"""Attention from anywhere into attnlab's views: the desktop app (show, head_view) and its export
figures (figure). Whatever the attention came from, it goes through one file in attnlab's attention
format (docs/attention-files.md), read by the same code as `attnlab --attention` and
`attnlab-cli export --attention`: what a notebook shows is what the app and the CLI show."""

import os
import re
import shutil
import subprocess
import tempfile
import time
import warnings

import numpy as np

from . import _engine

_PATTERN = re.compile(r"^blocks\.(\d+)\.attn\.hook_pattern$")


def _numpy(x):
    """A torch tensor (any device, any dtype) or an array-like as a float32 numpy array."""
    if hasattr(x, "detach"):  # torch.Tensor, without importing torch
        x = x.detach()
        if hasattr(x, "float"):
            x = x.float()
        x = x.cpu().numpy()
    return np.asarray(x, dtype=np.float32)


def _pick_batch(a, batch, what):
    """[batch, heads, T, S] -> [heads, T, S]: the one sequence, or `batch`."""
    if a.ndim == 3:
        if batch not in (None, 0):
            raise ValueError(f"{what} has no batch axis; batch={batch} does not apply")
        return a
    if a.ndim != 4:
        raise ValueError(
            f"{what} has shape {list(a.shape)}: expected [heads, T, S] or [batch, heads, T, S] per layer "
            "(did the model run with output_attentions=True?)"
        )
    if batch is None:
        if a.shape[0] != 1:
            raise ValueError(f"{what} holds a batch of {a.shape[0]} sequences: choose one with batch=N")
        batch = 0
    if not 0 <= batch < a.shape[0]:
        raise ValueError(f"batch={batch}: {what} holds {a.shape[0]} sequences")
    return a[batch]


def as_attention(attention, batch=None):
    """Attention in any of the shapes people have it, as one float32 array [layers, heads, T, S]:

    - transformers' `outputs.attentions` (a tuple of [batch, heads, T, S] tensors, one per layer),
      or a list of numpy arrays or torch tensors shaped like that or [heads, T, S];
    - one array or tensor [layers, heads, T, S], [heads, T, S] (one layer) or
      [layers, batch, heads, T, S] (torch.stack(outputs.attentions));
    - a TransformerLens ActivationCache, or any mapping with `blocks.{l}.attn.hook_pattern` entries
      ([batch, heads, T, S]; attnlab's own Result.cache holds them without the batch axis);
    - an attnlab Result (its attentions).

    batch picks a sequence of a batch (required when there is more than one)."""
    if isinstance(attention, _engine.Result):
        return attention.attentions
    if attention is None:
        raise ValueError("no attention given (transformers: run the model with output_attentions=True)")
    if hasattr(attention, "attentions") and not hasattr(attention, "shape"):  # a transformers ModelOutput
        if attention.attentions is None:
            raise ValueError("the model's output holds no attentions: run it with output_attentions=True")
        attention = attention.attentions
    if hasattr(attention, "keys") and callable(attention.keys):  # a mapping: TransformerLens's cache
        layers = {}
        for key in attention.keys():
            hit = _PATTERN.match(str(key))
            if hit:
                layers[int(hit.group(1))] = key
        if not layers:
            raise ValueError("the cache holds no blocks.{l}.attn.hook_pattern entries (cache them first)")
        missing = sorted(set(range(max(layers) + 1)) - set(layers))
        if missing:
            raise ValueError(f"the cache has no blocks.{missing[0]}.attn.hook_pattern")
        attention = [attention[layers[l]] for l in range(len(layers))]
    if isinstance(attention, (tuple, list)):
        if not attention:
            raise ValueError("no layers of attention given")
        per_layer = [_pick_batch(_numpy(a), batch, f"layer {l}'s attention") for l, a in enumerate(attention)]
        shapes = {a.shape for a in per_layer}
        if len(shapes) != 1:
            raise ValueError(f"the layers' attentions differ in shape: {sorted(shapes)}")
        out = np.stack(per_layer)
    else:
        out = _numpy(attention)
        if out.ndim in (3, 4) and batch not in (None, 0):
            raise ValueError(f"attention of shape {list(out.shape)} ([layers, heads, T, S] or [heads, T, S]) has no "
                             f"batch axis; batch={batch} does not apply (pass the per-layer tuple or a stack)")
        if out.ndim == 5:
            out = np.stack([_pick_batch(out[l], batch, f"layer {l}'s attention") for l in range(out.shape[0])])
        elif out.ndim == 3:
            out = out[None]
        elif out.ndim != 4:
            raise ValueError(
                f"attention of shape {list(out.shape)}: expected [layers, heads, T, S], [heads, T, S] or "
                "[layers, batch, heads, T, S]"
            )
    return np.ascontiguousarray(out, dtype=np.float32)


def _strings(tokens, what):
    if isinstance(tokens, str):
        raise ValueError(f"{what} must be a list of strings, not one string")
    tokens = list(tokens)
    if any(not isinstance(t, str) for t in tokens):
        raise ValueError(f"{what} must be strings, got {type(tokens[0]).__name__ if tokens else '?'}s "
                         "(token ids? tokenizer.convert_ids_to_tokens(ids) gives their strings)")
    if not tokens:
        raise ValueError(f"{what} is empty")
    return tokens


def save_attention(path, attention, tokens, tokens_b=None, mask=None, batch=None):
    """Writes attention (anything as_attention takes) and its tokens as an attnlab attention file
    (.npz): what `attnlab --attention FILE` and `attnlab-cli export --attention FILE` open. Returns
    the path. The engine reads it back before this returns, so a file it would refuse is an error
    here, with its message."""
    path = _write(path, as_attention(attention, batch), tokens, tokens_b, _mask_row(mask, batch))
    try:
        read = _engine.load_attention(path)  # attnlab.Error naming what the views would refuse
    except _engine.Error as e:
        os.remove(path)  # a file the views refuse is not left behind
        raise _engine.Error(str(e).replace(path, "the attention")) from None
    for w in read["warnings"]:  # rows that do not sum to 1, ...: drawn, and said
        warnings.warn(f"attnlab: {w}", stacklevel=3)
    return path


def _write(path, a, tokens, tokens_b, mask):
    """The file, unchecked: save_attention reads it back; figure leaves that to attnlab-cli, which
    reads it anyway (one read of a large attention, not two)."""
    arrays = {"attentions": a, "tokens": np.array(_strings(tokens, "tokens"), dtype=np.str_)}
    if tokens_b is not None:
        arrays["tokens_b"] = np.array(_strings(tokens_b, "tokens_b"), dtype=np.str_)
    if mask is not None:
        arrays["mask"] = mask
    path = os.fspath(path)
    if not path.endswith(".npz"):
        raise ValueError(f"{path}: an attention file is written as .npz")
    np.savez(path, **arrays)
    return path


def _mask_row(mask, batch):
    """Hugging Face's attention_mask ([S] or [batch, S]) as the chosen sequence's [S] row of 0 / 1."""
    if mask is None:
        return None
    m = np.asarray(_numpy(mask)).astype(np.int64)
    if m.ndim == 2:
        if batch is None and m.shape[0] != 1:
            raise ValueError(f"the mask holds a batch of {m.shape[0]} sequences: choose one with batch=N")
        m = m[batch or 0]
    return m


def _tool(name, env):
    """attnlab's executables: $ATTNLAB_CLI / $ATTNLAB_APP, else on PATH (the Debian package)."""
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        raise _engine.Error(
            f"{name} not found: install attnlab (its Debian package, or scripts/attnlab.sh build) "
            f"or set {env}=/path/to/{name}"
        )
    return path


def _index(i, n, what):
    """A layer or head as attnlab-cli takes it: "all", or 0..n-1 (negative ints count from the end)."""
    if isinstance(i, str) and i == "all":
        return i
    if isinstance(i, (int, np.integer)) and not isinstance(i, bool):
        if -n <= i < n:
            return str(int(i) % n)
        raise ValueError(f"{what} {i}: the attention has {n} {what}s (0 to {n - 1})")
    raise ValueError(f"{what}: expected an int or \"all\", got {i!r}")


class Figure:
    """An exported figure that Jupyter shows inline: a file (PNG, SVG or PDF) at path, or, made
    without a path, a PNG held in memory (data; save(path) writes it)."""

    def __init__(self, path, data=None, kind=None):
        self.path = path
        self._data = data
        self.kind = kind or os.path.splitext(path)[1].lstrip(".").lower()

    @property
    def data(self):
        if self._data is not None:
            return self._data
        with open(self.path, "rb") as f:
            return f.read()

    def save(self, path):
        with open(path, "wb") as f:
            f.write(self.data)
        return path

    def _repr_png_(self):
        return self.data if self.kind == "png" else None

    def _repr_svg_(self):
        return self.data.decode("utf-8") if self.kind == "svg" else None

    def __fspath__(self):
        if self.path is None:
            raise TypeError("this figure is in memory: figure(..., path=...) or Figure.save(path) writes a file")
        return self.path

    def __repr__(self):
        return f"<attnlab.Figure {self.path or 'in memory, ' + str(len(self._data)) + ' bytes of PNG'}>"


def figure(
    attention,
    tokens,
    layer=0,
    heads=None,
    path=None,
    tokens_b=None,
    batch=None,
    width=None,
    height=None,
    dpi=150,
    colormap="viridis",
    title=None,
    annotate=False,
    scale="max",
    mask=None,
):
    """The export figure of one layer, without a display: every head (heads=None), or one head
    (heads=H). layer may be "all" (every layer's grid). path: .png, .svg or .pdf (default: a
    PNG held in memory). mask: Hugging Face's attention_mask (padding drawn grey). colormap:
    viridis, magma, inferno, plasma, cividis or greys; scale: "max" (the figure's largest value
    is the top colour) or "0-1". The figure is `attnlab-cli export`'s, so the same attention gives the same file
    here and there. Returns a Figure (shown inline in Jupyter)."""
    if isinstance(heads, (list, tuple)):
        if len(heads) != 1:
            raise ValueError("figure draws every head (heads=None) or one (heads=H)")
        heads = heads[0]
    a = as_attention(attention, batch)
    layer = _index(layer, a.shape[0], "layer")
    heads = "all" if heads is None else _index(heads, a.shape[1], "head")
    cli = _tool("attnlab-cli", "ATTNLAB_CLI")
    work = tempfile.mkdtemp(prefix="attnlab-")
    try:
        source = _write(os.path.join(work, "attention.npz"), a, tokens, tokens_b, _mask_row(mask, batch))
        in_memory = path is None
        path = os.path.join(work, "figure.png") if in_memory else os.fspath(path)
        cmd = [cli, "export", "--attention", source, "--out", path, "--layer", layer, "--head", heads]
        cmd += ["--dpi", str(dpi), "--colormap", colormap, "--scale", scale]
        if width:
            cmd += ["--width", str(width)]
        if height:
            cmd += ["--height", str(height)]
        if title:
            cmd += ["--title", title]
        if annotate:
            cmd += ["--annotate"]
        env = dict(os.environ)
        env.setdefault("QT_QPA_PLATFORM", "offscreen")  # no display needed
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        said = done.stderr.replace(source, "the attention")
        for line in said.splitlines():  # what the file's check said: rows that do not sum to 1, ...
            if ": warning: " in line:
                warnings.warn("attnlab: " + line.split(": warning: ", 1)[1], stacklevel=2)
        if done.returncode != 0:
            lines = [l for l in said.strip().splitlines() if l]
            last = lines[-1] if lines else "attnlab-cli export failed"
            for prefix in ("attnlab-cli export: error: ", "attnlab-cli: error: ", "attnlab-cli: "):
                last = last.removeprefix(prefix)
            raise _engine.Error(last)
        if in_memory:
            with open(path, "rb") as f:
                return Figure(None, f.read(), "png")
        return Figure(path)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _show_dir():
    """This user's folder of files handed to the app ($TMPDIR/attnlab-show-UID)."""
    d = os.path.join(tempfile.gettempdir(), f"attnlab-show-{os.getuid()}")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def show(attention, tokens, tokens_b=None, layer=None, batch=None, mask=None, app_args=()):
    """Opens attention (anything as_attention takes) in the desktop app: Heads, Lines, All layers,
    Head, Patterns and Beyond attention's rollout and means. Later calls show theirs in the same
    window (attnlab --attention FILE --reuse-window). Returns the attention file written; the
    app reads it whole when it opens it, and the next call removes the files of earlier calls.
    attnlab.Error when the app cannot start or refuses the file, with its message."""
    if isinstance(app_args, str):
        raise TypeError("app_args is a list of arguments, e.g. ['--tab', 'lines']")
    app = _tool("attnlab", "ATTNLAB_APP")
    a = as_attention(attention, batch)
    if layer is not None:
        layer = _index(layer, a.shape[0], "layer")
    folder = _show_dir()
    for old in os.listdir(folder):  # earlier calls' files: their window read them long ago
        if time.time() - os.path.getmtime(os.path.join(folder, old)) > 60:
            os.remove(os.path.join(folder, old))
    fd, path = tempfile.mkstemp(prefix="attention-", suffix=".npz", dir=folder)
    os.close(fd)
    try:
        save_attention(path, a, tokens, tokens_b, mask=_mask_row(mask, batch))
        cmd = [app, "--attention", path, "--reuse-window"] + (["--layer", layer] if layer is not None else [])
        log = tempfile.TemporaryFile()
        proc = subprocess.Popen(cmd + list(app_args), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)
        try:  # a window already open answers at once; a new window keeps running
            code = proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            return path
        log.seek(0)
        said = log.read().decode("utf-8", "replace")
        if code != 0:
            lines = [l for l in said.splitlines() if l.startswith("attnlab:")]
            raise _engine.Error((lines[-1].removeprefix("attnlab: ") if lines else said.strip()) or
                                f"attnlab exited with {code}")
        if "opened " in said:  # handed to the open window, which has read it
            os.remove(path)
        return path
    except BaseException:
        if os.path.exists(path):
            os.remove(path)
        raise


def _prettify(tokens):
    """BertViz's format_special_chars: byte-level BPE's space marks and end-of-word marks out."""
    return [t.replace("Ġ", " ").replace("▁", " ").replace("</w>", "") for t in tokens]


def head_view(
    attention=None,
    tokens=None,
    sentence_b_start=None,
    prettify_tokens=True,
    layer=None,
    heads=None,
    encoder_attention=None,
    decoder_attention=None,
    cross_attention=None,
    encoder_tokens=None,
    decoder_tokens=None,
    include_layers=None,
    html_action="view",
    batch=None,
):
    """BertViz's head_view, in attnlab: `from attnlab import head_view` in place of
    `from bertviz import head_view` moves a notebook over. html_action "view" opens the desktop app
    on the attention (show); "return" gives the figure of `layer` (Figure, shown inline in Jupyter)
    instead, for notebooks with no display (one head when heads names one, else every head).
    Cross attention (cross_attention with encoder_tokens and decoder_tokens) opens as attnlab's
    cross view; sentence_b_start is checked (attnlab's views keep one token axis for the pair). BertViz's one view of encoder, decoder and cross attention
    together is attnlab's cross view (cross_attention); encoder_attention alone opens the encoder's
    self-attention. batch (not in BertViz) picks a sequence of a batch."""
    if attention is not None:
        if tokens is None:
            raise ValueError("'tokens' is required")
        if any(x is not None for x in (encoder_attention, decoder_attention, cross_attention, encoder_tokens,
                                       decoder_tokens)):
            raise ValueError("If you specify 'attention' you may not specify any encoder-decoder arguments. This"
                             " argument is only for self-attention models.")
        a, rows, cols = as_attention(attention, batch), list(tokens), None
    elif cross_attention is not None:  # with encoder and decoder attention too: the cross view
        if encoder_tokens is None or decoder_tokens is None:
            raise ValueError("'encoder_tokens' and 'decoder_tokens' are required with 'cross_attention'")
        a, rows, cols = as_attention(cross_attention, batch), list(decoder_tokens), list(encoder_tokens)
    elif encoder_attention is not None or decoder_attention is not None:
        which = "encoder" if encoder_attention is not None else "decoder"
        seq = encoder_tokens if encoder_attention is not None else decoder_tokens
        if seq is None:
            raise ValueError(f"'{which}_tokens' required if '{which}_attention' is not None")
        a = as_attention(encoder_attention if encoder_attention is not None else decoder_attention, batch)
        rows, cols = list(seq), None
    else:
        raise ValueError("You must specify at least one attention argument.")
    given_layers = bool(include_layers)
    include_layers = list(range(a.shape[0])) if not include_layers else list(include_layers)
    if layer is not None and not given_layers:
        layer = int(_index(layer, a.shape[0], "layer"))  # -1: the last, as in figure
    if any(not 0 <= l < a.shape[0] for l in include_layers):
        raise ValueError(f"include_layers {include_layers}: the attention has {a.shape[0]} layers")
    # BertViz leaves layers out to stay responsive; attnlab's views draw every layer at any
    # length, so all are kept (layers keep their numbers) and include_layers only checks `layer`
    if layer is not None and layer not in include_layers:
        raise ValueError(f"Layer {layer} is not in include_layers: {include_layers}")
    if a.shape[2] != len(rows):
        raise ValueError(f"Attention has {a.shape[2]} positions, while number of tokens is {len(rows)}")
    if a.shape[3] != len(cols if cols is not None else rows):
        raise ValueError(f"Attention has {a.shape[3]} positions, while number of tokens is "
                         f"{len(cols if cols is not None else rows)}")
    if sentence_b_start is not None and not 0 < sentence_b_start < len(rows):
        raise ValueError(f"sentence_b_start={sentence_b_start}: expected a position inside the {len(rows)} tokens")
    if prettify_tokens:
        rows = _prettify(rows)
        cols = _prettify(cols) if cols is not None else None
    shown = layer if layer is not None else include_layers[0]
    if html_action == "view":
        return show(a, rows, tokens_b=cols, layer=shown)
    if html_action == "return":
        one = heads[0] if isinstance(heads, (list, tuple)) and len(heads) == 1 else heads if isinstance(
            heads, (int, np.integer)) else None
        return figure(a, rows, layer=shown, heads=one, tokens_b=cols)
    raise ValueError("'html_action' parameter must be 'view' or 'return'")
