"""The ``agentbus`` command line (typer)."""
