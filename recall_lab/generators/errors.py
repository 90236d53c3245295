"""The one exception type for bad user input, shared by every layer.

It lives here (numpy-only package) so that `generators` can raise it and `recall_lab` can catch it
without the data layer importing torch. The CLI turns it into one line on stderr and exit code 2.
"""


class RecallLabError(ValueError):
    """Bad input or a bad file: the message is one line a user can act on."""


# An error line names at most this many candidates for a mistyped name (the nearest first), and
# fewer where the line would pass MAX_LINE characters with its "error: " prefix; the command it
# names lists them all.
NEAREST = 5
MAX_LINE = 200


def unknown(kind: str, name: str, known: list[str], lists: str, more: str = "") -> str:
    """The one-line message for a name that is not one of `known`: the nearest names
    (difflib's ratio, best first, at most NEAREST), the command that lists every one (`lists`)
    and `more` (other ways to name one)."""
    import difflib

    scored = sorted(known, key=lambda k: -difflib.SequenceMatcher(None, name, k).ratio())
    for n in range(NEAREST, 0, -1):
        text = (f"unknown {kind} {name!r}; nearest: {', '.join(scored[:n])} ({lists} lists "
                f"all){more}")
        if len("error: " + text) <= MAX_LINE:
            break
    return text
