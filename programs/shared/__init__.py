"""What every method family shares: the writer, evidence helpers, text helpers and the oracle roles."""
