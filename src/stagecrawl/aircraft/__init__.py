"""The aircraft pipeline: manufacturers → models → specifications from Wikidata (CC0)."""
