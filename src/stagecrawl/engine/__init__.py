"""The generic crawl engine: fetcher, rate limits, crawler, frontier, JSON store.

Nothing in this package knows about crates or aircraft.
"""
