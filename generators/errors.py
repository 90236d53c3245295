"""The one exception type for bad user input, shared by every layer.

It lives here (numpy-only package) so that `generators` can raise it and `recall_lab` can catch it
without the data layer importing torch. The CLI turns it into one line on stderr and exit code 2.
"""


class RecallLabError(ValueError):
    """Bad input or a bad file: the message is one line a user can act on."""
