"""Shared by the benchmarks that start ``workrun`` as a whole process (bench_chain, bench_cli, bench_agent)."""

from __future__ import annotations

from pathlib import Path


def compile_bytecode() -> None:
    """Compile workrun's bytecode first, as an installed package has it: with PYTHONDONTWRITEBYTECODE set
    (as on some CI machines) every ``workrun`` process would otherwise compile its modules again."""
    import compileall

    import workrun
    import workrun_sdk

    for package in (workrun, workrun_sdk):
        compileall.compile_dir(str(Path(package.__file__).parent), quiet=1)
    print("(workrun's bytecode compiled first, as an installed package has it)")
