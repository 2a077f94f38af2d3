"""What MLflow params may hold: never the credentials of an ``--api-base`` URL."""
import mlflow

from optimizers import tracking


def test_api_base_credentials_are_not_logged_as_params():
    with tracking.run("redact", "r") as run:
        tracking.log_params({"api_base": "https://user:s3cret@llm.example.org:8443/v1?api-key=k3y&deployment=x",
                             "lm": "openai/gpt-4o-mini", "plain": "http://127.0.0.1:8080/v1"})
    params = mlflow.get_run(run.info.run_id).data.params
    assert params["api_base"] == "https://***@llm.example.org:8443/v1?api-key=***&deployment=***"
    assert params["plain"] == "http://127.0.0.1:8080/v1" and params["lm"] == "openai/gpt-4o-mini"
