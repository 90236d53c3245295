"""The field audit's findings in zoology's mixers, each as its smallest reproduction.

Run with zoology's source on the path (commit d88d6f5):

    PYTHONPATH=/path/to/zoology python docs/results/field-audit/repro.py

Each finding prints one line with what it measured. Nothing here is zoology's code: the
reference for the long convolution is a plain causal loop written here.
"""

import torch

torch.manual_seed(0)


def long_convolution_reads_the_future() -> str:
    """LongConvolution(d_model, l_max) at length L: fft_conv pads to 2 L, so the filter's taps
    from 2 L on are cut and its taps L + 1 .. 2 L - 1 wrap around onto earlier positions (a
    circular convolution): output t reads inputs after t. So it leaks only when the filter has
    a tap at L + 1, that is when l_max >= L + 2; at l_max <= L + 1 it is the causal loop."""
    from zoology.mixers.convolution import LongConvolution

    d, l_max = 2, 16
    conv = LongConvolution(d_model=d, l_max=l_max).double()
    k = conv.filter.detach()  # (d, l_max)

    def loop(u):  # u (L, d); y[t] = u[t] + sum_{s <= t} k[:, t - s] u[s]: causal
        out = u.clone()
        for t in range(u.shape[0]):
            for s in range(t + 1):
                out[t] += k[:, t - s] * u[s]
        return out

    lines = []
    for length in (l_max, l_max - 1, l_max - 2, 8):  # l_max = L, L + 1: causal; L + 2, 2 L: not
        u = torch.randn(1, length, d, dtype=torch.float64)
        later = u.clone()
        later[:, length // 2:] += 1.0  # change only the second half
        with torch.no_grad():
            moved = (conv(u) - conv(later))[:, : length // 2].abs().max().item()
            gap = (conv(u)[0] - loop(u[0])).abs().max().item()
        lines.append(f"L={length} (l_max = L + {l_max - length}): first half moved {moved:.2e} "
                     f"when the second half changed, max gap to the causal loop {gap:.2e}")
    return "LongConvolution(d_model=2, l_max=16): " + "; ".join(lines)


def bigbird_raises_on_one_token() -> str:
    from zoology.mixers.bigbird import BigBIRDAttention

    try:
        BigBIRDAttention(d_model=16, block_size=16)(torch.randn(1, 1, 16))
        return "BigBIRDAttention on a (1, 1, 16) input: no error"
    except RuntimeError as exc:
        return f"BigBIRDAttention on a (1, 1, 16) input raises RuntimeError: {exc}"


def scatterbrain_forward_is_unfinished() -> str:
    from zoology.mixers.scatterbrain_new import ScatterBrain

    m = ScatterBrain(d_model=16, l_max=128, feature_dim=8, num_key_value_heads=2, num_heads=2)
    try:
        m(torch.randn(1, 4, 16))
        return "ScatterBrain: forward ran"
    except UnboundLocalError as exc:
        return f"ScatterBrain(d_model=16, ...) forward raises UnboundLocalError: {exc}"


def nystrom_reads_the_future() -> str:
    """With more tokens than landmarks each landmark is a mean over a segment of the whole
    sequence, later tokens included, so the masked attention to the landmarks still reads the
    future; with L <= num_landmarks it takes an exact causal softmax branch. `causal` is
    hard-coded True in its __init__ (an argument causal=False is overwritten)."""
    from zoology.mixers.nystromformer.nystromformer import NystromAttention

    m = NystromAttention(d_model=16, num_heads=2, num_landmarks=8).double().eval()
    lines = []
    for length in (24, 8):  # L > num_landmarks: leaks; L = num_landmarks: exact
        x = torch.randn(1, length, 16, dtype=torch.float64)
        later = x.clone()
        later[:, length // 2:] = torch.randn(1, length - length // 2, 16, dtype=torch.float64)
        with torch.no_grad():
            moved = (m(x) - m(later))[:, : length // 2].abs().max().item()
        lines.append(f"L={length}: the first {length // 2} outputs moved {moved:.2e} when the "
                     "later tokens changed")
    off = NystromAttention(d_model=16, num_heads=2, num_landmarks=8, causal=False).causal
    return (f"NystromAttention(num_landmarks=8): {'; '.join(lines)}; built with causal=False "
            f"its causal is {off}")


def nsa_depends_on_the_length() -> str:
    """Causal in the values of later tokens, but not in their number: the same prefix gives
    other outputs inside a longer sequence."""
    from zoology.mixers.deepseek_nsa import SparseAttention

    m = SparseAttention(d_model=16, num_heads=2, sliding_window_size=8, compress_block_size=1,
                        selection_block_size=1, num_selected_blocks=2, causal=True)
    m = m.double().eval()
    x = torch.randn(1, 24, 16, dtype=torch.float64)
    with torch.no_grad():
        moved = (m(x)[:, :12] - m(x[:, :12])).abs().max().item()
    return (f"SparseAttention (NSA, causal=True): outputs 0-11 of a 24-token input differ by "
            f"{moved:.2e} from the same 12 tokens alone")


if __name__ == "__main__":
    import sys

    names = sys.argv[1:]  # optional: only these findings, by function name
    for finding in (long_convolution_reads_the_future, bigbird_raises_on_one_token,
                    scatterbrain_forward_is_unfinished, nystrom_reads_the_future,
                    nsa_depends_on_the_length):
        if not names or finding.__name__ in names:
            print(f"- {finding()}")
