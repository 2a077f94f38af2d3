"""PAR2-RAG: breadth-first coverage anchoring, then depth-first refinement gated by an evidence-sufficiency controller."""
