"""SEAL-RAG: fixed-k Search, Extract, Assess, Loop with an entity ledger."""
