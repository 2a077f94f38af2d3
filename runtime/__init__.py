"""Runtime: embedded/remote LMs, embedders, per-role LM binding, cost metering, cache locations."""
import os

# Use the model-metadata snapshot bundled with DSPy/LiteLLM instead of fetching it over the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
