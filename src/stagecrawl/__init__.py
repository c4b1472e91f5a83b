"""stagecrawl: polite, durable, staged collection of package and specification data."""

__version__ = "0.1.0"
