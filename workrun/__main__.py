"""``python -m workrun`` is the ``workrun`` command."""

from workrun.cli.main import main

main()
