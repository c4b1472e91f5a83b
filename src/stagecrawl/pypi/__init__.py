"""PyPI, the second registry on the core: the Simple API (authoritative for which versions
exist), the JSON API and PEP 658 core metadata (enrichment), PEP 440 versions, Python lock
files. Imports nothing of `stagecrawl.crates`."""
