"""The code of a compiled program's MLflow Model (``evaluation.serving``): MLflow runs this file to load it."""
import mlflow

from evaluation.serving import ServedProgram

mlflow.models.set_model(ServedProgram())
