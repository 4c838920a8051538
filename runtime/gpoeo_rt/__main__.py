"""`python -m gpoeo_rt` runs the `gpoeo-rt` command line."""

from gpoeo_rt.cli import app

app(prog_name="gpoeo-rt")
