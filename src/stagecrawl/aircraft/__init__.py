"""The aircraft pipeline: manufacturers → models → specifications from Wikidata (CC0).

The constants the command line shows (`aircraft crawl --help`) live here, importing nothing:
the pipeline (aircraft/run.py: the engine, aiohttp) is imported when a command runs."""

PASSES = ("manufacturers", "models", "specs")
# wbgetentities answers at most 50 ids per request (500 for bots): a batch is one request.
MAX_BATCH = 50
