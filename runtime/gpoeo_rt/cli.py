"""The `gpoeo-rt` command line: it parses, calls into the layers below and prints; it holds no logic."""

from typing import Annotated

import typer

from gpoeo_rt import __version__

app = typer.Typer(
    name="gpoeo-rt",
    no_args_is_help=True,
    add_completion=False,
    help="gpoeo runtime: choose GPU clocks online to cut training energy within a slowdown bound.",
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"gpoeo-rt {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """gpoeo runtime: choose GPU clocks online to cut training energy within a slowdown bound."""


@app.command()
def version() -> None:
    """Print the version."""
    typer.echo(f"gpoeo-rt {__version__}")


trace_app = typer.Typer(
    no_args_is_help=True, help="Record NVML traces (read-only) and detect iteration periods in them."
)
app.add_typer(trace_app, name="trace")

# --- trace record (sampling layer) ---

# --- trace detect (detection layer) ---
