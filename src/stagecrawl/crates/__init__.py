"""The crates.io pipeline: LIST (which crate versions), worker (collect), tables."""
