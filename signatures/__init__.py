"""DSPy Signatures grouped by role. Every natural-language instruction given to an LM lives here."""
