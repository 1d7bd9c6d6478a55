"""Loaded by every Python process started with PYTHONPATH=tests/tinker/stubs.

Workaround (a) of docs reference §16.1: skyrl 0.3.0 declares Python >= 3.11 but
puts a `typing.TypedDict` inside a pydantic model, which pydantic refuses below
3.12 ("Please use typing_extensions.TypedDict instead"). Alias it.

Also: when METACLAW_PDEATHSIG is set (scripts/skyrl-cpu sets it), ask Linux to
send this process SIGTERM when its parent dies, so neither the API server nor
the engine it spawns can outlive the script that started them.
"""

import os
import sys

if sys.version_info < (3, 12):
    import typing

    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict

if os.environ.get("METACLAW_PDEATHSIG") and sys.platform.startswith("linux"):
    try:
        import ctypes
        import signal

        _PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        # The parent may already have gone between fork and prctl.
        if os.getppid() == 1:
            os.kill(os.getpid(), signal.SIGTERM)
    except Exception:  # best effort: the script also forwards SIGTERM itself
        pass
