"""leasecron: scheduled jobs for many-replica Python apps on Kubernetes.

The public library API is re-exported here and only here.
"""

from leasecron._version import __version__

__all__ = ["__version__"]
