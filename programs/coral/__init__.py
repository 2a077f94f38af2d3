"""CORAL (culturally-aligned multilingual RAG) and its paper's multilingual RAG baselines."""
