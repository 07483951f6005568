"""The command-line interface (typer + rich), one module per command group."""
