"""``python -m workrun`` is the ``workrun`` command."""

from workrun.cli.entry import main

main()
