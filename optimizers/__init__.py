"""Compilation (teleprompters), metrics, evaluation loop and MLflow tracking."""
