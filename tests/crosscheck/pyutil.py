"""Helpers shared by the Python cross-checks (run as scripts: this folder is on sys.path)."""
import json
import struct


def save_safetensors(path, tensors):
    """Writes {name: torch tensor} as an F32 safetensors file, written out by hand (the format is
    an 8-byte header length, a JSON header padded to 8 bytes, then the raw little-endian data)."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().float().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load_safetensors(path):
    """Reads an F32 safetensors file into {name: numpy array} (the layout save_safetensors writes)."""
    import numpy as np
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"])
    return out


# ------------------------------------------------------------------ error bounds
# The Python twin of tests/engine/tolerance.h: bounds derived from the computation (float32's unit
# roundoff, the reduction length, the values' scale), so that a cross-check passes on every CPU
# of our kind and every oneDNN code path, not only on the one it was first run on.

U32 = 2.0 ** -24  # float32 unit roundoff: a correctly rounded operation errs by at most U32 relative


def sum_bound_prob(K, abs_sum, lam=8.0):
    """|a - b| for two float32 evaluations of one sum of K terms whose magnitudes add up to abs_sum,
    in two different orders: independent roundings add like a random walk, so each errs by at most
    lam * sqrt(K) * U32 * abs_sum with probability >= 1 - 2 exp(-lam^2 / 2) (Higham & Mary, SIAM
    J. Sci. Comput. 2019, Thm. 2.4); lam = 8 makes that 2.5e-14 per entry."""
    return 2.0 * lam * (K + 1) ** 0.5 * U32 * abs_sum


# How far attnlab's float32 result may be from the float64 oracle, in units of float32 PyTorch's
# own distance from it. No closed form bounds a whole network's float32 error usefully (LayerNorm
# divides by each row's standard deviation, softmax and GELU are only locally Lipschitz), so the
# network's conditioning is measured: the same computation in float32 PyTorch on the same weights
# and input errs by e32 = max |ref32 - ref64|. To first order a float32 result's error is the sum
# over its operations of (the rest of the network's sensitivity) x (that operation's rounding);
# attnlab and PyTorch round the same operations with the same per-operation bounds (gamma_K per
# reduction of length K) and differ only in summation order and in exp/erf/tanh implementations
# (within a few ulp), so their errors are of the same size; the maximum over a tensor's entries is
# a stable statistic. The largest ratio seen (attnlab's error over PyTorch's, AMD EPYC, 2026-12-01)
# was 1.8 (value-norm on the ill-conditioned post-LN model of analysis_crosscheck); 8x leaves room
# for another CPU's summation orders and stays orders of magnitude below a real bug's error.
IMPL_RATIO = 8.0


def oracle_bound(ref32, ref64, floor):
    """The bound for |attnlab - ref64|: IMPL_RATIO times float32 PyTorch's own error
    |ref32 - ref64|, and never below `floor` (a first-principles bound from sum_bound_prob for the
    computation's reductions, for when PyTorch's error happens to be tiny by cancellation)."""
    import numpy as np
    ref32, ref64 = np.asarray(ref32, dtype=np.float64), np.asarray(ref64, dtype=np.float64)
    e32 = float(np.nanmax(np.abs(ref32 - ref64))) if ref32.size else 0.0
    return max(floor, IMPL_RATIO * e32)


def stack_floor(layers, K, abs_sum=1.0):
    """The floor for a stack of `layers` blocks whose longest reduction has K terms with
    magnitudes adding up to about abs_sum (a probability row: 1; a hidden state: its largest
    |value|, LayerNorm keeping rows near unit scale): each block adds one such sum's error."""
    return layers * sum_bound_prob(K, abs_sum)


class WorstShare:
    """The worst comparison of each kind over many, as a share of its bound: note(kind, got, want,
    want32, floor) compares got with the float64 oracle want within oracle_bound(want32, want,
    floor); failed() lists the kinds whose worst share is over 1."""

    def __init__(self, *kinds):
        self.worst = {k: (0.0, 0.0) for k in kinds}  # kind: (err / bound, err)

    def note(self, kind, got, want, want32, floor):
        import numpy as np
        err = float(np.abs(np.asarray(got, dtype=np.float64) - np.asarray(want, dtype=np.float64)).max())
        bound = oracle_bound(want32, want, floor)
        if err / bound > self.worst[kind][0]:
            self.worst[kind] = (err / bound, err)

    def summary(self, names):
        return ", ".join(f"{names[k]} {e:.2e} ({share:.2f})" for k, (share, e) in self.worst.items())

    def failed(self, names):
        return [f"{names[k]} differ by {e:.3e}, {share:.2f}x the bound" for k, (share, e) in self.worst.items()
                if share > 1]


class CliChecks:
    """What the transformers cross-checks share: run attnlab-cli (a failing command raises with
    its stderr) and collect failures (printed as they come)."""

    def __init__(self, cli):
        self.cli = cli
        self.failures = []

    def fail(self, msg):
        self.failures.append(msg)
        print("FAIL:", msg[:2000])

    def run(self, args, check=True):
        import subprocess
        p = subprocess.run([self.cli] + args, capture_output=True, text=True)
        if check and p.returncode != 0:
            raise RuntimeError(f"attnlab-cli {' '.join(args[:3])} failed: {p.stderr}")
        return p
