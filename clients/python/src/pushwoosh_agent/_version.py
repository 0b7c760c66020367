"""The package's version: the same as pushwoosh-agentd's (``StatusReport.version``)."""

__version__ = "0.1.0"
