"""Test helpers shipped with the package: the loopback test origin (used by tests, bench, demo)."""
