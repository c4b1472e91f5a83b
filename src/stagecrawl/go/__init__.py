"""Go modules: the module proxy, the index feed, go.mod audits (docs/go.md)."""
