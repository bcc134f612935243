"""The workflow layer and the ``wfm`` command line."""

__version__ = "0.1.0"
