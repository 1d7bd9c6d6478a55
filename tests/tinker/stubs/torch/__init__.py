"""Stand-in for torch (workaround (b) of docs reference §16.1).

skyrl 0.3.0's JAX backend imports torch only for an isinstance check on
multimodal inputs (skyrl/backends/renderer.py) and a type hint. With
__version__ "0.0.0" and no dist-info, transformers treats torch as absent.
Anything that really needs torch fails loudly.
"""

__version__ = "0.0.0"


class Tensor:  # never instantiated: isinstance(x, torch.Tensor) is always False
    pass


class dtype:
    pass


def cat(*_args, **_kwargs):
    raise RuntimeError("torch stub: torch.cat is not available (CPU test server without torch)")


def __getattr__(name):
    raise AttributeError(f"torch stub has no attribute {name!r} (CPU test server without torch)")
