"""The package layer order and the no-circles rule (``[tool.importlinter]`` in pyproject.toml) hold."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True, no_logo=True))"


def test_import_contracts_are_kept():
    run = subprocess.run([sys.executable, "-c", LINT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"an import breaks the layer contract:\n{run.stdout}{run.stderr}"
    assert "0 broken" in run.stdout
