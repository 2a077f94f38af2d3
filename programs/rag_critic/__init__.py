"""RAG-Critic: an error critic with a three-tier taxonomy, a planner of typed corrections, their executor, and Self-Refine."""
