"""Measuring programs: the checkpointed evaluation loop, metrics, MLflow tracking, statistics, plots and leaderboards."""
