"""The web status page served by `run --ui-addr` (read-only; localhost unless told otherwise)."""

from reconciler.ui.server import StatusUI

__all__ = ["StatusUI"]
