"""Baselines that several papers compare against: retrieve-then-read, CRAG, Self-RAG, IRCoT and ReAct."""
